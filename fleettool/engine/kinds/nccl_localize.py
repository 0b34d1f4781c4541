"""nccl_localize: the slow node, from NCCL test runs in the store.

Pairwise runs (two nodes): a run is slow when its large-message busbw sits below (1 - slow_fraction) x the
median of runs of the same op and rank count; the culprit is in every slow pair and in no fast pair.
Single-node runs: a node below the median of the others is slow.

    kind: nccl_localize
    slow_fraction: 0.2
    min_size: 0                  # bytes: a run's largest message counts when at least this big, else its peak
    op: all_reduce               # optional: every op when left out
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from fleettool.engine.kinds._base import Kind, KindResult, RuleLike
from fleettool.engine.kinds._sql import epoch, read
from fleettool.store import Store

Run = tuple[str, float, list[str], float]  # run id, busbw GB/s, nodes, time


def _runs(store: Store, r: RuleLike, end: float) -> dict[tuple[str, int, int], list[Run]]:
    """Runs with a bandwidth and nodes, by (op, ranks, number of nodes)."""
    op = r.p("op")
    rows = read(
        store,
        """SELECT r.run_id, r.ts, r.op, r.ranks, r.nodes, r.peak_busbw_gbps,
                  (SELECT max(greatest(coalesce(x.ip_busbw_gbps, 0), coalesce(x.oop_busbw_gbps, 0)))
                     FROM nccl_rows x WHERE x.run_id = r.run_id AND x.size_bytes = (
                         SELECT max(size_bytes) FROM nccl_rows y WHERE y.run_id = r.run_id)
                       AND x.size_bytes >= $min_size) AS big
           FROM nccl_runs r""",
        {"min_size": int(r.p("min_size", 0))},
    )
    groups: dict[tuple[str, int, int], list[Run]] = defaultdict(list)
    for row in rows:
        if op and row["op"] != op:
            continue
        bw = row["big"] if row["big"] else row["peak_busbw_gbps"]
        nodes = row["nodes"]
        if not bw or not nodes:
            continue
        t = epoch(row["ts"]) if row["ts"] is not None else end
        groups[(row["op"], int(row["ranks"] or 0), len(nodes))].append(
            (row["run_id"], float(bw), list(nodes), t)
        )
    return groups


def evaluate(store: Store, r: RuleLike, start: float, end: float) -> KindResult:
    slow_frac = float(r.p("slow_fraction", 0.2))
    res = KindResult()
    for (_op, _ranks, nn), runs in _runs(store, r, end).items():
        if len(runs) < 3:
            continue
        med = statistics.median(bw for _, bw, _, _ in runs)
        slow = [x for x in runs if x[1] < med * (1 - slow_frac)]
        fast = [x for x in runs if x[1] >= med * (1 - slow_frac)]
        if not slow:
            continue
        fast_nodes = {n for _, _, ns, _ in fast for n in ns}
        if nn >= 2:
            common = set(slow[0][2])
            for _, _, ns, _ in slow[1:]:
                common &= set(ns)
            culprits = common - fast_nodes
            if not culprits:
                culprits = {n for _, _, ns, _ in slow for n in ns} - fast_nodes
        else:
            culprits = {n for _, _, ns, _ in slow for n in ns}
        for node in sorted(culprits):
            mine = [x for x in slow if node in x[2]]
            t0 = min(x[3] for x in mine)
            t1 = max(x[3] for x in mine)
            ratio = min(x[1] for x in mine) / med
            ent = (node, None, "")
            res.obs[ent] = [(t0, True, ratio), (t1, True, ratio)]
            res.extra[ent] = {
                "median_busbw_gbps": med,
                "slow_runs": [{"run_id": x[0], "nodes": x[2], "busbw_gbps": x[1]} for x in mine],
                "fast_runs": len(fast),
            }
    return res


KIND = Kind(
    name="nccl_localize",
    fields=frozenset({"slow_fraction", "min_size", "op"}),
    evaluate=evaluate,
    no_promql="NCCL test runs are results in the store, not series on /metrics",
)
