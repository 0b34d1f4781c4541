"""Node lifecycle (valid transitions only, audit trail, explicit side effects) and fleet statistics."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fleettool.lifecycle import TransitionError, audit, current, side_effect_argv, transition
from fleettool.stats import merge_intervals, report
from fleettool.store import Store
from tests.conftest import SCENARIOS, run_cli


def test_the_lifecycle_round_trip_and_invalid_moves() -> None:
    with Store() as st:
        assert current(st, "gpu-17").state == "healthy"
        for to in ("suspect", "cordoned", "in-repair", "burn-in", "healthy"):
            transition(st, "gpu-17", to, who="alice", reason=f"-> {to}", now=1000.0, run=False)
        assert current(st, "gpu-17").state == "healthy"
        with pytest.raises(TransitionError, match="can go to"):
            transition(st, "gpu-17", "rma", who="bob", reason="", now=1001.0, run=False)
        transition(st, "gpu-17", "cordoned", who="bob", reason="XID 79 twice", now=1002.0, run=False)
        transition(st, "gpu-17", "rma", who="bob", reason="fell off again", now=1003.0, run=False)
        trail = audit(st, "gpu-17")
        assert [(r["from_state"], r["to_state"]) for r in trail][-2:] == [
            ("healthy", "cordoned"),
            ("cordoned", "rma"),
        ]
        assert trail[-1]["who"] == "bob" and trail[-1]["reason"] == "fell off again"
        with pytest.raises(ValueError, match="invalid node name"):
            transition(st, "gpu-17; reboot", "suspect", who="x", reason="", now=1.0, run=False)


def test_side_effects_are_explicit_argv() -> None:
    assert side_effect_argv("gpu-17", "cordoned", k8s=False, slurm=False, reason="r") == []
    assert side_effect_argv("gpu-17", "cordoned", k8s=True, slurm=True, reason="XID 79") == [
        ["kubectl", "cordon", "gpu-17"],
        ["scontrol", "update", "nodename=gpu-17", "state=drain", "reason=XID 79"],
    ]
    assert side_effect_argv("gpu-17", "healthy", k8s=True, slurm=True, reason="") == [
        ["kubectl", "uncordon", "gpu-17"],
        ["scontrol", "update", "nodename=gpu-17", "state=resume"],
    ]


def test_failed_side_effect_leaves_the_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kubectl = tmp_path / "kubectl"
    kubectl.write_text("#!/bin/sh\necho 'error: nodes \"gpu-17\" not found' >&2\nexit 1\n")
    kubectl.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    with Store() as st:
        with pytest.raises(TransitionError, match="not found"):
            transition(st, "gpu-17", "cordoned", who="a", reason="", now=1.0, k8s=True)
        assert current(st, "gpu-17").state == "healthy" and audit(st, "gpu-17") == []


def test_cli_and_report(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    for sc in ("gpu-fell-off-bus", "healthy-power-capped", "app-xid"):
        assert run_cli("replay", str(SCENARIOS / sc), "--db", str(db), "-q").returncode == 0
    r = run_cli("node", "gpu-21", "cordon", "--db", str(db), "--by", "alice", "-m", "XID 79", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["state"] == "cordoned"
    assert run_cli("node", "gpu-21", "rma", "--db", str(db)).returncode == 0
    bad = run_cli("node", "gpu-21", "return", "--db", str(db))
    assert bad.returncode == 1 and "can go to" in bad.stderr
    rep = json.loads(run_cli("report", "--db", str(db), "--json").stdout)
    by = {n["node"]: n for n in rep["nodes"]}
    assert by["gpu-03"]["availability"] == 1.0 and by["gpu-03"]["interruptions"] == 0
    assert by["gpu-30"]["interruptions"] == 0  # an application XID (check-workload) is not an interruption
    assert by["gpu-21"]["interruptions"] == 1 and 0 < by["gpu-21"]["availability"] < 1
    assert rep["fleet"]["incidents_by_category"] == {"gpu-lost": 1}


def test_merge_intervals() -> None:
    assert merge_intervals([(5, 8), (0, 2), (1, 3), (8, 9)]) == [(0, 3), (5, 9)]
    with Store() as st:
        assert report(st)["nodes"] == []
