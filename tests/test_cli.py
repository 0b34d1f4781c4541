"""CLI contracts: cheap start-up, documented commands, JSON fields of docs/records.md, demo without GPU or server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from fleettool.cli import app
from fleettool.model import Event
from fleettool.store import Store
from tests.conftest import run_cli


def test_help_imports_no_heavy_modules() -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from fleettool.cli import app\n"
        "r = CliRunner().invoke(app, ['--help'])\n"
        "assert r.exit_code == 0, r.output\n"
        "heavy = [m for m in ('duckdb', 'pynvml', 'textual', 'torch', 'pyarrow', 'polars') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""


def test_every_command_is_documented_with_an_example() -> None:
    import typer.main

    root = typer.main.get_command(app)
    assert {
        "agent",
        "record",
        "replay",
        "demo",
        "events",
        "alerts",
        "gpus",
        "nccl",
        "rules",
        "silence",
    } <= set(
        root.commands  # type: ignore[attr-defined]
    )

    def leaves(cmd: Any, path: list[str]) -> list[list[str]]:
        if hasattr(cmd, "commands"):  # a group (typer vendors its own click)
            out = [path] if cmd.invoke_without_command else []
            for name, sub in cmd.commands.items():
                out += leaves(sub, [*path, name])
            return out
        return [path]

    paths = [p for name, c in root.commands.items() for p in leaves(c, [name])]  # type: ignore[attr-defined]
    assert ["rules", "test"] in paths and ["alerts", "ack"] in paths and ["alerts"] in paths
    for p in paths:
        r = run_cli(*p, "--help")
        assert r.returncode == 0, r.stderr
        assert "Example: fleettool " + " ".join(p) in " ".join(r.stdout.split()), p
    top = run_cli("--help")
    assert "Exit codes:" in top.stdout and "4 database locked" in " ".join(top.stdout.split())


def test_events_json_has_the_fields_design_fixes(db: Path) -> None:
    with Store(db) as s:
        s.write_events(
            [
                Event(
                    1796000000.5,
                    "gpu-21",
                    "xid",
                    "GPU has fallen off the bus.",
                    gpu=3,
                    code=79,
                    pci_bus_id="0000:5d:00",
                ),
                Event(None, "gpu-21", "agent", "collector nvml hung"),
            ]
        )
    r = run_cli("events", "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert rows[0] == {
        "ts": "2026-11-30T00:53:20.500Z",
        "node": "gpu-21",
        "gpu": 3,
        "uuid": None,
        "pci_bus_id": "00000000:5D:00.0",  # nvidia-smi's form, whatever came in
        "kind": "xid",
        "code": 79,
        "message": "GPU has fallen off the bus.",
        "source": "",
    }
    assert rows[1]["ts"] is None and rows[1]["gpu"] is None and rows[1]["code"] is None


def test_alerts_json_is_an_array_with_the_contract_fields(db: Path) -> None:
    with Store(db) as s:
        s.con.execute(
            "INSERT INTO alerts VALUES ('a1', 'GpuFellOffBus', 'gpu-lost', 'critical', 'gpu-21', 3, 'GPU-x', "
            "'reboot-node', 'firing', '2026-11-30 00:30:00', '2026-11-30 00:31:00', 'GPU 3 fell off the bus', "
            "'runbooks/GpuFellOffBus.md', '{}')"
        )
    r = run_cli("alerts", "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr
    (a,) = json.loads(r.stdout)
    assert set(a) >= {
        "rule",
        "category",
        "severity",
        "node",
        "gpu",
        "action",
        "state",
        "first_seen",
        "last_seen",
        "summary",
        "runbook",
    }
    assert a["first_seen"] == "2026-11-30T00:30:00Z" and a["gpu"] == 3


def test_read_commands_on_a_missing_or_foreign_db_exit_with_documented_codes(tmp_path: Path) -> None:
    r = run_cli("events", "--db", str(tmp_path / "none.duckdb"))
    assert r.returncode == 3 and r.stderr == f"fleettool: {tmp_path / 'none.duckdb'}: no such database\n"
    junk = tmp_path / "junk.duckdb"
    junk.write_text("not a database\n" * 100)
    r = run_cli("events", "--db", str(junk))
    assert r.returncode == 5 and "junk.duckdb" in r.stderr and r.stderr.count("\n") == 1


def test_demo_runs_without_gpu_or_server_and_shows_findings() -> None:
    r = run_cli("demo", timeout=180)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "h200-vm gpu 0 NVIDIA H200" in out
    assert "gpu-07 gpu 2" in out and "sw_thermal_slowdown" in out  # the thermal fault in the bundled scenario
    assert "normal: sw_power_cap" in out  # power capping is shown as normal, not as a finding


def test_demo_keeps_its_store_with_db_and_names_the_next_step(tmp_path: Path) -> None:
    """`demo --db PATH` keeps the store it replayed into and says how to open it in the TUI; the store reads
    back with the demo's alert. Without --db it says how to keep one."""
    import json

    db = tmp_path / "my demo.duckdb"
    r = run_cli("demo", "--db", str(db), timeout=180)
    assert r.returncode == 0, r.stderr
    assert f"next: open what it found in the dashboard:\n  fleettool tui --db '{db}'\n" in r.stdout
    alerts = json.loads(run_cli("alerts", "--db", str(db), "--json").stdout)
    assert [(a["node"], a["gpu"], a["category"]) for a in alerts] == [("gpu-07", 2, "thermal")]
    bare = run_cli("demo", timeout=180)
    assert bare.returncode == 0 and "`fleettool demo --db demo.duckdb` keeps it" in bare.stdout


def test_an_unexpected_exception_is_one_line_and_exit_70() -> None:
    """The last line of defence: a bug is one line (and FLEETTOOL_DEBUG=1 gives the traceback)."""
    code = (
        "import sys\n"
        "from fleettool.cli import app, main\n"
        "@app.command('boom')\n"
        "def boom() -> None:\n"
        "    raise KeyError('no such\\nthing')\n"
        "sys.argv = ['fleettool', 'boom']\n"
        "main()\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 70, r.stderr
    assert r.stderr.splitlines() == [
        "fleettool: internal error: KeyError: 'no such\\nthing' "
        "(set FLEETTOOL_DEBUG=1 for the traceback; please report it)"
    ]
    env = {**os.environ, "FLEETTOOL_DEBUG": "1"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode != 0 and "Traceback" in r.stderr and "KeyError" in r.stderr


def test_usage_errors_are_one_line_naming_the_option(db: Path) -> None:
    for args, needle in (
        (("events", "--limit", "-1"), "--limit"),
        (("events", "--limitt", "3"), "--limitt"),
        (("silence", "add", "--node", "n", "--for", "0"), "--for"),
        (("agent", "--interval", "0s"), "--interval"),
    ):
        r = run_cli(*args, "--db", str(db))
        assert r.returncode == 2, (args, r.stderr)
        (line,) = r.stderr.splitlines()
        assert line.startswith(f"fleettool: {args[0]}") and needle in line and "--help" in line, line
    assert not db.exists()  # none of them created the database


def test_help_lists_every_exit_code() -> None:
    from fleettool.cli.exit_codes import ExitCode

    text = " ".join(run_cli("--help").stdout.split())
    for code in ExitCode:
        if code != ExitCode.OK:
            assert f"; {int(code)} " in text, code
    assert "5 not a fleettool database" in text and "8 something needed is unavailable" in text


def test_version_prints_the_package_version() -> None:
    import fleettool

    r = run_cli("--version")
    assert (r.returncode, r.stdout, r.stderr) == (0, f"fleettool {fleettool.__version__}\n", "")
    from importlib.metadata import version

    assert fleettool.__version__ == version("fleettool")  # the package's metadata says the same


def _bash(script: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home), "SHELL": "/bin/bash"}
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, env=env)


def _complete(words: str, home: Path, setup: str) -> list[str]:
    """What bash offers after `words` (the last one partial), through the completion function `setup` loads."""
    argv = words.split(" ")
    script = (
        f"{setup}\nCOMP_WORDS=({' '.join(argv)}); COMP_CWORD={len(argv) - 1}; "
        '_fleettool_completion fleettool; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    r = _bash(script, home)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_shell_completion_is_shown_installed_and_completes_in_bash(tmp_path: Path) -> None:
    r = run_cli("--show-completion", "bash")
    assert r.returncode == 0 and "complete -o default -F _fleettool_completion fleettool" in r.stdout, (
        r.stderr
    )
    shown = tmp_path / "shown.sh"
    shown.write_text(r.stdout)
    src = f"source {shown}"
    assert _complete("fleettool ag", tmp_path, src) == ["agent"]
    assert _complete("fleettool rules ex", tmp_path, src) == ["export"]
    assert "--dcgm-exporter" in _complete("fleettool agent --dcgm", tmp_path, src)
    assert _complete("fleettool agent --expect-g", tmp_path, src) == ["--expect-gpus"]
    # --install-completion finds the shell it runs under and writes the script where bash reads it
    home = tmp_path / "home"
    home.mkdir()
    r = _bash("fleettool --install-completion", home)
    assert r.returncode == 0 and "bash completion installed" in r.stdout, r.stdout + r.stderr
    assert (home / ".bashrc").read_text().count("fleettool.sh") == 1
    assert _complete("fleettool sil", home, "source ~/.bashrc") == ["silence"]
