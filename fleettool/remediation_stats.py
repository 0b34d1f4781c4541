"""What remediation did, per node and for the fleet, from the store's episodes (fleettool.store.remediations):

- time to service: from the page (`paged_at`: the incident's or alert's first_seen) to the proven return
  (`ended` of an episode in state proven), median and p90 (linear interpolation, as `report --incidents`);
  a proven episode with no page time (started by hand, not from an alert) is counted in `no_page`, not timed;
- the rungs tried: one audit-trail line of kind 'rung' per rung tried, counted by its name (reset, reboot,
  power-cycle, rma);
- episodes by state: proven, failed, stopped, open (running or proving);
- re-failures within 24 h of a proven return: after the episode's end, within `REFAIL_S`, a new alert on that
  node (on that GPU when the episode had one) whose action takes the GPU or node out (reset-gpu, reboot-node,
  inspect-hardware: a teardown or a trend is not the fault coming back), or a new episode on that node (that GPU
  when both name one). Each proven episode counts once; `refailed` lists them.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from typing import Any

from fleettool.store import Store
from fleettool.store.remediations import END_STATES, OPEN_STATES, list_remediations
from fleettool.store.values import epoch

REFAIL_S = 24 * 3600.0
RUNGS = ("reset", "reboot", "power-cycle", "rma")  # fleettool.remediate.model.LADDER's names (a layer above)
DISRUPTIVE = ("reset-gpu", "reboot-node", "inspect-hardware")


def quantile(xs: list[float], q: float) -> float | None:
    """The q-quantile of xs by linear interpolation between the closest ranks (numpy's and polars' 'linear')."""
    if not xs:
        return None
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _t(v: dt.datetime | None) -> float | None:
    return epoch(v)


def _rungs(store: Store) -> dict[str, Counter[str]]:
    """remediation_id -> rung name -> lines of kind 'rung'."""
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for r in store.query(
        "SELECT remediation_id, name, count(*) AS n FROM remediation_log WHERE kind = 'rung' GROUP BY ALL"
    ):
        out[r["remediation_id"]][r["name"]] += int(r["n"])
    return out


def _refailure(
    ep: dict[str, Any], end: float, alerts: list[dict[str, Any]], eps: list[dict[str, Any]]
) -> str | None:
    """What came back within REFAIL_S of the proven end of `ep` (an alert id or an episode id), or None."""
    gpu = ep["gpu"]
    for a in alerts:
        t = _t(a["first_seen"])
        if (
            a["node"] == ep["node"]
            and (gpu is None or a["gpu"] == gpu)
            and t is not None
            and end < t <= end + REFAIL_S
        ):
            return f"alert {a['alert_id']}"
    for e in eps:
        t = _t(e["started"])
        same_gpu = gpu is None or e["gpu"] is None or e["gpu"] == gpu
        if (
            e is not ep
            and e["node"] == ep["node"]
            and same_gpu
            and t is not None
            and end < t <= end + REFAIL_S
        ):
            return f"episode {e['remediation_id']}"
    return None


def _figures(
    eps: list[dict[str, Any]], rungs: dict[str, Counter[str]], refailed: dict[str, str]
) -> dict[str, Any]:
    tts = [
        _t(e["ended"]) - _t(e["paged_at"])  # type: ignore[operator]
        for e in eps
        if e["state"] == "proven" and e["paged_at"] is not None and e["ended"] is not None
    ]
    tried: Counter[str] = Counter()
    for e in eps:
        tried.update(rungs.get(e["remediation_id"], Counter()))
    states = Counter(e["state"] for e in eps)
    med, p90 = quantile(tts, 0.5), quantile(tts, 0.9)
    return {
        "episodes": len(eps),
        **{s: states.get(s, 0) for s in END_STATES},
        "open": sum(states.get(s, 0) for s in OPEN_STATES),
        "time_to_service_s": {
            "n": len(tts),
            "median": None if med is None else round(med, 1),
            "p90": None if p90 is None else round(p90, 1),
        },
        "no_page": sum(1 for e in eps if e["state"] == "proven" and e["paged_at"] is None),
        "rungs": {name: tried.get(name, 0) for name in RUNGS}
        | {k: v for k, v in sorted(tried.items()) if k not in RUNGS},
        "refailures_24h": sum(1 for e in eps if e["remediation_id"] in refailed),
        "refailed": {
            e["remediation_id"]: refailed[e["remediation_id"]] for e in eps if e["remediation_id"] in refailed
        },
    }


def remediation_report(store: Store) -> dict[str, Any]:
    """{"fleet": figures, "nodes": [{"node", **figures}] by node}: the module docstring's figures; empty nodes
    and a fleet of zeros when nothing was remediated."""
    eps = list_remediations(store)
    rungs = _rungs(store)
    alerts = store.query(
        f"SELECT alert_id, node, gpu, first_seen FROM alerts WHERE action IN ({', '.join('?' for _ in DISRUPTIVE)}) "
        "AND node IN (SELECT node FROM remediations WHERE state = 'proven')",
        list(DISRUPTIVE),
    )
    refailed: dict[str, str] = {}
    for e in eps:
        end = _t(e["ended"])
        if e["state"] == "proven" and end is not None:
            got = _refailure(e, end, alerts, eps)
            if got is not None:
                refailed[e["remediation_id"]] = got
    by_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in eps:
        by_node[e["node"]].append(e)
    return {
        "fleet": _figures(eps, rungs, refailed),
        "nodes": [{"node": n, **_figures(by_node[n], rungs, refailed)} for n in sorted(by_node)],
    }
