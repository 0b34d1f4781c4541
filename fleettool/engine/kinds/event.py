"""event: event lines of the given kinds (and codes), XIDs judged by the catalog policy.

Each line is active at its time, then inactive just after, so the alert fires at once and stays for
keep_firing_for. `refine` judges each finding by its last line: an XID by the catalog (fleettool.xid_catalog),
escalated when it recurs across reboots or bursts; an SXID by its fatal/nonfatal severity.

    kind: event
    events: [xid]
    codes: [79]                  # optional: every code when left out
    use_xid_policy: true         # false: the rule's own severity, category and action
"""

from __future__ import annotations

import json
from typing import Any

from fleettool.engine.kinds._base import Kind, KindResult, RuleLike, Verdict
from fleettool.engine.kinds._promql import dur
from fleettool.engine.kinds._sql import epoch, read, ts_param
from fleettool.model import Action, Severity
from fleettool.store import Store
from fleettool.xid_catalog import Judgement, catalog, judge

# where an XID's findings join other findings of the same GPU
INCIDENT_OF_CATEGORY = {
    "ecc": "memory",
    "row-remap": "memory",
    "gpu-lost": "lost",
    "nvlink": "nvlink",
    "pcie": "pcie",
    "thermal": "clocks",
    "power": "clocks",
    "xid": "xid",
}
SXID_SEVERITY = {"fatal": (Severity.CRITICAL, Action.RESET_GPU), "nonfatal": (Severity.INFO, Action.NONE)}


def evaluate(store: Store, r: RuleLike, start: float, end: float) -> KindResult:
    kinds = list(r.p("events") or ["xid"])
    codes = r.p("codes")
    q = (
        "SELECT ts, node, gpu, uuid, pci_bus_id, kind, code, message, detail::VARCHAR AS detail FROM events "
        "WHERE kind IN (SELECT unnest($kinds)) AND (ts IS NULL OR ts BETWEEN $start AND $end)"
    )
    params: dict[str, Any] = {"kinds": kinds, "start": ts_param(start), "end": ts_param(end)}
    if codes:
        q += " AND code IN (SELECT unnest($codes))"
        params["codes"] = [int(c) for c in codes]
    q += " ORDER BY node, gpu, ts"
    res = KindResult()
    for row in read(store, q, params):
        kind, code, detail = row["kind"], row["code"], row["detail"]
        t = epoch(row["ts"]) if row["ts"] is not None else end
        key = f"{kind}:{code}" if code is not None else kind
        ent = (row["node"], row["gpu"], key)
        ex = res.extra.setdefault(ent, {"events": []})
        ex["events"].append(
            {
                "ts": t,
                "kind": kind,
                "code": code,
                "message": row["message"],
                "pci_bus_id": row["pci_bus_id"],
                "uuid": row["uuid"],
                "detail": json.loads(detail) if detail else {},
            }
        )
        lst = res.obs.setdefault(ent, [])
        lst.append((t, True, float(code) if code is not None else None))
        lst.append((t + 1.0, False, None))
    for obs in res.obs.values():
        obs.sort(key=lambda o: (o[0], not o[1]))
    return res


def refine(r: RuleLike, first_seen: float, last_seen: float, extra: dict[str, Any], v: Verdict) -> None:
    """The finding's lines as evidence; its severity, category, action and incident from its last line."""
    evs = [e for e in extra.get("events", []) if first_seen - 1 <= e["ts"] <= last_seen + 1]
    v.evidence["events"] = evs[-20:]
    v.evidence["event_count"] = len(evs)
    last = evs[-1] if evs else None
    if last is None:
        return
    v.summary_kw.update(code=last["code"], message=last["message"][:120], count=len(evs))
    if last["kind"] == "xid" and r.p("use_xid_policy", True):
        j = judge(int(last["code"]), last.get("detail") or {})
        v.severity, v.category, v.action = j.severity, j.category, j.action
        v.summary_kw["name"] = j.name
        v.evidence["judgement"] = j.reason
        v.incident = INCIDENT_OF_CATEGORY.get(j.category.value, "xid")
        esc = _escalation(j, extra.get("events", []), extra.get("boots", []))
        if esc is not None:
            v.severity, v.action, why = esc
            v.evidence["escalated"] = why
    elif last["kind"] == "sxid":
        v.severity, v.action = SXID_SEVERITY.get(
            str((last.get("detail") or {}).get("sxid_severity")),
            (Severity.WARNING, Action.INSPECT_HARDWARE),
        )


def _escalation(
    j: Judgement, evs: list[dict[str, Any]], boots: list[float]
) -> tuple[Severity, Action, str] | None:
    rep = j.repeat
    if rep is None or not evs:
        return None
    times = sorted(e["ts"] for e in evs)
    if rep.reboots is not None:
        epochs = {sum(1 for b in boots if b < t) for t in times}
        if len(epochs) >= rep.reboots + 1:
            return rep.severity, rep.action, f"seen in {len(epochs)} boots: {rep.reason}"
    if rep.incidents is not None:
        bursts = [times[0]]
        for a, b in zip(times, times[1:], strict=False):
            if b - a > rep.gap_s:
                bursts.append(b)
        within = rep.within_s or float("inf")
        recent = [t for t in bursts if times[-1] - t <= within]
        if len(recent) >= rep.incidents:
            return rep.severity, rep.action, f"{len(recent)} separate bursts: {rep.reason}"
    return None


def promql(r: RuleLike) -> list[dict[str, Any]] | None:
    """XIDs from fleettool_events_total{kind="xid", code}: one rule per (severity, action, category) class of
    the catalog policy. Other event kinds, and XIDs of chosen codes, have no counter on /metrics."""
    if r.p("events") != ["xid"]:
        return None
    classes: dict[tuple[str, str, str], list[int]] = {}
    for code in sorted(catalog()):
        j = judge(code)
        classes.setdefault((j.severity.value, j.action.value, j.category.value), []).append(code)
    out = []
    for (sev, act, cat), codes in sorted(classes.items()):
        name = f"{r.alert}{sev.capitalize()}{''.join(w.capitalize() for w in act.split('-'))}{cat.replace('-', '').capitalize()}"
        out.append(
            {
                "alert": name,
                "expr": f'increase(fleettool_events_total{{kind="xid",code=~"{"|".join(map(str, codes))}"}}[10m]) > 0',
                "keep_firing_for": dur(r.keep_s or 3600),
                "labels": {"severity": sev, "category": cat, "action": act},
                "annotations": {
                    "summary": "XID {{ $labels.code }} on {{ $labels.hostname }}",
                    "runbook_url": r.runbook,
                },
            }
        )
    return out


KIND = Kind(
    name="event",
    fields=frozenset({"events", "codes", "use_xid_policy"}),
    evaluate=evaluate,
    promql=promql,
    refine=refine,
    needs_boots=True,
)
