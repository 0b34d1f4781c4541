"""Node lifecycle (valid transitions only, audit trail, explicit side effects) and fleet statistics."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fleettool.lifecycle import TransitionError, audit, current, side_effect_argv, transition
from fleettool.reliability import islands
from fleettool.stats import report
from fleettool.store import Store
from tests.conftest import SCENARIOS, run_cli


def _burnin(st: Store, node: str, ts: float, *verdicts: str) -> str:
    from fleettool.store.burnin import write_burnin_results

    run_id = f"run-{ts:g}"
    rows = [{"node": node, "gpu": i, "test": "gemm-bf16", "verdict": v} for i, v in enumerate(verdicts)]
    write_burnin_results(st, run_id, ts, rows)
    return run_id


def test_the_lifecycle_round_trip_and_invalid_moves() -> None:
    with Store() as st:
        assert current(st, "gpu-17").state == "healthy"
        for to in ("suspect", "cordoned", "in-repair", "burn-in"):
            transition(st, "gpu-17", to, who="alice", reason=f"-> {to}", now=1000.0, run=False)
        _burnin(st, "gpu-17", 1000.5, "PASS", "PASS", "SKIPPED")
        transition(st, "gpu-17", "healthy", who="alice", reason="fixed", now=1000.8, run=False)
        assert current(st, "gpu-17").state == "healthy"
        with pytest.raises(TransitionError, match="can go to"):
            transition(st, "gpu-17", "rma", who="bob", reason="", now=1001.0, run=False)
        assert "(burn-in run-1000.5 PASS)" in audit(st, "gpu-17")[-1]["reason"]
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


def test_a_return_to_service_needs_a_pass_burnin_newer_than_the_repair() -> None:
    with Store() as st:
        transition(st, "gpu-21", "cordoned", who="a", reason="XID 79", now=100.0, run=False)
        with pytest.raises(TransitionError, match="gpu-21 has no burn-in since it was taken out of service"):
            transition(st, "gpu-21", "healthy", who="a", reason="", now=101.0, run=False)
        _burnin(st, "gpu-21", 50.0, "PASS")  # before the cordon: proves nothing about the repair
        transition(st, "gpu-21", "in-repair", who="a", reason="swap", now=200.0, run=False)
        transition(st, "gpu-21", "burn-in", who="a", reason="", now=300.0, run=False)
        _burnin(st, "gpu-21", 310.0, "PASS", "FAIL")
        _burnin(st, "gpu-21", 320.0, "PASS", "WARN")
        with pytest.raises(TransitionError, match="the last, run-320, was PASS/WARN"):
            transition(st, "gpu-21", "healthy", who="a", reason="", now=330.0, run=False)
        with pytest.raises(TransitionError, match="--force needs a reason"):
            transition(st, "gpu-21", "healthy", who="a", reason=" ", now=330.0, run=False, force=True)
        assert current(st, "gpu-21").state == "burn-in"
        transition(
            st, "gpu-21", "healthy", who="bob", reason="vendor says fine", now=340.0, run=False, force=True
        )
        last = audit(st, "gpu-21")[-1]
        assert last["to_state"] == "healthy" and last["who"] == "bob"
        assert last["reason"].startswith("forced without a PASS burn-in (gpu-21 has no PASS burn-in since")
        assert last["reason"].endswith(": vendor says fine")
        # suspect -> healthy needs no proof: a suspect node never left service
        transition(st, "gpu-22", "suspect", who="a", reason="", now=1.0, run=False)
        transition(st, "gpu-22", "healthy", who="a", reason="false alarm", now=2.0, run=False)


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
    assert run_cli("node", "gpu-21", "repair", "--db", str(db)).returncode == 0
    assert run_cli("node", "gpu-21", "burnin", "--db", str(db)).returncode == 0
    bad = run_cli("node", "gpu-21", "return", "--db", str(db))
    assert bad.returncode == 1 and "gpu-21 has no burn-in since it was taken out of service" in bad.stderr
    assert "--force" in bad.stderr
    assert run_cli("node", "gpu-21", "return", "--force", "--db", str(db)).returncode == 2  # no reason
    ok = run_cli("node", "gpu-21", "return", "--force", "-m", "PSU swapped", "--db", str(db), "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["audit"][-1]["reason"].startswith("forced")
    rep = json.loads(run_cli("report", "--db", str(db), "--json").stdout)
    by = {n["node"]: n for n in rep["nodes"]}
    assert by["gpu-03"]["availability"] == 1.0 and by["gpu-03"]["interruptions"] == 0
    assert by["gpu-30"]["interruptions"] == 0  # an application XID (check-workload) is not an interruption
    # the page (XID 79) still fires: it is down from then to the window's end, through its time out of
    # service (cordoned .. forced back): one interruption
    assert by["gpu-21"]["interruptions"] == 1 and 0 < by["gpu-21"]["availability"] < 1
    assert rep["fleet"]["incidents_by_category"] == {"gpu-lost": 1}


def test_node_names_what_it_does_not_know_and_a_store_it_creates(tmp_path: Path) -> None:
    db = tmp_path / "n.duckdb"
    assert run_cli("replay", str(SCENARIOS / "gpu-fell-off-bus"), "--db", str(db), "-q").returncode == 0
    typo = run_cli("node", "gpu-12", "--db", str(db))
    assert (
        typo.returncode == 3
        and f"gpu-12: not in {db}" in typo.stderr
        and "nodes it has: gpu-21" in typo.stderr
    )
    seen = run_cli("node", "gpu-21", "--db", str(db))
    assert seen.returncode == 0 and seen.stdout.startswith("gpu-21: lifecycle healthy (never moved)")
    assert "1 alert firing: GpuFellOffTheBus (critical)" in seen.stdout
    only = run_cli("alerts", "--db", str(db), "--node", "gpu-21", "--json")
    assert [a["node"] for a in json.loads(only.stdout)] == ["gpu-21"]
    assert json.loads(run_cli("alerts", "--db", str(db), "--node", "gpu-2", "--json").stdout) == []
    new = run_cli("node", "gpu-12", "cordon", "--db", str(db), "-m", "rack move")
    assert new.returncode == 0 and "gpu-12 is new to" in new.stderr
    assert "Z  healthy -> cordoned" in new.stdout  # ISO time with its zone, no microseconds


def test_a_lifecycle_move_refuses_a_missing_store_as_silence_add_does(tmp_path: Path) -> None:
    """A typo in --db must not cordon the node in a throwaway file: every move refuses a store that does not
    exist (exit 3, nothing created), as `silence add` does; the status read already did."""
    typo = tmp_path / "flet.duckdb"
    for action in ("suspect", "cordon", "repair", "burnin", "return", "rma"):
        r = run_cli("node", "gpu-17", action, "--db", str(typo), "-m", "x")
        assert r.returncode == 3, (action, r.stderr)
        assert r.stderr.splitlines() == [
            f"fleettool: {typo}: no such database (--db): a lifecycle move is made in the fleet's store, which "
            "the agent or replay creates; nothing was created"
        ]
        assert not typo.exists()
    silence = run_cli("silence", "add", "--node", "gpu-17", "--db", str(typo))
    assert silence.returncode == 3 and not typo.exists()


def test_marking_a_node_suspect_moves_no_figure(tmp_path: Path) -> None:
    """suspect is not out of service: days after a replayed recording, it must not stretch the window (and with
    it a page still firing) to now."""
    db = tmp_path / "s.duckdb"
    assert run_cli("replay", str(SCENARIOS / "gpu-fell-off-bus"), "--db", str(db), "-q").returncode == 0
    before = json.loads(run_cli("report", "--db", str(db), "--json").stdout)
    assert run_cli("node", "gpu-21", "suspect", "--db", str(db), "-m", "check").returncode == 0
    after = json.loads(run_cli("report", "--db", str(db), "--json").stdout)
    assert after["window"] == before["window"] and after["fleet"] == before["fleet"]
    assert before["window"] == ["2026-11-30T00:00:00Z", "2026-11-30T01:00:00Z"]


def test_a_move_without_by_is_recorded_as_the_login_user_even_without_user(tmp_path: Path) -> None:
    import getpass

    db = tmp_path / "w.duckdb"
    Store(db).close()  # a lifecycle move needs an existing store
    env = {k: v for k, v in os.environ.items() if k not in ("USER", "LOGNAME", "LNAME", "USERNAME")}
    import subprocess

    from tests.test_cli_output import _cli

    r = subprocess.run(
        [*_cli(), "node", "gpu-3", "cordon", "--db", str(db), "-m", "x", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["audit"][-1]["who"] == getpass.getuser() != "unknown"


def test_warnings_never_count_as_down_time_and_a_resolve_by_hand_ends_nothing_later(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    for sc in ("thermal-throttle", "gpu-fell-off-bus"):
        assert run_cli("replay", str(SCENARIOS / sc), "--db", str(db), "-q").returncode == 0

    def nodes() -> dict[str, dict[str, object]]:
        rep = json.loads(run_cli("report", "--db", str(db), "--json").stdout)
        return {n["node"]: n for n in rep["nodes"]}

    before = nodes()
    assert before["gpu-07"]["interruptions"] == 0 and before["gpu-07"]["availability"] == 1.0  # a warning
    assert before["gpu-21"]["interruptions"] == 1
    with Store(db, read_only=True) as st:
        lost = st.scalar("SELECT alert_id FROM alerts WHERE node = 'gpu-21'")
    assert run_cli("alerts", "resolve", lost, "--db", str(db)).returncode == 0
    after = nodes()  # resolved today: the incident still ended when its condition last held
    assert after["gpu-21"]["down_s"] == before["gpu-21"]["down_s"]
    text = run_cli("report", "--db", str(db)).stdout
    assert "MTBF" in text and "None" not in text
    # the same faults as an incident log's report: the page only (gpu-07's warning is no fault)
    rel = json.loads(run_cli("report", "--db", str(db), "--json", "--servers", "10").stdout)["reliability"]
    assert rel["faults"] == 1 and rel["servers"] == 10 and rel["servers_affected"] == 1
    assert rel["by_class"] == {"gpu-lost": 1}
    assert rel["down_days"] == round(after["gpu-21"]["down_s"] / 86400, 4)


def test_islands_merge_overlapping_and_touching_faults_per_node() -> None:
    import polars as pl

    iv = [
        ("a", 5.0, 8.0),
        ("a", 0.0, 2.0),
        ("b", 1.0, 4.0),
        ("a", 1.0, 3.0),
        ("a", 8.0, 9.0),
        ("b", 6.0, 7.0),
    ]
    df = pl.DataFrame(iv, schema={"node": pl.String, "start": pl.Float64, "end": pl.Float64}, orient="row")
    assert islands(df).rows() == [("a", 0.0, 3.0), ("a", 5.0, 9.0), ("b", 1.0, 4.0), ("b", 6.0, 7.0)]
    with Store() as st:
        assert report(st)["nodes"] == []


def test_an_empty_store_reports_nothing_in_words(tmp_path: Path) -> None:
    db = tmp_path / "e.duckdb"
    Store(db).close()
    r = run_cli("report", "--db", str(db))
    assert r.returncode == 0 and r.stdout.strip() == (
        "no telemetry, alerts or lifecycle moves in the store: nothing to report"
    )
