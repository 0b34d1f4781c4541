"""The incidents and incident_members tables: incidents above alerts (what fleettool/incidents/ folds), written
whole after each judgement, and the queries every view of them uses.

Order (`INCIDENT_ORDER_SQL`, what `fleettool incidents`, the TUI and /metrics use):
  1. state: firing, pending, stale, resolved;
  2. an incident with a root (a fault) before a storm without one; then paging before not;
  3. severity: critical, warning, info;
  4. newest first (first_seen descending), then id, so ties never reorder.
So an unresolved hardware fault stays above a firing storm of symptoms until its action is done.

`page` is sticky: an incident that paged a person once keeps `page = true` when it is written again (a root that
resolves, or a later judgement that finds it planned, does not un-page what already rang).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fleettool.model import canonical_pci_bus_id
from fleettool.store.alerts import ALERT_STATES, PCI_SQL, SEVERITIES, _rank
from fleettool.store.values import db_time, epoch

if TYPE_CHECKING:
    from fleettool.store.db import Store

SCOPES = ("gpu", "node", "job", "nvlink-domain", "rack", "leaf", "driver", "fleet")
ROLES = ("root", "member")

INCIDENT_ORDER_SQL = (
    f"{_rank('state', ALERT_STATES)}, (root_alert IS NULL), (NOT page), {_rank('severity', SEVERITIES)}, "
    "first_seen DESC, incident_id"
)


@dataclass(frozen=True, slots=True)
class IncidentRecord:
    """One incident as the fold writes it (times in unix seconds). `members` maps each alert id to its role
    ('root' or 'member') and why it is there."""

    incident_id: str
    scope: str
    key: str | None
    state: str
    severity: str
    page: bool
    action: str
    root_alert: str | None
    root_node: str | None
    root_gpu: int | None
    root_code: int | None
    first_seen: float
    last_seen: float
    nodes: int
    gpus: int
    alerts: int
    summary: str
    because: list[str] = field(default_factory=list)
    members: dict[str, tuple[str, str]] = field(default_factory=dict)


def paged_incidents(store: Store) -> set[str]:
    """The ids of incidents stored as having paged (kept paged when written again)."""
    return {r["incident_id"] for r in store.query("SELECT incident_id FROM incidents WHERE page")}


def replace_incidents(store: Store, records: list[IncidentRecord]) -> int:
    """Replace every stored incident with `records` (the fold is of all alerts, so the whole set is the truth),
    keeping `page` true for an id that paged before. The incidents written."""
    paged = paged_incidents(store)
    store.execute("DELETE FROM incident_members")
    store.execute("DELETE FROM incidents")
    if not records:
        return 0
    rows = [
        (
            r.incident_id,
            r.scope,
            r.key,
            r.state,
            r.severity,
            r.page or r.incident_id in paged,
            r.action,
            r.root_alert,
            r.root_node,
            r.root_gpu,
            r.root_code,
            db_time(r.first_seen),
            db_time(r.last_seen),
            r.nodes,
            r.gpus,
            r.alerts,
            r.summary,
            json.dumps(r.because),
        )
        for r in records
    ]
    store.con.executemany(
        "INSERT INTO incidents (incident_id, scope, key, state, severity, page, action, root_alert, root_node, "
        "root_gpu, root_code, first_seen, last_seen, nodes, gpus, alerts, summary, because) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    members = [(r.incident_id, a, role, why) for r in records for a, (role, why) in r.members.items()]
    if members:
        ids, alerts, roles, whys = (list(c) for c in zip(*members, strict=True))
        store.execute(
            "INSERT INTO incident_members SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), "
            "unnest(?::VARCHAR[]), unnest(?::VARCHAR[])",
            [ids, alerts, roles, whys],
        )
    return len(records)


def _row(r: dict[str, Any]) -> dict[str, Any]:
    return {
        **r,
        "first_seen": epoch(r["first_seen"]),
        "last_seen": epoch(r["last_seen"]),
        "because": json.loads(r["because"]) if r.get("because") else [],
    }


def list_incidents(
    store: Store, *, state: str | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    """Incidents in triage order (module docstring), times as unix seconds, `because` as a list."""
    if state is not None and state not in ALERT_STATES:
        raise ValueError(f"{state!r} is not an incident state (one of {', '.join(ALERT_STATES)})")
    sql = (
        "SELECT * FROM incidents" + (" WHERE state = ?" if state else "") + f" ORDER BY {INCIDENT_ORDER_SQL}"
    )
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return [_row(r) for r in store.query(sql, [state] if state else [])]


def incident_by_id(store: Store, incident_id: str) -> dict[str, Any] | None:
    rows = store.query("SELECT * FROM incidents WHERE incident_id = ?", [incident_id])
    return _row(rows[0]) if rows else None


def incident_ids_starting(store: Store, prefix: str, limit: int = 10) -> list[str]:
    rows = store.query(
        "SELECT incident_id FROM incidents WHERE starts_with(lower(incident_id), ?) ORDER BY incident_id LIMIT ?",
        [prefix.lower(), limit],
    )
    return [r["incident_id"] for r in rows]


def incident_members(store: Store, incident_id: str) -> list[dict[str, Any]]:
    """The incident's alerts (alert_id, role, reason, node, gpu, rule, severity, state, first_seen), the root
    first, then by node and GPU."""
    rows = store.query(
        "SELECT m.alert_id, m.role, m.reason, alerts.node, alerts.gpu, alerts.rule, alerts.severity, "
        f"alerts.state, alerts.first_seen, alerts.summary, {PCI_SQL} AS pci_bus_id FROM incident_members m "
        "LEFT JOIN alerts USING (alert_id) WHERE m.incident_id = ? "
        "ORDER BY m.role <> 'root', alerts.node, alerts.gpu NULLS FIRST, alerts.first_seen, m.alert_id",
        [incident_id],
    )
    return [
        {**r, "first_seen": epoch(r["first_seen"]), "pci_bus_id": canonical_pci_bus_id(r["pci_bus_id"])}
        for r in rows
    ]


def incident_of_alerts(store: Store) -> dict[str, tuple[str, str]]:
    """alert_id -> (incident_id, role) for every alert in an incident."""
    return {
        r["alert_id"]: (r["incident_id"], r["role"])
        for r in store.query("SELECT alert_id, incident_id, role FROM incident_members")
    }


def incident_counts(store: Store) -> dict[tuple[str, str, str], int]:
    """(scope, severity, state) -> incidents, for /metrics."""
    rows = store.query("SELECT scope, severity, state, count(*) AS n FROM incidents GROUP BY ALL")
    return {(r["scope"], r["severity"], r["state"]): int(r["n"]) for r in rows}


def alerts_to_fold(store: Store) -> list[dict[str, Any]]:
    """Every alert with what the fold reads: its columns, evidence (JSON text), PCI id, times as unix seconds."""
    rows = store.query(
        "SELECT alert_id, rule, category, severity, action, node, gpu, state, first_seen, last_seen, summary, "
        f"evidence, {PCI_SQL} AS pci_bus_id FROM alerts ORDER BY first_seen, alert_id"
    )
    return [{**r, "first_seen": epoch(r["first_seen"]), "last_seen": epoch(r["last_seen"])} for r in rows]


def silence_windows(store: Store) -> list[dict[str, Any]]:
    """Every silence ever made (matchers, created/until as unix seconds, reason): what was planned when."""
    rows = store.query("SELECT node, gpu, rule, category, created, until, reason FROM silences")
    return [{**r, "created": epoch(r["created"]), "until": epoch(r["until"])} for r in rows]


def lifecycle_history(store: Store) -> dict[str, list[tuple[float, str]]]:
    """node -> [(when, the state it moved to)], oldest first, from the lifecycle's audit trail."""
    out: dict[str, list[tuple[float, str]]] = {}
    for r in store.query("SELECT ts, node, to_state FROM node_audit WHERE ts IS NOT NULL ORDER BY ts"):
        out.setdefault(r["node"], []).append((epoch(r["ts"]) or 0.0, r["to_state"]))
    return out


def node_drivers(store: Store) -> dict[str, str]:
    """node -> the driver version its GPUs last reported."""
    rows = store.query(
        "SELECT node, arg_max(driver, last_seen) AS driver FROM gpus WHERE driver IS NOT NULL "
        "AND driver <> '' GROUP BY node"
    )
    return {r["node"]: r["driver"] for r in rows}
