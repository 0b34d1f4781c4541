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
