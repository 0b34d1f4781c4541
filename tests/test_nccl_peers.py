"""One incident per fault, from NCCL runs compared like with like: the pairwise straggler scenario and the real
nccl-tests samples replayed into one store (twice, then evaluated again) give one NcclSlowNode alert, on gpu-34,
dated in the runs' own time; the 2-node runs of node005/node007 (network-bound, another sweep) are not compared
with the 1-node or the other cluster's runs, and `fleettool nccl` says they have no comparable peers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from fleettool.store import Store
from tests.conftest import FIXTURES, SCENARIOS, run_cli


def test_like_with_like_and_one_alert_per_fault(tmp_path: Path) -> None:
    db = tmp_path / "n.duckdb"
    samples = tmp_path / "samples"
    shutil.copytree(FIXTURES / "samples" / "nccl-tests", samples)  # a copy: their mtime is the test's
    for _ in range(2):  # replaying again stores nothing new and opens no second incident
        for src in (SCENARIOS / "nccl-pairwise-straggler", samples):
            r = run_cli("replay", str(src), "--db", str(db), "-q")
            assert r.returncode == 0, r.stderr
    with Store(db, read_only=True) as st:
        slow = st.rows(
            "SELECT node, epoch(first_seen), epoch(last_seen), evidence FROM alerts WHERE rule = 'NcclSlowNode'"
        )
        newest = st.scalar("SELECT epoch(max(ts)) FROM samples")
    assert [s[0] for s in slow] == ["gpu-34"]
    node, first, last, evidence = slow[0]
    # the runs' time comes from their file names (2026-11-30T00:10..18Z), inside the scenario's telemetry
    assert 1_795_996_800 <= first <= last <= newest
    ev = json.loads(evidence)
    compared = {f.get("compared") for f in ev["findings"]}
    assert compared == {"all_reduce, 2 nodes x 8 ranks, up to 17179869184 B, NVIDIA H100 80GB HBM3"}
    out = json.loads(run_cli("nccl", "--db", str(db), "--json", "--no-rows").stdout)
    by_nodes: dict[str, list[str]] = {}
    for run in out:
        by_nodes.setdefault(",".join(run["nodes"]), []).append(run["peers"])
    assert by_nodes["node005,node007"] == ["no comparable peers: 1 other run of its shape, 2 needed"] * 2
    assert by_nodes["node005"] == ["no comparable peers: 0 other runs of its shape, 2 needed"]
    assert by_nodes["gpu-33,gpu-34"] == ["4 of its shape"]


def test_every_scenario_and_the_real_samples_in_one_store_give_one_alert_per_fault(tmp_path: Path) -> None:
    """The issue's check: every scenario and the real nccl-tests samples replayed into one store, twice."""
    db = tmp_path / "all.duckdb"
    samples = tmp_path / "nccl-tests"
    shutil.copytree(FIXTURES / "samples" / "nccl-tests", samples)
    sources = [*sorted(p for p in SCENARIOS.iterdir() if p.is_dir()), samples]
    for _ in range(2):
        for src in sources:
            r = run_cli("replay", str(src), "--db", str(db), "-q")
            assert r.returncode == 0, (src, r.stderr)
    with Store(db, read_only=True) as st:
        twice = st.rows("SELECT node, rule, gpu, count(*) FROM alerts GROUP BY ALL HAVING count(*) > 1")
        late = st.rows(
            "SELECT rule, node, first_seen FROM alerts WHERE first_seen > (SELECT max(ts) FROM samples) "
            "OR last_seen > (SELECT max(ts) FROM samples)"
        )
        nccl = st.rows("SELECT node FROM alerts WHERE rule LIKE 'Nccl%' ORDER BY node")
        n = st.scalar("SELECT count(*) FROM alerts")
    assert twice == [] and late == [] and n >= len(sources) - 2  # (healthy-power-capped raises none)
    assert nccl == [("gpu-34",)]  # node005/node007 have no comparable peers: not flagged


def test_no_rows_says_how_many_rows_each_run_has(tmp_path: Path) -> None:
    """`nccl --json --no-rows` leaves the rows out and keeps their count (it said 0 for runs of 8 rows)."""
    db = tmp_path / "n.duckdb"
    assert (
        run_cli("replay", str(SCENARIOS / "nccl-pairwise-straggler"), "--db", str(db), "-q").returncode == 0
    )
    full = json.loads(run_cli("nccl", "--db", str(db), "--json").stdout)
    bare = json.loads(run_cli("nccl", "--db", str(db), "--json", "--no-rows").stdout)
    counts = {r["run_id"]: len(r["rows"]) for r in full}
    assert counts and all(n > 0 for n in counts.values())
    assert {r["run_id"]: r["rows"] for r in bare} == counts
