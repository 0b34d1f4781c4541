"""Fleet statistics from the alerts table: availability per node and fleet, MTBF, incidents by category, and
the interruption timeline (overlapping incidents of a node merged into one interruption).

An interruption is time under an alert whose action takes the GPU or node out of service (reset-gpu,
reboot-node, inspect-hardware) at warning or critical severity; info alerts and check-workload do not count.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

from fleettool.store import Store
from fleettool.store.alerts import list_alerts

DISRUPTIVE = ("reset-gpu", "reboot-node", "inspect-hardware")


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


def report(store: Store, start: float | None = None, end: float | None = None) -> dict[str, Any]:
    rows = list_alerts(store)
    rng = store.query(
        "SELECT min(t0) AS a, max(t1) AS b FROM (SELECT min(ts) t0, max(ts) t1 FROM samples "
        "UNION ALL SELECT min(minute), max(minute) FROM samples_1m UNION ALL SELECT min(first_seen), max(last_seen) FROM alerts)"
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
                "SELECT DISTINCT node FROM samples UNION SELECT DISTINCT node FROM "
                "samples_1m UNION SELECT DISTINCT node FROM alerts"
            )
        }
    )
    per_node = []
    cats: Counter[str] = Counter()
    total_down = 0.0
    incidents = 0
    timeline = []
    for node in nodes:
        mine = [
            r for r in rows if r["node"] == node and r["action"] in DISRUPTIVE and r["severity"] != "info"
        ]
        iv = [(max(_e(r["first_seen"]), t0), min(_e(r["last_seen"]), t1)) for r in mine]
        iv = [(a, max(a, b)) for a, b in iv if b >= t0 and a <= t1]
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
    }
