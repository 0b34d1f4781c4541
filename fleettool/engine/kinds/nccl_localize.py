"""nccl_localize: the slow node, from NCCL test runs in the store.

Only like is compared with like: runs of the same shape (op, number of nodes, ranks per node, the largest
message size of the sweep, and the GPU model: the run's own device list's, else the nodes' as the inventory
knows it; "unknown" is a model of its own). A 2-node run is bound by the network and a 1-node run by NVLink; an A100's busbw is not an H100's.
A shape with fewer than three runs has no comparable peers and is never judged (`fleettool nccl` says so).

Pairwise runs (two nodes): a run is slow when its large-message busbw sits below (1 - slow_fraction) x the
median of its shape; the culprit is in every slow pair and in no fast pair.
Single-node runs: a node below the median of the others is slow.

    kind: nccl_localize
    slow_fraction: 0.2
    min_size: 0                  # bytes: a run's largest message counts when at least this big, else its peak
    op: all_reduce               # optional: every op when left out
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from fleettool.engine.kinds._base import Kind, KindResult, RuleLike
from fleettool.engine.kinds._sql import epoch, read
from fleettool.store import Store

Run = tuple[str, float, list[str], float]  # run id, busbw GB/s, nodes, time
Shape = tuple[str, int, int, int, str]  # op, nodes, ranks per node, largest message (bytes), GPU model(s)
MIN_PEERS = 3


def describe(shape: Shape) -> str:
    op, nn, rpn, size, sku = shape
    return f"{op}, {nn} node{'s' if nn != 1 else ''} x {rpn} ranks, up to {size} B, {sku}"


def shapes(store: Store, min_size: int = 0) -> list[dict[str, Any]]:
    """Every run with nodes and a bandwidth: its id, time, busbw (at its largest message, else its peak),
    nodes and shape."""
    rows = read(
        store,
        """WITH big AS (SELECT run_id, max(size_bytes) AS size FROM nccl_rows GROUP BY run_id),
                bw AS (SELECT x.run_id, max(greatest(coalesce(x.ip_busbw_gbps, 0), coalesce(x.oop_busbw_gbps, 0)))
                         AS busbw FROM nccl_rows x JOIN big USING (run_id)
                       WHERE x.size_bytes = big.size AND x.size_bytes >= $min_size GROUP BY x.run_id),
                sku AS (SELECT node, string_agg(DISTINCT model, '+' ORDER BY model) AS model FROM gpus
                        WHERE model IS NOT NULL GROUP BY node)
           SELECT r.run_id, r.ts, r.op, r.ranks, r.nodes, r.peak_busbw_gbps, bw.busbw AS big, big.size,
                  coalesce(r.model, (SELECT string_agg(DISTINCT coalesce(s.model, 'unknown GPU'), ' | ' ORDER BY 1)
                     FROM unnest(r.nodes) AS u(n) LEFT JOIN sku s ON s.node = u.n)) AS sku
           FROM nccl_runs r LEFT JOIN big USING (run_id) LEFT JOIN bw USING (run_id)""",
        {"min_size": int(min_size)},
    )
    out = []
    for row in rows:
        bw = row["big"] if row["big"] else row["peak_busbw_gbps"]
        nodes = list(row["nodes"] or [])
        if not bw or not nodes:
            continue
        nn = len(nodes)
        shape: Shape = (
            str(row["op"]),
            nn,
            int(row["ranks"] or 0) // nn,
            int(row["size"] or 0),
            str(row["sku"] or "unknown GPU"),
        )
        out.append(
            {"run_id": row["run_id"], "ts": row["ts"], "busbw": float(bw), "nodes": nodes, "shape": shape}
        )
    return out


def _runs(store: Store, r: RuleLike, end: float) -> dict[Shape, list[Run]]:
    """Runs with a bandwidth and nodes, by shape, up to `end`."""
    op = r.p("op")
    groups: dict[Shape, list[Run]] = defaultdict(list)
    for x in shapes(store, int(r.p("min_size", 0))):
        if op and x["shape"][0] != op:
            continue
        t = epoch(x["ts"]) if x["ts"] is not None else end
        if t > end:  # a run after the judgement's time: not known yet (the agent judges as time goes on)
            continue
        groups[x["shape"]].append((x["run_id"], x["busbw"], x["nodes"], t))
    return groups


def evaluate(store: Store, r: RuleLike, start: float, end: float) -> KindResult:
    slow_frac = float(r.p("slow_fraction", 0.2))
    res = KindResult()
    for shape, runs in _runs(store, r, end).items():
        nn = shape[1]
        if len(runs) < MIN_PEERS:  # no comparable peers: nothing to compare with, so nothing is said
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
                "compared": describe(shape),
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
