"""The shared words of remediation: the ladder's order, when a proof passes, the episode tables, the runner's
transports, and the stand-in tools every remediation test drives."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fleettool.remediate.model import LADDER, Proof, ProofPart, Rung, Via, next_rung
from fleettool.remediate.runner import NodeRunner
from fleettool.store import Store
from fleettool.store.remediations import (
    Remediation,
    get_remediation,
    log_remediation,
    new_remediation,
    open_remediations,
    remediation_log,
    update_remediation,
)
from tests import standin


def test_the_ladder_climbs_reset_reboot_power_cycle_rma() -> None:
    assert [str(r) for r in LADDER] == ["reset", "reboot", "power-cycle", "rma"]
    assert next_rung(Rung.RESET) is Rung.REBOOT and next_rung(Rung.RMA) is None


def test_a_proof_passes_only_when_every_part_that_applies_passed() -> None:
    ok = [ProofPart(n, True, "") for n in ("recovery-action", "xid-quiet", "burnin")]
    assert Proof((*ok, ProofPart("nvlink", None, "no NVLink on this GPU"))).passed
    assert not Proof((*ok, ProofPart("nvlink", False, "17 of 18 links"))).passed
    # a burn-in that could not run is no proof
    assert not Proof((ok[0], ok[1], ProofPart("burnin", None, "no GPU"))).passed
    assert not Proof(()).passed
    # an old driver reports no recovery action: the other parts decide
    assert Proof((ProofPart("recovery-action", None, "not reported"), *ok[1:])).passed


def test_an_episode_and_its_audit_trail_are_stored(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as s:
        rid = new_remediation(s, Remediation("gpu-17", 3, "reset", "slurm", "alice", "XID 79", 1000.0, 900.0))
        log_remediation(s, rid, 1001.0, "step", "reset GPU 3", rung="reset", ok=False, detail="In use")
        update_remediation(s, rid, rung="reboot")
        assert [r["remediation_id"] for r in open_remediations(s)] == [rid]
        update_remediation(s, rid, state="proven", ended=2000.0, outcome="returned")
        assert open_remediations(s) == []
        row = get_remediation(s, rid)
        assert row is not None and row["rung"] == "reboot" and row["state"] == "proven"
        assert remediation_log(s, rid)[0]["detail"] == "In use"
        with pytest.raises(ValueError, match="ended"):
            update_remediation(s, rid, state="failed")


def test_stand_ins_replay_a_sequence_by_phase_and_unwrap_ssh(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    standin.install(
        bin_dir,
        {
            "rules": [
                {"tool": "nvidia-smi", "match": "^-r", "replies": [{"stdout": "reset\n"}], "set": "after"},
                {"tool": "nvidia-smi", "match": "^-q", "when": "start", "replies": [{"stdout": "Reset\n"}]},
                {"tool": "nvidia-smi", "match": "^-q", "when": "after", "replies": [{"stdout": "None\n"}]},
            ]
        },
    )
    env = {**standin.env(bin_dir)}
    import os

    full = {**os.environ, **env}
    q = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True, env=full)
    assert q.stdout == "Reset\n"
    r = subprocess.run(
        ["ssh", "-o", "BatchMode=yes", "--", "gpu-17", "nvidia-smi -r -i 3"],
        capture_output=True,
        text=True,
        env=full,
    )
    assert r.stdout == "reset\n"
    assert subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True, env=full).stdout == "None\n"
    miss = subprocess.run(["scontrol", "show", "node"], capture_output=True, text=True, env=full)
    assert miss.returncode == 127 and "no reply recorded" in miss.stderr
    seen = standin.calls(bin_dir)
    assert [c["tool"] for c in seen] == ["nvidia-smi", "nvidia-smi", "nvidia-smi", "scontrol"]
    assert seen[1]["node"] == "gpu-17" and seen[1]["args"] == ["-r", "-i", "3"]


def test_the_runner_quotes_for_ssh_and_bounds_a_hung_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    standin.install(bin_dir, {"rules": [{"tool": "nvidia-smi", "match": "", "replies": [{"sleep": 5}]}]})
    for k, v in standin.env(bin_dir).items():
        monkeypatch.setenv(k, v)
    r = NodeRunner("gpu-17", Via.SSH)
    assert r.node_argv(["echo", "a b;c"])[-1] == "echo 'a b;c'"
    res = r.on_node(["nvidia-smi", "-q"], timeout_s=0.5)
    assert res.timed_out and "killed after 0.5 s" in res.stderr
    with pytest.raises(ValueError):
        NodeRunner("gpu-17; rm -rf /", Via.SSH)
