"""The InfiniteHBD trace folded by time (issue 30, item 6): each fault of the public trace becomes one alert-like
row (fleettool.incidents.model.AlertView) fed to the fold directly, since the trace has no log lines; its nodes
are anonymous, so there is no topology and no job: only the fold's time rules apply.

Mapping (the trace's Level / Class / Desc, fault_statistics.json): a GPU-class hardware fault is a critical GPU
fault with a hardware action (a DBE resets the GPU, the rest inspect it); every other hardware class (NIC, cable,
fan, PSU, board...) a critical node fault to inspect; software and "Other" failures a warning with no hardware
action. The budget: at most 496 incidents at the fold's 5-minute window, and no two GPU-class faults in one
incident unless they start in the same minute (at most 60 s apart).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from fleettool.incidents.bursts import BURST_S
from fleettool.incidents.fold import fold_incidents
from fleettool.incidents.model import AlertView, Context

SAME_MINUTE_S = (
    60.0  # "the same minute": starts at most 60 s apart (the trace's times step by 1e-4 day, 8.64 s)
)
# the trace's times are days to 4 decimals: one step is 8.64 s, so two starts 5 minutes apart may read up to
# 8.64 s further apart; the fold's 5-minute window is widened by one step, no more
TICK_S = 8.64
ORIGIN = 1711756800.0  # 2024-03-30T00:00:00Z, the trace's first day (its README); event_time is days from it


def views(trace: Path) -> list[AlertView]:
    """One AlertView per fault (a fault_start and the first fault_end of the same node and type after it)."""
    events = json.loads(trace.read_text())
    open_: dict[tuple[str, str, str, str], list[AlertView]] = {}
    out: list[AlertView] = []
    for i, ev in enumerate(events):
        ft = ev.get("fault_type") or {}
        key = (
            str(ev["node_id"]),
            str(ft.get("Level", "")),
            str(ft.get("Class", "")),
            str(ft.get("Desc", "")),
        )
        t = ORIGIN + float(ev["event_time"]) * 86400
        if ev["event_type"] == "fault_end":
            if open_.get(key):
                a = open_[key].pop(0)
                a.last_seen, a.state = t, "resolved"
            continue
        node, level, cls, desc = key
        hw = level == "Hardware Failure"
        gpu = hw and cls == "GPU"
        a = AlertView(
            alert_id=f"ihbd-{i:04d}",
            rule=f"Trace:{cls}",
            # a GPU's own fault in the categories the fold treats as a part's own (a DBE is ECC; the rest, as
            # the driver reports them, XIDs); every other class by its name
            category=("ecc" if "DBE" in desc else "xid") if gpu else cls.lower().replace(" ", "-"),
            severity="critical" if hw else "warning",
            action=("reset-gpu" if "DBE" in desc else "inspect-hardware") if hw else "none",
            node=node,
            gpu=0 if gpu else None,
            pci_bus_id=None,
            state="firing",
            first_seen=t,
            last_seen=t,
            summary=f"{level} / {cls}: {desc}",
        )
        open_.setdefault(key, []).append(a)
        out.append(a)
    return out


def fold_trace(trace: Path, max_incidents: int) -> dict[str, Any]:
    """Fold the trace; the figures and broken budgets."""
    alerts = views(trace)
    by_id = {a.alert_id: a for a in alerts}
    incs = fold_incidents(alerts, Context(), burst_s=BURST_S + TICK_S)
    broken: list[str] = []
    joined: list[str] = []
    for inc in incs:
        gpus = [by_id[m] for m in inc.members if m in by_id and by_id[m].rule == "Trace:GPU"]
        starts = [a.first_seen for a in gpus]
        if len(gpus) > 1 and max(starts) - min(starts) > SAME_MINUTE_S:
            ids = ", ".join(sorted(a.alert_id for a in gpus))
            spread = max(starts) - min(starts)
            joined.append(
                f"incident {inc.incident_id} ({inc.scope}/{inc.key}) folds GPU faults {ids} {spread:.0f} s apart"
            )
    if len(incs) > max_incidents:
        broken.append(f"infinitehbd: {len(incs)} incidents > {max_incidents}")
    broken.extend(f"infinitehbd: {j}" for j in joined)
    pages = sum(1 for i in incs if i.page)
    return {
        "faults": len(alerts),
        "incidents": len(incs),
        "pages": pages,
        "scopes": dict(Counter(i.scope for i in incs)),
        "largest": max((i.alerts for i in incs), default=0),
        "compression": round(len(alerts) / max(len(incs), 1), 2),
        "broken": broken,
    }
