"""Folding by where, for alerts no cause explains (after causal.py; time is bursts.py):

- teardown: XIDs 13/31/43/45 with no hardware root on a job's nodes, one group per job (bursts.py joins a
  storm of them into one incident; those of no known job fold as below);
- fabric: NIC faults (category nic: a port down, flapping, dropped or degraded) on several nodes of one IB leaf,
  and NVLink faults (category nvlink: links fewer, fabric unhealthy, ...) on several nodes of one NVLink domain,
  whatever rule found each, each within FABRIC_WINDOW_S of the one before: the leaf or the domain's switches
  failed, not the nodes. One incident keyed by the leaf or domain, action none (no node is cordoned or sent to
  inspection for its switch's fault); it pages once. Several: k >= 3 nodes, or k >= 2 that are at least half
  of the n the topology places there;
- topology: the same rule (and XID) on k of n nodes of a rack, NVLink domain or IB leaf (k >= 2 and
  k >= n/2, n the nodes the topology places there) within WINDOW_S (k >= 3 where hardware faults are among
  them: that many parts failing together in one place share a cause);
- driver: the same rule on at least 3 nodes of one driver version and on no node of another version;
- node: the same rule on several GPUs of one node within WINDOW_S (3 for hardware faults).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from fleettool.incidents.model import AlertView, Context

WINDOW_S = 600.0
MIN_DRIVER_NODES = 3

# which topology scope a category's spread is judged in first (an NVLink fault by its domain, a slow node by its
# leaf, heat by its rack)
SCOPE_ORDER = {
    "nvlink": ("nvlink-domain", "rack", "leaf"),
    "straggler": ("leaf", "nvlink-domain", "rack"),
    "nccl": ("leaf", "nvlink-domain", "rack"),
    "thermal": ("rack", "nvlink-domain", "leaf"),
    "power": ("rack", "nvlink-domain", "leaf"),
    "nic": ("leaf", "rack", "nvlink-domain"),
}
# the fabric stage: a category's faults across rules, judged in the scope of its switches
FABRIC_SCOPES = {"nic": "leaf", "nvlink": "nvlink-domain"}
FABRIC_WINDOW_S = 60.0
FABRIC_WHAT = {"leaf": "the leaf switch", "nvlink-domain": "the domain's NVLink switches or fabric manager"}
DEFAULT_ORDER = ("rack", "nvlink-domain", "leaf")
SCOPE_KEYS = {"rack": ("rack",), "nvlink-domain": ("nvlink_domain", "clique"), "leaf": ("leaf",)}


@dataclass
class Group:
    scope: str
    key: str | None
    alerts: list[AlertView]
    because: list[str] = field(default_factory=list)
    root: AlertView | None = None  # a burst with one hardware fault in it: that fault (bursts.py)
    action: str | None = (
        None  # the incident's action when not its members' strongest (a switch's fault: none)
    )

    @property
    def teardown(self) -> bool:
        """Every alert is only teardown XIDs: informational, never pages, sends no GPU anywhere."""
        return all(a.teardown_only for a in self.alerts)


def _nodes(alerts: list[AlertView]) -> set[str]:
    return {a.node for a in alerts}


def _chains(alerts: list[AlertView], gap: float) -> list[list[AlertView]]:
    """Alerts in runs whose starts are each at most `gap` after the one before."""
    out: list[list[AlertView]] = []
    for a in sorted(alerts, key=lambda a: (a.first_seen, a.alert_id)):
        if out and a.first_seen - out[-1][-1].first_seen <= gap:
            out[-1].append(a)
        else:
            out.append([a])
    return out


def _span(alerts: list[AlertView]) -> str:
    s = max(a.first_seen for a in alerts) - min(a.first_seen for a in alerts)
    return f"{s:.0f}s" if s < 120 else f"{s / 60:.0f} min"


def teardown_groups(alerts: list[AlertView], ctx: Context) -> tuple[list[Group], list[AlertView]]:
    """Teardown XIDs no hardware fault explains, on the nodes of a job while it ran: one incident per job; and
    those of no known job (folded further like any other alert)."""
    by_job: dict[str, list[AlertView]] = defaultdict(list)
    loose: list[AlertView] = []
    for a in alerts:
        jobs = ctx.jobs_of(a.node, a.first_seen)
        if jobs:
            by_job[min(jobs, key=lambda j: (j.start or 0.0, j.job_id)).job_id].append(a)
        else:
            loose.append(a)
    out = []
    for job, got in sorted(by_job.items()):
        xids = sorted({c for a in got for c in a.codes})
        why = (
            f"job {job}: XID {', '.join(map(str, xids))} on {len(_nodes(got))} nodes, {len(got)} GPUs within "
            f"{_span(got)} and no hardware fault: a job's teardown, not a fault of its GPUs"
        )
        out.append(Group("job", job, got, [why]))
    return out, loose


def _scope_value(ctx: Context, node: str, scope: str) -> str | None:
    t = ctx.topology.get(node, {})
    return next((t[k] for k in SCOPE_KEYS[scope] if t.get(k)), None)


def _members_of(ctx: Context, scope: str, value: str) -> int:
    return sum(1 for n in ctx.topology if _scope_value(ctx, n, scope) == value)


def _by_finding(alerts: list[AlertView]) -> list[tuple[str, list[AlertView]]]:
    """The alerts by what they found (rule, and XID for a rule of many), in a stable order."""
    by: dict[str, list[AlertView]] = defaultdict(list)
    for a in alerts:
        by[a.finding].append(a)
    return sorted(by.items())


def topology_groups(alerts: list[AlertView], ctx: Context) -> tuple[list[Group], list[AlertView]]:
    """Rules that fired on k of n nodes of a rack, domain or leaf within WINDOW_S (judged in the scope its
    category points to first); and what is left."""
    out: list[Group] = []
    left: list[AlertView] = []
    for rule, got in _by_finding(alerts):
        rest = got
        for scope in SCOPE_ORDER.get(got[0].category, DEFAULT_ORDER):
            rest = _fold_scope(rule, rest, ctx, scope, out)
        left.extend(rest)
    return out, left


def fabric_groups(alerts: list[AlertView], ctx: Context) -> tuple[list[Group], list[AlertView]]:
    """NIC faults under one leaf and NVLink faults in one domain, any rule, chained at FABRIC_WINDOW_S (module
    docstring); and what is left."""
    out: list[Group] = []
    left: list[AlertView] = []
    by_val: dict[tuple[str, str], list[AlertView]] = defaultdict(list)
    for a in alerts:
        scope = FABRIC_SCOPES.get(a.category)
        v = _scope_value(ctx, a.node, scope) if scope is not None else None
        if scope is None or v is None:
            left.append(a)
        else:
            by_val[(scope, v)].append(a)
    for (scope, value), got in sorted(by_val.items()):
        n = _members_of(ctx, scope, value)
        for chain in _chains(got, FABRIC_WINDOW_S):
            k = len(_nodes(chain))
            if k >= 3 or (k >= 2 and 2 * k >= n):
                rules = ", ".join(sorted({a.rule for a in chain}))
                why = (
                    f"{k} of {n} nodes of {scope} {value} with {chain[0].category} faults ({rules}) within "
                    f"{_span(chain)}: {FABRIC_WHAT[scope]}, not the nodes"
                )
                out.append(Group(scope, value, chain, [why], action="none"))
            else:
                left.extend(chain)
    return out, left


def node_groups(alerts: list[AlertView]) -> tuple[list[Group], list[AlertView]]:
    """The same finding on several GPUs of one node within WINDOW_S; and what is left."""
    out: list[Group] = []
    left: list[AlertView] = []
    for rule, got in _by_finding(alerts):
        left.extend(_fold_node(rule, got, out))
    return out, left


def _least(chain: list[AlertView]) -> int:
    """How many nodes (or GPUs of a node) make a spread: 2, or 3 where a hardware fault is among them."""
    return 3 if any(a.hardware for a in chain) else 2


def _fold_scope(
    rule: str, alerts: list[AlertView], ctx: Context, scope: str, out: list[Group]
) -> list[AlertView]:
    by_val: dict[str, list[AlertView]] = defaultdict(list)
    rest: list[AlertView] = []
    for a in alerts:
        v = _scope_value(ctx, a.node, scope)
        (by_val[v] if v is not None else rest).append(a)
    for value, got in sorted(by_val.items()):
        n = _members_of(ctx, scope, value)
        for chain in _chains(got, WINDOW_S):
            k = len(_nodes(chain))
            if k >= _least(chain) and 2 * k >= n:
                why = f"{k} of {n} nodes of {scope} {value} with {rule} within {_span(chain)}"
                out.append(Group(scope, value, chain, [why]))
            else:
                rest.extend(chain)
    return rest


def _fold_node(rule: str, alerts: list[AlertView], out: list[Group]) -> list[AlertView]:
    by_node: dict[str, list[AlertView]] = defaultdict(list)
    for a in alerts:
        by_node[a.node].append(a)
    rest: list[AlertView] = []
    for node, got in sorted(by_node.items()):
        for chain in _chains(got, WINDOW_S):
            gpus = {a.gpu if a.gpu is not None else a.pci_bus_id for a in chain}
            if len(gpus) >= _least(chain):
                why = f"{len(gpus)} GPUs of node {node} with {rule} within {_span(chain)}"
                out.append(Group("node", node, chain, [why]))
            else:
                rest.extend(chain)
    return rest


def driver_groups(alerts: list[AlertView], ctx: Context) -> tuple[list[Group], list[AlertView]]:
    """A rule on >= MIN_DRIVER_NODES nodes of one driver version and on no node of another, where the fleet
    runs more than one version: a regression of that driver, not of the GPUs."""
    versions = set(ctx.drivers.values())
    if len(versions) < 2:
        return [], alerts
    out: list[Group] = []
    left: list[AlertView] = []
    for rule, got in _by_finding(alerts):
        by_ver: dict[str | None, list[AlertView]] = defaultdict(list)
        for a in got:
            by_ver[ctx.drivers.get(a.node)].append(a)
        known = [v for v in by_ver if v is not None]
        if len(known) == 1 and None not in by_ver:
            v = known[0]
            k, n = len(_nodes(by_ver[v])), sum(1 for d in ctx.drivers.values() if d == v)
            if k >= MIN_DRIVER_NODES:
                why = (
                    f"{rule} on {k} of {n} nodes running driver {v} and on none of the "
                    f"{len(ctx.drivers) - n} nodes running another version"
                )
                out.append(Group("driver", v, by_ver[v], [why]))
                continue
        left.extend(got)
    return out, left
