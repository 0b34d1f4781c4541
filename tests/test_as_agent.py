"""`fleettool replay --as-agent [--down ...]` from the command line, and the reads each evaluation bounds by its
time (an evaluation at `now` sees nothing after it)."""

from __future__ import annotations

import json
from pathlib import Path

from fleettool.engine.evaluate import data_range, evaluate_rule
from fleettool.engine.rules import load_rules
from fleettool.ingest.report import IngestOptions
from fleettool.ingest.run import ingest
from fleettool.store import Store
from tests.conftest import SCENARIOS, run_cli


def test_nccl_localize_reads_no_run_after_the_windows_end(tmp_path: Path) -> None:
    """Judged at 00:05, before any of the straggler's runs (00:10 to 00:18), the node is not slow yet; judged
    at the end it is."""
    rule = next(r for r in load_rules() if r.kind == "nccl_localize")
    with Store(tmp_path / "n.duckdb") as store:
        ingest(store, SCENARIOS / "nccl-pairwise-straggler", IngestOptions(quiet=True))
        rng = data_range(store)
        assert rng is not None
        assert evaluate_rule(store, rule, rng[0], rng[0] + 300) == []
        assert [f.node for f in evaluate_rule(store, rule, rng[0], rng[1])] == ["gpu-34"]


def test_replay_as_agent_lists_the_agents_alerts(tmp_path: Path) -> None:
    db = tmp_path / "a.duckdb"
    r = run_cli("replay", str(SCENARIOS / "gpu-fell-off-bus"), "--db", str(db), "--as-agent", "--json")
    assert r.returncode == 0, r.stderr
    alerts = json.loads(r.stdout)["alerts"]
    assert [(a["node"], a["gpu"], a["state"]) for a in alerts] == [("gpu-21", 3, "firing")]


def test_replay_down_drops_the_span_and_needs_as_agent(tmp_path: Path) -> None:
    db = tmp_path / "d.duckdb"
    src = str(SCENARIOS / "thermal-throttle")
    r = run_cli("replay", src, "--db", str(db), "--as-agent", "--down", "20m+10m", "-q")
    assert r.returncode == 0, r.stderr
    with Store(db, read_only=True) as store:
        gap = store.scalar(
            "SELECT count(*) FROM samples WHERE ts >= TIMESTAMP '2026-11-30 00:20:00' "
            "AND ts < TIMESTAMP '2026-11-30 00:30:00'"
        )
        assert gap == 0 and store.scalar("SELECT count(*) FROM samples") > 0
    bad = run_cli("replay", src, "--db", str(tmp_path / "x.duckdb"), "--down", "20m+10m")
    assert bad.returncode == 2 and "--down needs --as-agent" in bad.stderr
    bad = run_cli("replay", src, "--db", str(tmp_path / "x.duckdb"), "--as-agent", "--down", "20m")
    assert bad.returncode == 2 and "--down" in bad.stderr and "FROM+DURATION" in bad.stderr


def test_as_agent_says_how_it_judged_and_a_down_past_the_end_is_named(tmp_path: Path) -> None:
    src = str(SCENARIOS / "gpu-fell-off-bus")
    r = run_cli("replay", src, "--db", str(tmp_path / "a.duckdb"), "--as-agent", "--down", "5h+30m")
    assert r.returncode == 0, r.stderr
    assert "judged as the agent:" in r.stderr and "flushes" in r.stderr
    assert "--down 5.0h+30m starts after the recording ends" in r.stderr, r.stderr
