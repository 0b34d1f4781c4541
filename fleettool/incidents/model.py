"""What the fold reads (AlertView: one alert with the codes and causes its evidence names; Context: topology,
jobs and drivers) and the JSON every consumer of an incident gets (`incident_json`)."""

from __future__ import annotations

import bisect
import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from fleettool.model import canonical_pci_bus_id

# XIDs a job's teardown or an application fault leaves on every GPU of the job (the catalog's application
# bucket): never a root of their own when a hardware fault explains them, one informational incident when none does
TEARDOWN_XIDS = frozenset({13, 31, 43, 45})
HARDWARE_ACTIONS = frozenset({"reset-gpu", "reboot-node", "inspect-hardware"})
# categories whose faults are a part's own (heat, power, a slow node or a failed burn-in may have a cause
# outside the GPU: a rack's cooling, a leaf switch, a job)
HARDWARE_CATEGORIES = frozenset({"xid", "ecc", "row-remap", "gpu-lost", "pcie", "nvlink"})
PLANNED_STATES = frozenset({"cordoned", "in-repair", "burn-in", "rma"})  # lifecycle states a person set


@dataclass
class AlertView:
    """One alert as the fold sees it. `codes`: XID (or SXid, as -code) -> first time its line was seen in the
    alert; `caused_by`: XIDs the driver's `caused by previous Xid N` suffix names; `planned`: the node was in a
    lifecycle state a person set, or the alert is silenced with a reason."""

    alert_id: str
    rule: str
    category: str
    severity: str
    action: str
    node: str
    gpu: int | None
    pci_bus_id: str | None
    state: str
    first_seen: float
    last_seen: float
    summary: str
    codes: dict[int, float] = field(default_factory=dict)
    sxids: dict[int, float] = field(default_factory=dict)
    sxid_fatal: bool = False
    caused_by: set[int] = field(default_factory=set)
    escalated: bool = False
    silenced: bool = False
    planned: bool = False

    @property
    def xid(self) -> int | None:
        """The alert's first XID (the one it is named after when it has several), or None."""
        return min(self.codes, key=lambda c: (self.codes[c], c)) if self.codes else None

    @property
    def finding(self) -> str:
        """What the alert found, as folds compare it: its rule, and its XID for a rule of many XIDs."""
        return f"{self.rule} (XID {self.xid})" if self.xid is not None else self.rule

    @property
    def teardown_only(self) -> bool:
        """Every XID of the alert is a teardown XID (and it has one)."""
        return bool(self.codes) and set(self.codes) <= TEARDOWN_XIDS

    @property
    def hardware(self) -> bool:
        """A fault of the part itself: a category of HARDWARE_CATEGORIES whose judged action resets, reboots or
        inspects, not only teardown XIDs, and not raised there by repeats alone."""
        return (
            self.category in HARDWARE_CATEGORIES
            and self.action in HARDWARE_ACTIONS
            and not self.teardown_only
            and not self.escalated
        )


@dataclass
class Job:
    job_id: str
    nodes: frozenset[str]
    start: float | None
    end: float | None


@dataclass
class Context:
    """What the fold knows of the fleet: node -> {key: value} topology (rack, nvlink_domain, clique, leaf, ...),
    jobs, node -> driver version, and the fleet's node count where known."""

    topology: dict[str, dict[str, str]] = field(default_factory=dict)
    jobs: list[Job] = field(default_factory=list)
    drivers: dict[str, str] = field(default_factory=dict)
    _by_node: dict[str, tuple[list[float], list[Job], float, list[Job]]] | None = field(
        default=None, repr=False
    )

    def domain(self, node: str) -> str | None:
        t = self.topology.get(node, {})
        return t.get("nvlink_domain") or t.get("clique")

    def jobs_of(self, node: str, t: float, slack: float = 300.0) -> list[Job]:
        """Jobs that ran on `node` at `t` (or ended at most `slack` seconds before: a teardown follows the
        job's end)."""
        if self._by_node is None:
            self._index_jobs()
        assert self._by_node is not None
        idx = self._by_node.get(node)
        if idx is None:
            return []
        starts, jobs, longest, open_ = idx
        lo = bisect.bisect_left(starts, t - longest - slack)
        hi = bisect.bisect_right(starts, t + slack)
        got = [j for j in jobs[lo:hi] if j.end is not None and t <= j.end + slack]
        got += [
            j
            for j in open_
            if (j.start is None or j.start - slack <= t) and (j.end is None or t <= j.end + slack)
        ]
        return got

    def _index_jobs(self) -> None:
        """Per node: the jobs with a start and an end sorted by start (with the longest's duration, so a lookup
        reads only those that can cover a time), and the others (no start or still running)."""
        timed: dict[str, list[Job]] = {}
        open_: dict[str, list[Job]] = {}
        for j in self.jobs:
            for n in j.nodes:
                (timed if j.start is not None and j.end is not None else open_).setdefault(n, []).append(j)
        self._by_node = {}
        for n in set(timed) | set(open_):
            js = sorted(timed.get(n, []), key=lambda j: j.start or 0.0)
            longest = max(((j.end or 0.0) - (j.start or 0.0) for j in js), default=0.0)
            self._by_node[n] = ([j.start or 0.0 for j in js], js, longest, open_.get(n, []))


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    return dt.datetime.fromtimestamp(t, tz=dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def incident_json(row: dict[str, Any], pci: dict[str, str | None] | None = None) -> dict[str, Any]:
    """One stored incident (fleettool.store.incidents.list_incidents row) as the JSON contract gives it; `pci`:
    alert_id -> the root alert's PCI id."""
    root = None
    if row.get("root_alert"):
        root = {
            "node": row["root_node"],
            "gpu": row["root_gpu"],
            "pci_bus_id": canonical_pci_bus_id((pci or {}).get(row["root_alert"])),
            "alert": row["root_alert"],
            "code": row["root_code"],
            "ts": _iso(row["first_seen"]),
        }
    return {
        "id": row["incident_id"],
        "state": row["state"],
        "severity": row["severity"],
        "page": bool(row["page"]),
        "scope": row["scope"],
        "key": row["key"],
        "root": root,
        "nodes": row["nodes"],
        "gpus": row["gpus"],
        "alerts": row["alerts"],
        "action": row["action"],
        "first_seen": _iso(row["first_seen"]),
        "last_seen": _iso(row["last_seen"]),
        "summary": row["summary"],
        "because": row["because"],
        # planned work (a lifecycle state or a silence with a reason covered it): why it did not page
        "planned": any(str(b).startswith("planned:") for b in row["because"] or ()),
    }
