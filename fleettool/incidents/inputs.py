"""What the fold reads from a store: each alert as an AlertView (its XIDs and SXids with the time each was first
seen, the driver's `caused by previous Xid N`, whether it was escalated by repeats, silenced now, or planned),
and the Context (node topology, jobs, drivers)."""

from __future__ import annotations

import bisect
import json
import time
from typing import Any

from fleettool.incidents.model import PLANNED_STATES, AlertView, Context, Job
from fleettool.store import Store
from fleettool.store.incidents import alerts_to_fold, lifecycle_history, node_drivers, silence_windows
from fleettool.store.silences import MATCHERS, annotate
from fleettool.store.topology import job_rows, node_topology


def _codes(evidence: dict[str, Any], a: AlertView) -> None:
    """Fill the alert's XIDs, SXids, causes and escalation from its findings' events."""
    for f in evidence.get("findings") or []:
        if f.get("escalated"):
            a.escalated = True
        for e in f.get("events") or []:
            code, ts, kind = e.get("code"), e.get("ts"), e.get("kind")
            if code is None or ts is None:
                continue
            detail = e.get("detail") or {}
            if kind == "xid":
                a.codes[int(code)] = min(a.codes.get(int(code), ts), ts)
                if detail.get("root_cause_xid") is not None:
                    a.caused_by.add(int(detail["root_cause_xid"]))
            elif kind == "sxid":
                a.sxids[int(code)] = min(a.sxids.get(int(code), ts), ts)
                if str(detail.get("sxid_severity", "")).lower() == "fatal" or f.get("severity") == "critical":
                    a.sxid_fatal = True


def _planned_by_lifecycle(history: dict[str, list[tuple[float, str]]], node: str, t: float) -> bool:
    moves = history.get(node)
    if not moves:
        return False
    i = bisect.bisect_right([m[0] for m in moves], t)
    return i > 0 and moves[i - 1][1] in PLANNED_STATES


def _planned_by_silence(windows: list[dict[str, Any]], row: dict[str, Any], t: float) -> bool:
    return any(
        (w.get("reason") or "").strip()
        and (w["created"] is None or w["created"] <= t)
        and (w["until"] is None or t <= w["until"])
        and all(w[k] is None or w[k] == row.get(k) for k in MATCHERS)
        for w in windows
    )


def alert_views(store: Store, now: float | None = None) -> list[AlertView]:
    """Every alert of the store as the fold sees it (silenced as of `now`, default the wall clock)."""
    rows = annotate(store, alerts_to_fold(store), time.time() if now is None else now)
    history = lifecycle_history(store)
    windows = silence_windows(store)
    out = []
    for r in rows:
        a = AlertView(
            alert_id=r["alert_id"],
            rule=r["rule"] or "",
            category=r["category"] or "",
            severity=r["severity"] or "info",
            action=r["action"] or "none",
            node=r["node"] or "",
            gpu=r["gpu"],
            # a NIC's PCI address (an mlx5 line) is no GPU: its alert is the node's
            pci_bus_id=None if r["category"] == "nic" else r["pci_bus_id"],
            state=r["state"] or "resolved",
            first_seen=r["first_seen"] or 0.0,
            last_seen=r["last_seen"] or r["first_seen"] or 0.0,
            summary=r["summary"] or "",
            silenced=bool(r["silenced"]),
        )
        _codes(json.loads(r["evidence"]) if r["evidence"] else {}, a)
        a.planned = _planned_by_lifecycle(history, a.node, a.first_seen) or _planned_by_silence(
            windows, r, a.first_seen
        )
        out.append(a)
    return out


def context(store: Store) -> Context:
    """The store's topology, jobs (Slurm's, and the workloads of dcgm-exporter's pod labels) and drivers."""
    jobs = [Job(j.job_id, frozenset(j.nodes), j.start, j.end) for j in job_rows(store)]
    topo = node_topology(store)
    drivers = {n: t["driver"] for n, t in topo.items() if t.get("driver")}  # the agent's own NVML reading
    drivers.update(node_drivers(store))  # else, and over it, what the GPU inventory last reported
    return Context(topology=topo, jobs=jobs, drivers=drivers)


def load(store: Store, now: float | None = None) -> tuple[list[AlertView], Context]:
    return alert_views(store, now), context(store)
