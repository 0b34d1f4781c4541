"""The blast guard: how many nodes may be in remediation at once, and whether this node's alerts may start one.

`check` counts the open episodes (state running or proving: fleettool.store.remediations.OPEN_STATES) by scope:
- the node itself: a node already in remediation is refused, naming its episode;
- its rack (node_topology key `rack`): at most `per_rack` nodes (default 1);
- its NVLink domain (`nvlink_domain`, else `clique`, as the incident fold reads it), only where `per_domain` is set;
- the fleet: at most `fleet_pct` % of the nodes the store knows (default 5 %), and never fewer than 1 node.
  The nodes the store knows: those of its GPU inventory, topology, alerts, lifecycle moves and remediations,
  and the node asked about (`fleet_nodes`).
A node with no rack in the topology gets only the fleet limit (and the domain limit where it has a domain):
`scopes` says so, for the plan to print.

`storm_refusal` reads the incident folding (fleettool/incidents/, store/incidents.py): a node whose firing or
pending alerts sit in a job-teardown storm (an incident without a root, of scope `job` or keyed `teardown`),
under another node's root, or in an incident without a root that spans more than the node (rack, leaf, NVLink
domain, driver, fleet: the cause is outside it) is not remediated, unless one of its alerts is the root of an
incident of its own whose action is a hardware one (reset-gpu, reboot-node, inspect-hardware): its own fault
is then what the remediation is for.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any

from fleettool.incidents.model import HARDWARE_ACTIONS
from fleettool.store import Store
from fleettool.store.remediations import open_remediations
from fleettool.store.topology import node_topology
from fleettool.store.values import epoch

OWN_SCOPES = (
    "gpu",
    "node",
)  # an incident without a root in one of these, keyed by the node, is the node's own


@dataclass(frozen=True)
class GuardLimits:
    """At most `per_rack` nodes of a rack, `per_domain` of an NVLink domain (None: no domain limit) and
    `fleet_pct` % of the fleet (at least 1 node) in remediation at once."""

    per_rack: int = 1
    fleet_pct: float = 5.0
    per_domain: int | None = None

    def fleet_cap(self, fleet_nodes: int) -> int:
        """The most nodes of a fleet of `fleet_nodes` in remediation at once: fleet_pct % of it, at least 1."""
        return max(1, math.floor(fleet_nodes * self.fleet_pct / 100.0 + 1e-9))


@dataclass(frozen=True)
class Refusal:
    """Why a remediation does not start. `open`: the open episodes that fill the scope (id, node, gpu, rung,
    state, since (ISO 8601 UTC), incident_id); `incidents`: for a storm refusal, the incidents that refuse it
    (incident_id, scope, key, root_node, root_gpu, root_alert, summary, alerts: this node's alerts in it)."""

    reason: str
    open: tuple[dict[str, Any], ...] = ()
    incidents: tuple[dict[str, Any], ...] = ()


def _iso(v: dt.datetime | None) -> str | None:
    return None if v is None else v.strftime("%Y-%m-%dT%H:%M:%SZ")


def _episode(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": r["remediation_id"],
        "node": r["node"],
        "gpu": r["gpu"],
        "rung": r["rung"],
        "state": r["state"],
        "since": _iso(r["started"]),
        "incident_id": r["incident_id"],
    }


def _age(since: dt.datetime | None, now: float) -> str:
    t = epoch(since)
    if t is None:
        return ""
    s = max(now - t, 0.0)
    return f", {s / 60:.0f} min" if s < 7200 else f", {s / 3600:.1f} h"


def _named(eps: list[dict[str, Any]], now: float) -> str:
    """'gpu-18 GPU 3 reset since 2026-12-06T04:15:00Z (rem-gpu-18-..., running, 12 min)', '; '-joined."""
    out = []
    for r in eps:
        what = r["node"] + (f" GPU {r['gpu']}" if r["gpu"] is not None else "")
        out.append(
            f"{what} {r['rung']} since {_iso(r['started'])} ({r['remediation_id']}, {r['state']}"
            f"{_age(r['started'], now)})"
        )
    return "; ".join(out)


def fleet_nodes(store: Store, node: str | None = None) -> int:
    """The nodes the store knows: its GPU inventory, topology, alerts, lifecycle moves and remediations (and
    `node`, the one asked about, known or not)."""
    rows = store.query(
        "SELECT DISTINCT node FROM (SELECT node FROM gpus UNION SELECT node FROM node_topology "
        "UNION SELECT node FROM alerts UNION SELECT node FROM node_states UNION SELECT node FROM remediations)"
    )
    return len({r["node"] for r in rows} | ({node} if node else set()))


def _domain(keys: dict[str, str]) -> str | None:
    return keys.get("nvlink_domain") or keys.get("clique")


def _where(keys: dict[str, str], scope: str) -> str | None:
    return keys.get("rack") if scope == "rack" else _domain(keys)


def scopes(store: Store, node: str, limits: GuardLimits | None = None) -> dict[str, Any]:
    """Where the node sits and what is open there: rack, nvlink_domain (None when unknown), fleet_nodes, the
    open nodes per scope (open: {rack, nvlink_domain, fleet}), the caps of `limits`, and `notes`: sentences for
    the plan ("no rack known for gpu-17: only the fleet limit applies")."""
    limits = limits or GuardLimits()
    topo = node_topology(store)
    mine = topo.get(node, {})
    rack, domain = mine.get("rack"), _domain(mine)
    eps = open_remediations(store)
    total = fleet_nodes(store, node)
    busy = {r["node"] for r in eps}
    notes = []
    if rack is None:
        only = "the fleet limit" + (" and the NVLink domain limit" if domain and limits.per_domain else "")
        notes.append(f"no rack known for {node}: only {only} applies")
    if limits.per_domain is not None and domain is None:
        notes.append(f"no NVLink domain known for {node}: the domain limit cannot apply")
    return {
        "node": node,
        "rack": rack,
        "nvlink_domain": domain,
        "fleet_nodes": total,
        "open": {
            "rack": len({n for n in busy if rack and _where(topo.get(n, {}), "rack") == rack}),
            "nvlink_domain": len({n for n in busy if domain and _domain(topo.get(n, {})) == domain}),
            "fleet": len(busy),
        },
        "caps": {
            "rack": limits.per_rack,
            "nvlink_domain": limits.per_domain,
            "fleet": limits.fleet_cap(total),
        },
        "notes": notes,
    }


def check(store: Store, node: str, *, limits: GuardLimits, now: float) -> Refusal | None:
    """None when a remediation of `node` may start; else a Refusal naming the limit, the scope and the open
    remediations that fill it (module docstring)."""
    eps = open_remediations(store)
    own = [r for r in eps if r["node"] == node]
    if own:
        return Refusal(
            f"{node} is already in remediation: {_named(own, now)}; one episode per node at a time",
            tuple(_episode(r) for r in own),
        )
    topo = node_topology(store)
    mine = topo.get(node, {})
    for scope, value, cap in (
        ("rack", mine.get("rack"), limits.per_rack),
        ("NVLink domain", _domain(mine), limits.per_domain),
    ):
        if value is None or cap is None:
            continue
        there = [r for r in eps if _where(topo.get(r["node"], {}), scope) == value]
        nodes = {r["node"] for r in there}
        if len(nodes) >= cap:
            return Refusal(
                f"{scope} {value} already has {len(nodes)} node{'s' * (len(nodes) != 1)} in remediation, the "
                f"limit is {cap} per {scope}: {_named(there, now)}",
                tuple(_episode(r) for r in there),
            )
    total = fleet_nodes(store, node)
    cap = limits.fleet_cap(total)
    nodes = {r["node"] for r in eps}
    if len(nodes) >= cap:
        return Refusal(
            f"the fleet already has {len(nodes)} of its {total} nodes in remediation, the limit is {cap} "
            f"({limits.fleet_pct:g} % of the fleet, at least 1): {_named(eps, now)}",
            tuple(_episode(r) for r in eps),
        )
    return None


def _is_storm(i: dict[str, Any]) -> bool:
    return i["root_alert"] is None and (i["scope"] == "job" or i["key"] == "teardown")


def storm_refusal(store: Store, node: str) -> Refusal | None:
    """None when the node's open alerts may start a remediation; else a Refusal naming the incident(s) and
    their root (module docstring)."""
    rows = store.query(
        "SELECT a.alert_id, m.role, i.incident_id, i.scope, i.key, i.action, i.root_alert, i.root_node, "
        "i.root_gpu, i.root_code, i.summary FROM alerts a JOIN incident_members m USING (alert_id) "
        "JOIN incidents i USING (incident_id) WHERE a.node = ? AND a.state IN ('firing', 'pending') "
        "ORDER BY i.first_seen, i.incident_id, a.alert_id",
        [node],
    )
    own = False
    against: dict[str, dict[str, Any]] = {}
    why: dict[str, str] = {}
    for r in rows:
        iid = r["incident_id"]
        if r["root_node"] == node or (
            r["root_alert"] is None and r["scope"] in OWN_SCOPES and r["key"] in (node, None)
        ):
            own = own or r["action"] in HARDWARE_ACTIONS
            continue
        if _is_storm(r):
            why[iid] = "a job-teardown storm (no root: a job's teardown, not a fault of its GPUs)"
        elif r["root_alert"] is not None:
            root = r["root_node"] + (f" GPU {r['root_gpu']}" if r["root_gpu"] is not None else "")
            code = f", XID {r['root_code']}" if r["root_code"] is not None else ""
            why[iid] = (
                f"its root is on {root} (alert {r['root_alert']}{code}): remediate {r['root_node']} first"
            )
        else:
            where = f"{r['scope']} {r['key']}" if r["key"] else r["scope"]
            why[iid] = f"a {where} incident with no root: its cause is outside {node}"
        inc = against.setdefault(
            iid,
            {
                k: r[k]
                for k in ("incident_id", "scope", "key", "root_node", "root_gpu", "root_alert", "summary")
            }
            | {"alerts": []},
        )
        inc["alerts"].append(r["alert_id"])
    if own or not against:
        return None
    parts = [
        f"incident {iid} ({i['scope']}{'/' + i['key'] if i['key'] else ''}, {len(i['alerts'])} of {node}'s "
        f"alerts; root: {i['root_alert'] or 'none'}): {why[iid]}"
        for iid, i in against.items()
    ]
    return Refusal(
        f"no remediation of {node}: its open alerts are in " + "; ".join(parts),
        (),
        tuple(against.values()),
    )
