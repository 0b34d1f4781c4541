"""Fleet statistics from the alerts and the node lifecycle: availability per node and fleet, MTBF, incidents by
category, and the interruption timeline (overlapping down time of a node merged into one interruption).

A node is down (out of service) while it is under a page: a critical alert whose action takes the GPU or node
out of service (reset-gpu, reboot-node, inspect-hardware), from its first to its last sighting; and while its
lifecycle state is out of service (cordoned, in repair, burning in, RMA), from the move out to the move back.
Warnings (a trend, a slow clock), info alerts and check-workload never count as down time.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import polars as pl

from fleettool.reliability import SCHEMA, islands, summarize
from fleettool.store import Store
from fleettool.store.alerts import list_alerts
from fleettool.store.nodes import all_audit

DISRUPTIVE = ("reset-gpu", "reboot-node", "inspect-hardware")
PAGE = "critical"
OUT_OF_SERVICE = ("cordoned", "in-repair", "burn-in", "rma")  # fleettool.lifecycle's, which imports burn-in
FAULTS = {k: v for k, v in SCHEMA.items() if k != "sub"}  # node, start, end (unix seconds here), category


def lifecycle_intervals(store: Store, end: float) -> dict[str, list[tuple[float, float]]]:
    """Per node, the times it spent out of service by its lifecycle (a node still out is out until `end`)."""
    out: dict[str, list[tuple[float, float]]] = {}
    since: dict[str, float] = {}
    for r in all_audit(store):
        node, t = r["node"], _e(r["ts"])
        if r["to_state"] in OUT_OF_SERVICE:
            since.setdefault(node, t)
        elif node in since:
            out.setdefault(node, []).append((since.pop(node), t))
    for node, t in since.items():
        out.setdefault(node, []).append((t, max(t, end)))
    return out


def _states() -> str:
    return ", ".join(f"'{x}'" for x in sorted(OUT_OF_SERVICE))


def _e(v: dt.datetime) -> float:
    return v.replace(tzinfo=dt.timezone.utc).timestamp()


def report(
    store: Store, start: float | None = None, end: float | None = None, servers: int | None = None
) -> dict[str, Any]:
    """Availability per node and fleet, MTBF, pages by category, the interruption timeline, and `reliability`:
    the incident-log report over the same faults (`servers`: the fleet's size, default the nodes seen)."""
    rows = list_alerts(store)
    rng = store.query(
        "SELECT min(t0) AS a, max(t1) AS b FROM (SELECT min(ts) t0, max(ts) t1 FROM samples "
        "UNION ALL SELECT min(minute), max(minute) FROM samples_1m "
        "UNION ALL SELECT min(first_seen), max(last_seen) FROM alerts "
        "UNION ALL SELECT min(ts), max(ts) FROM node_audit "  # moves in or out of service only: marking a
        f"WHERE to_state IN ({_states()}) OR from_state IN ({_states()}))"  # node suspect is not down time
    )[0]
    if rng["a"] is None:
        return {"window": None, "nodes": [], "fleet": {}}
    t0 = start if start is not None else _e(rng["a"])
    t1 = end if end is not None else _e(rng["b"])
    span = max(t1 - t0, 1.0)
    nodes = sorted(
        {
            r["node"]
            for r in store.query(
                "SELECT DISTINCT node FROM samples UNION SELECT DISTINCT node FROM samples_1m "
                "UNION SELECT DISTINCT node FROM alerts UNION SELECT DISTINCT node FROM node_audit"
            )
        }
    )
    out_of_service = lifecycle_intervals(store, t1)
    # each page (a page still firing is down until the end of the window, not just its last sighting) and each
    # time out of service, clipped to the window: unmerged, they are `reliability`'s faults
    pages = [
        (r["node"], _e(r["first_seen"]), t1 if r["state"] == "firing" else _e(r["last_seen"]), r["category"])
        for r in rows
        if r["action"] in DISRUPTIVE and r["severity"] == PAGE
    ]
    away = [(node, a, b, "out of service") for node, iv in out_of_service.items() for a, b in iv]
    faults = (
        pl.DataFrame(pages + away, schema=FAULTS, orient="row")
        .with_columns(pl.max_horizontal("start", "end").alias("end"))
        .filter((pl.col("end") >= t0) & (pl.col("start") <= t1))
        .with_columns(pl.col("start").clip(lower_bound=t0), pl.col("end").clip(upper_bound=t1))
    )
    merged = islands(faults)  # overlapping down time of one node is one interruption
    per = (
        pl.DataFrame({"node": nodes}, schema={"node": pl.String})
        .join(
            merged.group_by("node").agg(
                (pl.col("end") - pl.col("start")).sum().alias("down"), pl.len().alias("n")
            ),
            on="node",
            how="left",
        )
        .with_columns(pl.col("down").fill_null(0.0), pl.col("n").fill_null(0))
        .sort("node")
    )
    per_node = [
        {
            "node": r["node"],
            "availability": round(1 - r["down"] / span, 6),
            "interruptions": r["n"],
            "down_s": round(r["down"], 1),
            "mtbf_s": round(span / r["n"], 1) if r["n"] else None,
        }
        for r in per.iter_rows(named=True)
    ]
    total_down = float(per["down"].sum())
    incidents = int(per["n"].sum())
    cats = faults.filter(pl.col("category") != "out of service").group_by("category").len()
    fleet = {
        "nodes": len(nodes),
        "availability": round(1 - total_down / (span * max(len(nodes), 1)), 6),
        "interruptions": incidents,
        "mtbf_s": round(span * len(nodes) / incidents, 1) if incidents else None,
        "incidents_by_category": dict(sorted(cats.iter_rows())),
    }
    return {
        "window": [t0, t1],
        "nodes": per_node,
        "fleet": fleet,
        "timeline": [
            {"node": r["node"], "from": r["start"], "to": r["end"]}
            for r in merged.sort("start", "node").iter_rows(named=True)
        ],
        "reliability": reliability(faults, servers or len(nodes), span),
    }


def reliability(faults: pl.DataFrame, servers: int, span_s: float) -> dict[str, Any]:
    """The incident-log report (fleettool.reliability.summarize) of the store's own faults: pages and time out
    of service, in days."""
    df = faults.select(
        "node",
        pl.col("start") / 86400,
        pl.col("end") / 86400,
        "category",
        pl.lit("").alias("sub"),
    )
    return summarize(df, max(servers, df["node"].n_unique(), 1), span_s / 86400)
