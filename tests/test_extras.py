"""The dependency split (issue 33 item 1): the core is what the agent imports, the rest are extras, and every
command is still installed by `pip install fleettool`: one that needs a missing extra exits 8 naming it.

The commands are run for real in the agent image's environment (tests/test_image_env.py: the lock installed with
pip --target, fleettool --no-deps, python -S), which is exactly the core install.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from fleettool.cli.exit_codes import ExitCode
from fleettool.cli.extras import EXTRAS
from tests.test_image_env import image_env, run_in  # noqa: F401 - the fixture, shared

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
OPTIONAL: dict[str, list[str]] = PROJECT["optional-dependencies"]


def _reqs(lines: list[str]) -> dict[str, str]:
    out = {}
    for ln in lines:
        r = Requirement(ln)
        out[r.name.lower().replace("_", "-")] = str(r.specifier)
    return out


def _in_file(name: str) -> list[str]:
    """The requirements of requirements/NAME, its `-r` includes followed."""
    out: list[str] = []
    for ln in (ROOT / "requirements" / name).read_text().splitlines():
        ln = ln.split("#")[0].strip()
        if ln.startswith("-r "):
            out += _in_file(ln[3:].strip())
        elif ln:
            out.append(ln)
    return out


def test_the_image_requirements_are_the_core_dependencies() -> None:
    assert _reqs(_in_file("agent.in")) == _reqs(PROJECT["dependencies"])
    assert _reqs(_in_file("agent-fleet.in")) == _reqs(PROJECT["dependencies"]) | _reqs(OPTIONAL["fleet"])


def test_the_core_holds_no_extra() -> None:
    core = set(_reqs(PROJECT["dependencies"]))
    for heavy in ("textual", "textual-plotext", "polars", "pyarrow", "numpy", "plotext", "torch"):
        assert heavy not in core, f"{heavy} is in the core: the agent never imports it"
    assert {"nvidia-ml-py", "duckdb", "prometheus-client", "pyyaml", "typer", "rich"} <= core


def test_the_extras_table_names_the_modules_of_pyproject_extras() -> None:
    for extra, modules in EXTRAS.items():
        dists = {n.replace("-", "_") for n in _reqs(OPTIONAL[extra])}
        assert dists == set(modules), f"[{extra}]: pyproject has {sorted(dists)}, extras.py {modules}"


def test_all_and_dev_take_every_extra_but_burnin() -> None:
    (all_req,) = OPTIONAL["all"]
    named = set(re.fullmatch(r"fleettool\[(.*)\]", all_req).group(1).split(","))  # type: ignore[union-attr]
    assert named == set(EXTRAS) - {"burnin"}
    assert "fleettool[all]" in OPTIONAL["dev"]


def _commands(help_text: str) -> list[str]:
    body = help_text.split("Commands:", 1)[1].split("\n\n", 1)[0]
    return [ln.split()[0] for ln in body.splitlines() if ln.startswith("  ") and not ln.startswith("   ")]


def test_the_core_install_has_every_command(image_env: tuple[Path, Path]) -> None:  # noqa: F811
    full = subprocess.run(
        [sys.executable, "-m", "fleettool", "--help"], capture_output=True, text=True, check=True
    ).stdout
    r = run_in(image_env, "--help")
    assert r.returncode == 0, r.stderr
    assert _commands(r.stdout) == _commands(full)
    for cmd in _commands(full):
        h = run_in(image_env, cmd, "--help")
        assert h.returncode == 0, f"fleettool {cmd} --help in the core install: {h.stderr}"


# (command line, the extra it needs, what the message names); each refuses before touching its arguments
NEEDS = [
    (["tui", "--db", "x.duckdb"], "tui", "tui"),
    (["demo"], "replay", "demo"),
    (["replay", "rec", "--db", "x.duckdb"], "replay", "replay"),
    (["rules", "test"], "replay", "rules test"),
    (["report", "--db", "x.duckdb"], "analytics", "report"),
    (["baselines", "--update", "--db", "x.duckdb"], "analytics", "baselines --update"),
    (["export", "--to", "seg", "--db", "x.duckdb"], "fleet", "export"),
    (["fleet", "alerts", "--fleet", "seg"], "fleet", "--fleet"),
    (["fleet", "incidents", "--fleet", "seg"], "fleet", "fleet incidents"),
]


@pytest.mark.parametrize(("args", "extra", "what"), NEEDS, ids=[" ".join(a[:2]) for a, _, _ in NEEDS])
def test_a_command_without_its_extra_exits_8_naming_it(
    image_env: tuple[Path, Path],  # noqa: F811
    args: list[str],
    extra: str,
    what: str,
) -> None:
    r = run_in(image_env, *args)
    assert r.returncode == ExitCode.UNAVAILABLE, (r.returncode, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"fleettool: {what}: needs the [{extra}] extra (")
    assert lines[0].endswith(f"pip install 'fleettool[{extra}]'")


def test_options_that_need_an_extra_exit_8_and_store_nothing_wrong(
    image_env: tuple[Path, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    db = tmp_path / "fleet.duckdb"
    r = run_in(image_env, "agent", "--source", "fake", "--db", str(db), "--duration", "2s", "-q")
    assert r.returncode == 0, r.stderr
    r = run_in(image_env, "agent", "--source", "fake", "--db", str(db), "--export-to", str(tmp_path / "seg"))
    assert r.returncode == ExitCode.UNAVAILABLE, r.stderr
    assert r.stderr.strip() == (
        "fleettool: agent --export-to: needs the [fleet] extra (pyarrow is not installed): "
        "pip install 'fleettool[fleet]'"
    )
    assert not (tmp_path / "seg").exists()
    r = run_in(image_env, "events", "--db", str(db), "--format", "parquet")
    assert r.returncode == ExitCode.UNAVAILABLE, r.stderr
    assert "--format parquet: needs the [analytics] extra" in r.stderr
    assert r.stdout == ""
    # and what needs no extra still reads the store the agent wrote
    r = run_in(image_env, "gpus", "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr
    assert '"uuid"' in r.stdout.lower()


def test_the_core_stores_a_burnin_all_reduce(image_env: tuple[Path, Path], tmp_path: Path) -> None:  # noqa: F811
    """The burn-in image is the core and torch (and a node with nccl-tests runs the all-reduce with no torch at
    all): the all-reduce's NCCL rows must be stored without pyarrow, not lost at the end of the burn-in."""
    db = tmp_path / "fleet.duckdb"
    code = f"""
import sys
from fleettool.formats.nccl_tests import NcclRow
from fleettool.store import Store
s = Store({str(db)!r})
rows = [NcclRow(8 << k, 2 << k, "float", "sum", -1, ip_time_us=10.0 + k, ip_algbw_gbps=1.5 * k,
                ip_busbw_gbps=2.5 * k, ip_wrong=0) for k in range(20)]
rows.append(NcclRow(1 << 30, None, None, None, None))
s.write_nccl_run(run_id="burnin-x", ts=1.7e9, op="all_reduce", ranks=8, nodes=["gpu-01"], avg_busbw_gbps=1.0,
                 peak_busbw_gbps=47.5, wrong=0, version=None, source="burnin", rows=rows)
s.close()
assert "pyarrow" not in sys.modules
"""
    r = _python_in(image_env, code)
    assert r.returncode == 0, r.stderr
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        got = con.execute(
            "SELECT count(*), sum(size_bytes), max(ip_busbw_gbps), count(count), min(dtype), max(root) "
            "FROM nccl_rows WHERE run_id = 'burnin-x'"
        ).fetchone()
    assert got == (21, sum(8 << k for k in range(20)) + (1 << 30), 2.5 * 19, 20, "float", -1)


def _python_in(env_dirs: tuple[Path, Path], code: str) -> subprocess.CompletedProcess[str]:
    import os

    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.pathsep.join(str(d) for d in env_dirs), "TZ": "UTC"}
    return subprocess.run(
        [sys.executable, "-S", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=env_dirs[1],
    )
