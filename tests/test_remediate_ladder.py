"""Which rung first and for which GPU (fleettool/remediate/ladder.py), the reset rung's drain bound and services
(reset.py), and the command's refusals: each through the CLI where the user meets it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from fleettool.remediate.ladder import parse_recovery_action
from fleettool.remediate.model import Via
from fleettool.remediate.reset import run_reset
from fleettool.remediate.runner import NodeRunner
from fleettool.store import Store
from tests import standin
from tests.conftest import run_cli
from tests.test_remediate_cli import FAST, NODE, SEQ, _alert, _store

OUT = SEQ / "outputs"
ROOT = Path(__file__).resolve().parents[1]


def _plan(tmp_path: Path, *args: str, seq: str = "nothing-runs") -> tuple[object, Path]:
    bin_dir = tmp_path / "bin"
    standin.install(bin_dir, SEQ / f"{seq}.json")
    p = run_cli("remediate", NODE, "--db", str(tmp_path / "f.duckdb"), *args, env=standin.env(bin_dir))
    return p, bin_dir


def test_the_recovery_action_words_of_a_real_dump() -> None:
    assert parse_recovery_action((OUT / "nvidia-smi-q-recovery-none.txt").read_text()) == 0
    assert parse_recovery_action((OUT / "nvidia-smi-q-recovery-gpu-reset.txt").read_text()) == 1
    assert parse_recovery_action((OUT / "nvidia-smi-q-recovery-node-reboot.txt").read_text()) == 2
    # a 535 driver prints no recovery action at all
    h100 = ROOT / "fixtures" / "samples" / "nvidia-smi" / "nvidia-smi-q-h100x8-535.161.08.txt"
    assert parse_recovery_action(h100.read_text()) is None


def test_a_node_reboot_recovery_action_beats_an_alert_asking_for_a_reset(tmp_path: Path) -> None:
    _store(tmp_path / "f.duckdb", _alert("GpuDoubleBitError", "reset-gpu", "ecc"), recovery=2)
    p, _ = _plan(tmp_path, "--via", "slurm", *FAST)
    assert p.returncode == 0, p.stderr
    assert "rung reboot" in p.stdout and "recovery action Node Reboot" in p.stdout
    assert "scontrol reboot ASAP nextstate=DOWN" in p.stdout and "nvidia-smi -r" not in p.stdout


def test_a_lost_gpu_is_never_reset_even_when_nvml_says_reset(tmp_path: Path) -> None:
    _store(tmp_path / "f.duckdb", _alert("GpuFellOffTheBus", "reboot-node", "gpu-lost"), recovery=1)
    p, _ = _plan(tmp_path, "--via", "slurm", "--json", *FAST)
    assert p.returncode == 0, p.stderr
    import json

    plan = json.loads(p.stdout)["plan"]
    assert plan["rung"] == "reboot" and "GPU lost" in plan["why"]
    assert not any(s["argv"][:2] == ["nvidia-smi", "-r"] for s in plan["steps"])


def test_from_overrides_the_choice_and_says_so(tmp_path: Path) -> None:
    _store(tmp_path / "f.duckdb", _alert("GpuDoubleBitError", "reset-gpu", "ecc"), recovery=1)
    p, _ = _plan(tmp_path, "--via", "slurm", "--from", "reboot", *FAST)
    assert p.returncode == 0, p.stderr
    assert "rung reboot" in p.stdout and "--from reboot (chosen was reset)" in p.stdout


def test_nothing_that_asks_for_a_reset_or_reboot_is_exit_1_naming_what_fires(tmp_path: Path) -> None:
    _store(tmp_path / "f.duckdb", _alert("GpuRowRemapFailure", "inspect-hardware", "ecc"))
    p, bin_dir = _plan(tmp_path, "--via", "slurm", "--yes", *FAST)
    assert p.returncode == 1
    assert p.stderr.count("\n") == 1 and "GpuRowRemapFailure GPU 3 (inspect-hardware)" in p.stderr
    assert "rma --bundle" in p.stderr
    assert standin.calls(bin_dir) == []


def test_several_gpus_firing_asks_for_gpu(tmp_path: Path) -> None:
    _store(
        tmp_path / "f.duckdb",
        _alert("GpuDoubleBitError", "reset-gpu", "ecc"),
        _alert("GpuNewDoubleBitError", "reset-gpu", "ecc", gpu=5),
    )
    p, _ = _plan(tmp_path, "--via", "slurm", *FAST)
    assert p.returncode == 2 and "GPUs 3, 5" in p.stderr and "--gpu" in p.stderr
    p, _ = _plan(tmp_path, "--via", "slurm", "--gpu", "5", *FAST)
    assert p.returncode == 0 and "gpu-17 GPU 5: rung reset" in p.stdout


def test_dry_run_with_yes_runs_nothing(tmp_path: Path) -> None:
    _store(tmp_path / "f.duckdb", _alert("GpuDoubleBitError", "reset-gpu", "ecc"), recovery=1)
    p, bin_dir = _plan(tmp_path, "--via", "slurm", "--yes", "--dry-run", *FAST)
    assert p.returncode == 0 and "dry run: nothing was run" in p.stdout
    assert standin.calls(bin_dir) == []


def test_a_missing_tool_is_exit_8_naming_it(tmp_path: Path) -> None:
    _store(tmp_path / "f.duckdb", _alert("GpuDoubleBitError", "reset-gpu", "ecc"), recovery=1)
    env = {"PATH": str(Path(sys.executable).parent)}  # no ssh, no scontrol
    p = run_cli(
        "remediate", NODE, "--db", str(tmp_path / "f.duckdb"), "--via", "slurm", "--yes", *FAST, env=env
    )
    assert p.returncode == 8, p.stderr
    assert "scontrol: not found on PATH" in p.stderr and p.stderr.count("\n") == 1
    with Store(tmp_path / "f.duckdb", read_only=True) as s:
        from fleettool.store.remediations import list_remediations

        (ep,) = list_remediations(s, NODE)
        assert ep["state"] == "stopped"  # never left running (it would hold the blast guard)


@pytest.mark.parametrize(
    "bad", [("--via", "pdsh"), ("--from", "reflash"), ("--quiet", "0s"), ("--gpu", "-1")]
)
def test_bad_options_are_usage_errors(tmp_path: Path, bad: tuple[str, str]) -> None:
    _store(tmp_path / "f.duckdb", _alert("GpuDoubleBitError", "reset-gpu", "ecc"), recovery=1)
    p, _ = _plan(tmp_path, *bad)
    assert p.returncode == 2 and bad[0] in p.stderr


def test_the_reset_waits_for_the_gpu_s_work_then_fails_naming_the_pids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    standin.install(
        bin_dir,
        {"rules": [{"tool": "nvidia-smi", "match": "^--query-compute-apps",
                    "replies": [{"stdout": "48213, python\n48377, /usr/bin/python3\n"}]}]},
    )  # fmt: skip
    for k, v in standin.env(bin_dir).items():
        monkeypatch.setenv(k, v)
    t = [0.0]

    def sleep(s: float) -> None:
        t[0] += s

    out = run_reset(
        NodeRunner(NODE, Via.SSH), 3, drain_timeout_s=30, clock=lambda: t[0], sleep=sleep, poll_s=10
    )
    assert not out.ok and "PIDs 48213, 48377" in out.detail and "30 s" in out.detail
    calls = standin.calls(bin_dir)
    # listed at t = 0, 10, 20, 30; nothing else ran (no persistence change, no service stopped, no reset)
    assert len(calls) == 4 and {c["tool"] for c in calls} == {"nvidia-smi"}
    assert os.environ["STANDIN_DIR"]


def test_a_bmc_without_its_credentials_is_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("IPMI_PASSWORD", raising=False)
    _store(tmp_path / "f.duckdb", _alert("GpuFellOffTheBus", "reboot-node", "gpu-lost"))
    p, bin_dir = _plan(tmp_path, "--via", "slurm", "--bmc", "gpu-17-bmc", "--yes", *FAST)
    assert p.returncode == 2 and "--bmc-user" in p.stderr
    p, bin_dir = _plan(
        tmp_path, "--via", "slurm", "--bmc", "gpu-17-bmc", "--bmc-user", "admin", "--yes", *FAST
    )
    assert p.returncode == 8 and "IPMI_PASSWORD" in p.stderr and "nothing was run" in p.stderr
    assert standin.calls(bin_dir) == []
