"""Causal folding: which alert is a symptom of which other alert's fault, by evidence a person would accept.

Each link names its evidence (the sentence goes into the incident's `because`):
  - the driver's own `caused by previous Xid N` suffix: the alert of XID N on the same node (its GPU first);
  - XID 145 at most CAUSE_S after an XID 149 in the same NVLink domain (the node when no domain is known);
  - teardown XIDs (13, 31, 43, 45) at most TEARDOWN_S after a hardware fault on the same node, or on another
    node of a job that ran on both;
  - XID 74 within CAUSE_S of a fatal SXid on the same node (the NVSwitch's fault seen from the GPU);
  - XID 154 (the driver asking for a recovery) at most CAUSE_S after a hardware fault of the same GPU.
A hardware fault is never folded into another hardware fault except by the first, second, fourth or fifth of
these, so two independent hardware faults keep their own roots. Chains (45 caused by 145 caused by 149) end at
the first cause.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable

from fleettool.incidents.model import AlertView, Context

CAUSE_S = 600.0  # a symptom at most this long after its cause
TEARDOWN_S = 300.0  # a job's teardown XIDs follow its fault within minutes
SKEW_S = 30.0  # clocks of two nodes may disagree this much: a symptom may read up to this before its cause

Link = tuple[
    str, str, str
]  # (cause alert id, why, what kind of evidence: "suffix", "nvlink", "node", "job 4711", ...)


def _gpu(a: AlertView) -> str:
    return f"GPU {a.gpu}" if a.gpu is not None else (f"GPU at {a.pci_bus_id}" if a.pci_bus_id else "(node)")


def _where(a: AlertView) -> str:
    return f"{a.node} {_gpu(a)}"


def _ago(dt: float) -> str:
    dt = max(dt, 0.0)
    return f"{dt:.0f}s" if dt < 120 else f"{dt / 60:.0f}m"


def _after(t_sym: float, t_cause: float, within: float) -> bool:
    return t_cause - SKEW_S <= t_sym <= t_cause + within


class _Index:
    """Alerts by node, by XID and by job, so each link looks only at candidates."""

    def __init__(self, alerts: list[AlertView], ctx: Context) -> None:
        self.by_node: dict[str, list[AlertView]] = defaultdict(list)
        self.by_code: dict[int, list[AlertView]] = defaultdict(list)
        self.hardware_by_node: dict[str, list[AlertView]] = defaultdict(list)
        for a in alerts:
            self.by_node[a.node].append(a)
            for c in a.codes:
                self.by_code[c].append(a)
            if a.hardware:
                self.hardware_by_node[a.node].append(a)
        for hw in self.hardware_by_node.values():
            hw.sort(key=lambda a: a.first_seen)
        self._hw_starts = {n: [a.first_seen for a in hw] for n, hw in self.hardware_by_node.items()}
        self.ctx = ctx

    def hardware_before(self, node: str, t: float, within: float) -> list[AlertView]:
        """Hardware faults of `node` that started at most `within` before `t` (or SKEW_S after it)."""
        starts = self._hw_starts.get(node)
        if not starts:
            return []
        lo = bisect.bisect_left(starts, t - within)
        hi = bisect.bisect_right(starts, t + SKEW_S)
        return self.hardware_by_node[node][lo:hi]


def _best(cands: Iterable[tuple[tuple[float, ...], AlertView, str, str]]) -> Link | None:
    got = min(cands, key=lambda c: (c[0], c[1].alert_id), default=None)
    return None if got is None else (got[1].alert_id, got[2], got[3])


def _driver_suffix(a: AlertView, ix: _Index) -> Link | None:
    t = min(a.codes.values(), default=a.first_seen)
    cands = []
    for n in a.caused_by:
        if n in a.codes:
            continue  # its cause is in this alert already
        for r in ix.by_node[a.node]:
            if r is a or n not in r.codes or not _after(t, r.codes[n], CAUSE_S):
                continue
            why = f"XID {a.xid} on {_where(a)} caused by previous Xid {n} on {_where(r)}"
            cands.append(((r.gpu != a.gpu, r.codes[n]), r, why, f"caused by previous Xid {n}"))
    return _best(cands)


def _nvlink_145(a: AlertView, ix: _Index) -> Link | None:
    if 145 not in a.codes or 149 in a.codes:
        return None
    dom = ix.ctx.domain(a.node)
    cands = []
    for r in ix.by_code[149]:
        if r is a or not _after(a.codes[145], r.codes[149], CAUSE_S):
            continue
        same = r.node == a.node if dom is None else ix.ctx.domain(r.node) == dom
        if not same:
            continue
        where = f"NVLink domain {dom}" if dom else f"node {a.node}"
        why = (
            f"XID 145 on {_where(a)} {_ago(a.codes[145] - r.codes[149])} after XID 149 on {_where(r)} "
            f"in {where}"
        )
        cands.append(((r.node != a.node, r.codes[149]), r, why, f"XID 145 after 149 in {where}"))
    return _best(cands)


def _teardown(a: AlertView, ix: _Index) -> Link | None:
    if not a.teardown_only:
        return None
    cands = []
    for r in ix.hardware_before(a.node, a.first_seen, TEARDOWN_S):
        if r is not a:
            why = (
                f"XID {a.xid} on {_where(a)} {_ago(a.first_seen - r.first_seen)} after "
                f"{_fault(r)} on {_gpu(r)} of the same node"
            )
            cands.append(((0, r.first_seen), r, why, f"teardown on {a.node}"))
    for job in ix.ctx.jobs_of(a.node, a.first_seen):
        for peer in job.nodes:
            if peer == a.node:
                continue
            for r in ix.hardware_before(peer, a.first_seen, TEARDOWN_S):
                if job in ix.ctx.jobs_of(r.node, r.first_seen):
                    why = (
                        f"job {job.job_id}: XID {a.xid} on {_where(a)} {_ago(a.first_seen - r.first_seen)} "
                        f"after {_fault(r)} on {_where(r)}"
                    )
                    cands.append(((1, r.first_seen), r, why, f"job {job.job_id}"))
    return _best(cands)


def _sxid_74(a: AlertView, ix: _Index) -> Link | None:
    if 74 not in a.codes:
        return None
    cands = []
    for r in ix.by_node[a.node]:
        if r is a or not r.sxid_fatal:
            continue
        t = min(r.sxids.values(), default=r.first_seen)
        if abs(a.codes[74] - t) <= CAUSE_S:
            sx = min(r.sxids, key=lambda c: r.sxids[c]) if r.sxids else "?"
            why = f"XID 74 on {_where(a)} within {_ago(abs(a.codes[74] - t))} of fatal SXid {sx} on {a.node}"
            cands.append(((t,), r, why, "XID 74 after a fatal SXid"))
    return _best(cands)


def _recovery_154(a: AlertView, ix: _Index) -> Link | None:
    if 154 not in a.codes or len(a.codes) > 1:
        return None
    cands = []
    for r in ix.hardware_by_node[a.node]:
        if (
            r is not a
            and r.gpu == a.gpu
            and 154 not in r.codes
            and _after(a.codes[154], r.first_seen, CAUSE_S)
        ):
            why = f"XID 154 (recovery action) on {_where(a)} after {_fault(r)} on the same GPU"
            cands.append(((r.first_seen,), r, why, "XID 154 recovery"))
    return _best(cands)


def _fault(r: AlertView) -> str:
    return f"XID {r.xid}" if r.xid is not None else r.rule


LINKS = (_driver_suffix, _nvlink_145, _recovery_154, _sxid_74, _teardown)


def causes(alerts: list[AlertView], ctx: Context) -> dict[str, Link]:
    """alert id -> (the alert id of its first cause, the evidence of each link on the way, the kind of its
    first link), for every alert some evidence links to a cause."""
    ix = _Index(alerts, ctx)
    parent: dict[str, Link] = {}
    for a in alerts:
        for link in LINKS:
            got = link(a, ix)
            if got is not None:
                parent[a.alert_id] = got
                break
    out: dict[str, Link] = {}
    for aid in parent:
        seen = {aid}
        cause, why, kind = parent[aid]
        whys = [why]
        while cause in parent and cause not in seen:  # a chain ends at its first cause
            seen.add(cause)
            cause, w, _ = parent[cause]
            whys.append(w)
        if cause != aid:
            out[aid] = (cause, "; ".join(whys), kind)
    return out
