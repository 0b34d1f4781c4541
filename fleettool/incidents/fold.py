"""The fold: alerts -> incidents, causal evidence first, then topology, then time (package docstring).

Every alert lands in exactly one incident. An incident with a root is the root alert and its symptoms; its scope
is the smallest that holds them all (gpu, node, nvlink-domain, job, fleet). A storm without a cause has no root.
Paging: a root pages when it is critical and neither silenced nor planned; members never page; a storm pages
once when it is critical and not all planned or silenced, never when it is a teardown.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict

from fleettool.incidents.bursts import BURST_S, quiet, teardown_storms, time_groups
from fleettool.incidents.causal import causes
from fleettool.incidents.model import AlertView, Context
from fleettool.incidents.spread import (
    Group,
    driver_groups,
    fabric_groups,
    node_groups,
    teardown_groups,
    topology_groups,
)
from fleettool.model import Action, Severity
from fleettool.store.alerts import ALERT_STATES
from fleettool.store.incidents import IncidentRecord

MAX_BECAUSE = 6  # sentences of evidence kept per incident, besides the count


def _id(scope: str, key: str | None, anchor: str) -> str:
    return hashlib.sha256(f"{scope}|{key}|{anchor}".encode()).hexdigest()[:16]


def _state(alerts: list[AlertView]) -> str:
    return min((a.state for a in alerts), key=lambda s: ALERT_STATES.index(s) if s in ALERT_STATES else 9)


def _worst(alerts: list[AlertView]) -> str:
    return max(
        (a.severity for a in alerts),
        key=lambda s: Severity(s).rank if s in Severity._value2member_map_ else 0,
    )


def _strongest(alerts: list[AlertView]) -> str:
    return max(
        (a.action for a in alerts), key=lambda s: Action(s).rank if s in Action._value2member_map_ else 0
    )


def _counts(alerts: list[AlertView]) -> tuple[int, int]:
    """Nodes, and GPUs (by index, else by PCI id: a plain dmesg's XID names no index)."""
    gpus = {(a.node, a.gpu if a.gpu is not None else a.pci_bus_id) for a in alerts}
    return len({a.node for a in alerts}), len({g for g in gpus if g[1] is not None})


def _span(dt: float) -> str:
    return f"{dt:.0f}s" if dt < 120 else f"{dt / 60:.0f} min"


def _gpu_of(a: AlertView) -> int | str | None:
    return a.gpu if a.gpu is not None else a.pci_bus_id


def _rooted_scope(root: AlertView, alerts: list[AlertView], ctx: Context) -> tuple[str, str | None]:
    nodes = {a.node for a in alerts}
    if nodes == {root.node}:
        gpus = {_gpu_of(a) for a in alerts}
        return ("gpu", None) if gpus == {_gpu_of(root)} and _gpu_of(root) is not None else ("node", root.node)
    dom = ctx.domain(root.node)
    if dom is not None and all(ctx.domain(n) == dom for n in nodes):
        return "nvlink-domain", dom
    for job in ctx.jobs_of(root.node, root.first_seen):
        if nodes <= job.nodes:
            return "job", job.job_id
    return "fleet", None


def _evidence(root: AlertView, members: list[tuple[AlertView, str, str]]) -> list[str]:
    """The count, then per kind of link its first sentence and how many more it stands for."""
    if not members:
        return []
    last = max(m.first_seen for m, _, _ in members)
    mnodes = len({m.node for m, _, _ in members})
    out = [
        f"{len(members)} symptom alert{'s' * (len(members) > 1)} on {mnodes} node{'s' * (mnodes > 1)} "
        f"within {_span(max(last - root.first_seen, 0.0))} after the root"
    ]
    by_kind: dict[str, list[tuple[AlertView, str]]] = defaultdict(list)
    for m, why, kind in members:
        by_kind[kind].append((m, why))
    for _kind, got in sorted(by_kind.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:MAX_BECAUSE]:
        nodes = len({m.node for m, _ in got})
        more = (
            f" (and {len(got) - 1} more like it on {nodes} node{'s' * (nodes > 1)})" if len(got) > 1 else ""
        )
        out.append(got[0][1] + more)
    return out


def _rooted(root: AlertView, members: list[tuple[AlertView, str, str]], ctx: Context) -> IncidentRecord:
    alerts = [root] + [m for m, _, _ in members]
    scope, key = _rooted_scope(root, alerts, ctx)
    nodes, gpus = _counts(alerts)
    because = _evidence(root, members)
    quiet = root.silenced or root.planned
    if root.planned:
        because.append(f"planned: {root.node} was in maintenance (lifecycle or a silence with a reason)")
    summary = root.summary + (
        f"; {len(members)} symptoms on {nodes} nodes folded under it" if members else ""
    )
    return IncidentRecord(
        incident_id=_id(
            "root", None, root.alert_id
        ),  # the same id while its symptoms arrive and its scope grows
        scope=scope,
        key=key,
        state=_state(alerts),
        severity=_worst(alerts),
        page=_worst([root]) == "critical" and not quiet,
        action=root.action,
        root_alert=root.alert_id,
        root_node=root.node,
        root_gpu=root.gpu,
        root_code=root.xid,
        first_seen=root.first_seen,
        last_seen=max(a.last_seen for a in alerts),
        nodes=nodes,
        gpus=gpus,
        alerts=len(alerts),
        summary=summary,
        because=because,
        members={
            root.alert_id: ("root", "the first cause"),
            **{m.alert_id: ("member", w) for m, w, _ in members},
        },
    )


def _storm(g: Group, ctx: Context) -> IncidentRecord:
    if g.root is not None:  # a burst around one hardware fault: that fault is its root
        why = g.because[0] if g.because else "within minutes of the root"
        members = [(a, why, "burst") for a in g.alerts if a is not g.root]
        return _rooted(g.root, sorted(members, key=lambda m: (m[0].first_seen, m[0].alert_id)), ctx)
    alerts = sorted(g.alerts, key=lambda a: (a.first_seen, a.alert_id))
    nodes, gpus = _counts(alerts)
    planned = all(
        a.planned for a in alerts
    )  # planned work: what it causes is expected, sends nothing anywhere
    severity = "info" if g.teardown or planned else _worst(alerts)
    quiet = all(a.silenced or a.planned for a in alerts)
    because = list(g.because)
    if any(a.planned for a in alerts):
        because.append(
            f"planned: {sum(a.planned for a in alerts)} of {len(alerts)} alerts during maintenance"
        )
    return IncidentRecord(
        incident_id=_id(g.scope, g.key, alerts[0].alert_id),
        scope=g.scope,
        key=g.key,
        state=_state(alerts),
        severity=severity,
        page=severity == "critical" and not quiet,
        action=g.action or ("none" if g.teardown or planned or g.scope == "driver" else _strongest(alerts)),
        root_alert=None,
        root_node=None,
        root_gpu=None,
        root_code=None,
        first_seen=alerts[0].first_seen,
        last_seen=max(a.last_seen for a in alerts),
        nodes=nodes,
        gpus=gpus,
        alerts=len(alerts),
        summary=g.because[0] if g.because else f"{len(alerts)} alerts",
        because=because,
        members={a.alert_id: ("member", g.because[0] if g.because else "") for a in alerts},
    )


def fold_incidents(alerts: list[AlertView], ctx: Context, burst_s: float = BURST_S) -> list[IncidentRecord]:
    """Every alert into exactly one incident (module docstring); `burst_s`: the time stage's gap (bursts.py)."""
    links = causes(alerts, ctx)
    by_id = {a.alert_id: a for a in alerts}
    members: dict[str, list[tuple[AlertView, str, str]]] = defaultdict(list)
    for aid, (cause, why, kind) in links.items():
        members[cause].append((by_id[aid], why, kind))
    out = [
        _rooted(by_id[r], sorted(ms, key=lambda m: (m[0].first_seen, m[0].alert_id)), ctx)
        for r, ms in members.items()
    ]
    free = [a for a in alerts if a.alert_id not in links and a.alert_id not in members]
    jobs, loose = teardown_groups([a for a in free if a.teardown_only], ctx)
    fabric, rest = fabric_groups(loose + [a for a in free if not a.teardown_only], ctx)
    got, rest = topology_groups(rest, ctx)
    groups = jobs + fabric + got
    got, soft = driver_groups([a for a in rest if not a.hardware], ctx)
    groups += got
    got, rest = node_groups(soft + [a for a in rest if a.hardware])
    groups += got
    got, left = time_groups(rest, burst_s)
    groups += got
    # teardown alone (groups of teardown XIDs, and lone ones) chains into storms
    calm = [g for g in groups if g.root is None and all(quiet(a) for a in g.alerts)]
    calm += [Group("gpu", None, [a]) for a in left if quiet(a)]
    groups = [g for g in groups if not (g.root is None and all(quiet(a) for a in g.alerts))]
    left = [a for a in left if not quiet(a)]
    for g in teardown_storms(calm):
        if len(g.alerts) == 1:
            left.append(g.alerts[0])
        else:
            groups.append(g)
    out += [_storm(g, ctx) for g in groups]
    out += [_rooted(a, [], ctx) for a in left]
    return out
