"""Fleet statistics from the alerts and the node lifecycle: availability per node and fleet, MTBF, incidents by
category, and the interruption timeline (overlapping down time of a node merged into one interruption).

A node is down (out of service) while it is under a page: a critical alert whose action takes the GPU or node
out of service (reset-gpu, reboot-node, inspect-hardware), from its first to its last sighting; and while its
lifecycle state is out of service (cordoned, in repair, burning in, RMA), from the move out to the move back.
Warnings (a trend, a slow clock), info alerts and check-workload never count as down time.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

from fleettool.store import Store
from fleettool.store.alerts import list_alerts
from fleettool.store.nodes import all_audit

DISRUPTIVE = ("reset-gpu", "reboot-node", "inspect-hardware")
PAGE = "critical"
OUT_OF_SERVICE = ("cordoned", "in-repair", "burn-in", "rma")  # fleettool.lifecycle's, which imports burn-in


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


def _e(v: dt.datetime) -> float:
    return v.replace(tzinfo=dt.timezone.utc).timestamp()


def merge_intervals(iv: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


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
        "UNION ALL SELECT min(ts), max(ts) FROM node_audit)"
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
    per_node = []
    faults: list[dict[str, Any]] = []  # each page and each time out of service, unmerged, for `reliability`
    cats: Counter[str] = Counter()
    total_down = 0.0
    incidents = 0
    timeline = []
    for node in nodes:
        mine = [r for r in rows if r["node"] == node and r["action"] in DISRUPTIVE and r["severity"] == PAGE]
        # a page still firing is down until the end of the window, not just its last sighting
        iv = [
            (_e(r["first_seen"]), t1 if r["state"] == "firing" else _e(r["last_seen"])) for r in mine
        ] + out_of_service.get(node, [])
        labels = [r["category"] for r in mine] + ["out of service"] * len(out_of_service.get(node, []))
        faults += [
            {"node": node, "start": max(a, t0), "end": min(max(a, b), t1), "category": c}
            for (a, b), c in zip(iv, labels, strict=True)
            if b >= t0 and a <= t1
        ]
        iv = [(max(a, t0), min(max(a, b), t1)) for a, b in iv if b >= t0 and a <= t1]
        merged = merge_intervals(iv)
        down = sum(b - a for a, b in merged)
        total_down += down
        incidents += len(merged)
        cats.update(r["category"] for r in mine)
        per_node.append(
            {
                "node": node,
                "availability": round(1 - down / span, 6),
                "interruptions": len(merged),
                "down_s": round(down, 1),
                "mtbf_s": round(span / len(merged), 1) if merged else None,
            }
        )
        timeline += [{"node": node, "from": a, "to": b} for a, b in merged]
    fleet = {
        "nodes": len(nodes),
        "availability": round(1 - total_down / (span * max(len(nodes), 1)), 6),
        "interruptions": incidents,
        "mtbf_s": round(span * len(nodes) / incidents, 1) if incidents else None,
        "incidents_by_category": dict(cats),
    }
    return {
        "window": [t0, t1],
        "nodes": per_node,
        "fleet": fleet,
        "timeline": sorted(timeline, key=lambda x: x["from"]),
        "reliability": reliability(faults, servers or len(nodes), span),
    }


def reliability(faults: list[dict[str, Any]], servers: int, span_s: float) -> dict[str, Any]:
    """The incident-log report (fleettool.reliability.summarize) of the store's own faults: pages and time out
    of service, in days."""
    import polars as pl

    from fleettool.reliability import SCHEMA, summarize

    rows = [
        {
            "node": f["node"],
            "start": f["start"] / 86400,
            "end": f["end"] / 86400,
            "category": f["category"],
            "sub": "",
        }
        for f in faults
    ]
    df = pl.DataFrame(rows, schema=SCHEMA, orient="row") if rows else pl.DataFrame(schema=SCHEMA)
    return summarize(df, max(servers, df["node"].n_unique() if rows else 0, 1), span_s / 86400)
