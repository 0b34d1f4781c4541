"""What the agent's --topology files cost each flush (issue 30 item 1): TopologyRefresh.store() with three
unchanged files (one stat each, nothing read) beside the same call with no files (the bare baseline), and the
first read of the three files for scale, on one open DuckDB store.

    python bench/topology_flush.py [--rounds 2000]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fleettool.agent.topology import TopologyRefresh  # noqa: E402
from fleettool.store.db import Store  # noqa: E402

TOPO = ROOT / "fixtures" / "topology"
FILES = ("topology-tree.conf", "kubectl-nodes.json", "nodes.csv")


def per_call_us(t: TopologyRefresh, store: Store, rounds: int) -> float:
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(rounds):
            t.store(store)
        samples.append((time.perf_counter() - t0) / rounds * 1e6)
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        files = []
        for name in FILES:
            shutil.copy(TOPO / name, Path(d) / name)
            files.append(Path(d) / name)
        with Store(Path(d) / "b.duckdb") as store:
            bare = TopologyRefresh("n1", [], log=lambda _: None)
            three = TopologyRefresh("n1", files, log=lambda _: None)
            t0 = time.perf_counter()
            three.store(store)  # the first read: every file parsed and stored
            first_ms = (time.perf_counter() - t0) * 1e3
            b = per_call_us(bare, store, a.rounds)
            u = per_call_us(three, store, a.rounds)
    print(f"first read of 3 files: {first_ms:.1f} ms")
    print(f"per flush, no files (bare): {b:.2f} us; 3 unchanged files: {u:.2f} us; ratio {u / b:.1f}x")


if __name__ == "__main__":
    main()
