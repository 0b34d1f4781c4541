"""The alerts table: writing an incident as an alert, and the one query that lists alerts, in a named order.

Order (`AlertOrder.TRIAGE`, what every list of alerts uses: `fleettool alerts`, the TUI, replay):
  1. state: firing, then pending, then stale (its series stopped), then resolved (anything else last);
  2. severity: critical, warning, info;
  3. newest first (last_seen descending);
  4. node, then GPU (the node-level alert, GPU NULL, before GPU 0), then alert_id, so ties never reorder.
So a firing warning lists above a resolved critical. Silenced and acknowledged alerts keep their place (a row
does not jump away from the cursor that just acknowledged it); `include_silenced=False` leaves silenced ones out.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fleettool.model import canonical_pci_bus_id
from fleettool.store.silences import annotate
from fleettool.store.values import db_time, dumps_evidence, epoch

if TYPE_CHECKING:
    from fleettool.store.db import Store

ALERT_STATES = ("firing", "pending", "stale", "resolved")  # what alerts.state holds, in triage order
SEVERITIES = ("critical", "warning", "info")  # worst first

# the columns list_alerts returns (evidence, uuid: alert_by_id), before the silence/ack annotations
LIST_COLUMNS = (
    "alert_id",
    "rule",
    "category",
    "severity",
    "node",
    "gpu",
    "action",
    "state",
    "first_seen",
    "last_seen",
    "summary",
    "runbook",
)


# an alert's GPU by its PCI id: the inventory's for its node and index, else the one its incident key names (an
# event alert of a GPU known only by its PCI id, a plain dmesg's XID: "...@0000:48:00"); nvidia-smi's form
# after canonical_pci_bus_id
PCI_SQL = (
    "coalesce((SELECT any_value(g.pci_bus_id) FROM gpus g WHERE g.node = alerts.node AND g.gpu = alerts.gpu), "
    "nullif(regexp_extract(json_extract_string(evidence, '$.incident'), "
    "'@((PCI:)?[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(\\.[0-7])?)$', 1), ''))"
)


# an alert's GPU by its UUID: the one the engine stored with the alert, else the inventory's for its node and index
# (the same GPU as `gpus`, `events` and /metrics name)
UUID_SQL = (
    "coalesce(alerts.uuid, (SELECT any_value(g.uuid) FROM gpus g WHERE g.node = alerts.node "
    "AND g.gpu = alerts.gpu))"
)


class AlertOrder(str, enum.Enum):
    """How list_alerts orders its rows (see the module docstring)."""

    TRIAGE = "triage"


def _rank(column: str, values: tuple[str, ...]) -> str:
    whens = " ".join(f"WHEN '{v}' THEN {i}" for i, v in enumerate(values))
    return f"CASE {column} {whens} ELSE {len(values)} END"


ORDER_SQL = {
    AlertOrder.TRIAGE: (
        f"{_rank('state', ALERT_STATES)}, {_rank('severity', SEVERITIES)}, last_seen DESC, node, "
        "gpu NULLS FIRST, alert_id"
    ),
}


@dataclass(frozen=True, slots=True)
class AlertRecord:
    """One alert as the engine writes it (times in unix seconds). `incident` is the key that folds findings of
    one GPU into one alert; it is stored as the first field of the evidence JSON."""

    alert_id: str
    rule: str
    category: str
    severity: str
    node: str
    gpu: int | None
    uuid: str | None
    action: str
    state: str
    first_seen: float
    last_seen: float
    summary: str
    runbook: str
    incident: str
    evidence: dict[str, Any] = field(default_factory=dict)


def list_alerts(
    store: Store,
    *,
    now: float | None = None,
    state: str | None = None,
    node: str | None = None,
    gpu: int | None = None,
    include_silenced: bool = True,
    order: AlertOrder = AlertOrder.TRIAGE,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Alerts (LIST_COLUMNS, TIMESTAMPs as naive UTC datetimes), annotated with silences and acknowledgements
    as of `now` (default: the wall clock; see fleettool.store.silences.annotate), filtered by state/node/GPU, in `order`."""
    if state is not None and state not in ALERT_STATES:
        raise ValueError(f"{state!r} is not an alert state (one of {', '.join(ALERT_STATES)})")
    where, params = [], []
    for col, val in (("state", state), ("node", node), ("gpu", gpu)):
        if val is not None:
            where.append(f"{col} = ?")
            params.append(val)
    sql = (
        f"SELECT {', '.join(LIST_COLUMNS)}, {PCI_SQL} AS pci_bus_id, {UUID_SQL} AS uuid, "
        "json_extract_string(evidence, '$.closed_by') AS closed_by FROM alerts"
    )
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += f" ORDER BY {ORDER_SQL[order]}"
    found = store.query(sql, params)
    for r in found:
        r["pci_bus_id"] = canonical_pci_bus_id(r["pci_bus_id"])
    rows = annotate(store, found, time.time() if now is None else now)
    if not include_silenced:
        rows = [r for r in rows if not r["silenced"]]
    return rows if limit is None else rows[:limit]


def alert_by_id(store: Store, alert_id: str) -> dict[str, Any] | None:
    """Every column of one alert (evidence as JSON text), or None."""
    rows = store.query("SELECT * FROM alerts WHERE alert_id = ?", [alert_id])
    return rows[0] if rows else None


def alert_ids_starting(store: Store, prefix: str, limit: int = 10) -> list[str]:
    """The ids of alerts that start with `prefix` (case-insensitive, as the ids are lower-case hex), sorted:
    one for a unique prefix, several for an ambiguous one (at most `limit`), none for no match."""
    rows = store.query(
        "SELECT alert_id FROM alerts WHERE starts_with(lower(alert_id), ?) ORDER BY alert_id LIMIT ?",
        [prefix.lower(), limit],
    )
    return [r["alert_id"] for r in rows]


def alert_exists(store: Store, alert_id: str) -> bool:
    return bool(store.scalar("SELECT count(*) FROM alerts WHERE alert_id = ?", [alert_id]))


def open_alert_of_incident(
    store: Store, node: str, gpu: int | None, incident: str, since: float
) -> tuple[str, float] | None:
    """(alert_id, first_seen) of the earliest alert of this node, GPU and incident key last seen at or after
    `since` (the one a new, overlapping incident continues), or None."""
    rows = store.query(
        "SELECT alert_id, first_seen FROM alerts WHERE node = ? AND gpu IS NOT DISTINCT FROM ? "
        "AND json_extract_string(evidence, '$.incident') = ? AND last_seen >= ? ORDER BY first_seen LIMIT 1",
        [node, gpu, incident, db_time(since)],
    )
    if not rows:
        return None
    return rows[0]["alert_id"], epoch(rows[0]["first_seen"]) or 0.0


def put_alert(store: Store, a: AlertRecord) -> None:
    """Write one alert, replacing any row with its id."""
    store.execute("DELETE FROM alerts WHERE alert_id = ?", [a.alert_id])
    store.execute(
        "INSERT INTO alerts (alert_id, rule, category, severity, node, gpu, uuid, action, state, first_seen, "
        "last_seen, summary, runbook, evidence) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            a.alert_id,
            a.rule,
            a.category,
            a.severity,
            a.node,
            a.gpu,
            a.uuid,
            a.action,
            a.state,
            db_time(a.first_seen),
            db_time(a.last_seen),
            a.summary,
            a.runbook,
            dumps_evidence({"incident": a.incident, **a.evidence}),
        ],
    )


def resolve_alert(store: Store, alert_id: str, closed_by: str = "person") -> None:
    """Close an alert by hand: state resolved, closed by a person, or by a remediation's proof (`proof rem-...`)
    (evidence `closed_by`). Its last_seen stays the last time its condition held (when it was closed is the
    resolution's row in alert_acks): resolving last week's incident today must not make it, and the node's
    downtime in `report`, last until today."""
    store.execute(
        "UPDATE alerts SET state = 'resolved', evidence = json_merge_patch(coalesce(evidence, '{}'), "
        "json_object('closed_by', ?)) WHERE alert_id = ?",
        [closed_by, alert_id],
    )


def clear_alerts(store: Store) -> None:
    """Drop every alert (before evaluating a store's rules afresh)."""
    store.execute("DELETE FROM alerts")


def alert_gpus(store: Store) -> list[tuple[str, int]]:
    """(node, gpu) of every GPU some alert names."""
    rows = store.query("SELECT DISTINCT node, gpu FROM alerts WHERE gpu IS NOT NULL ORDER BY node, gpu")
    return [(r["node"], r["gpu"]) for r in rows]
