"""The remediation tables: `remediations` (one row per episode on a node or one GPU of it, from the page to a
proven return, an RMA or a stop) and `remediation_log` (its audit trail: each rung tried, step run, guard decision
and proof part, with figures). What the rungs are and when one is proven is fleettool.remediate's."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleettool.store.values import db_time

if TYPE_CHECKING:
    from fleettool.store.db import Store

# an episode is open (counts against the blast guard, shows on /metrics) while in one of these
OPEN_STATES = ("running", "proving")
# and ends in one of these: proven (the proof passed, returned to service), failed (the last rung failed: the
# node stays out), stopped (an operator stopped it; the node stays out)
END_STATES = ("proven", "failed", "stopped")
LOG_KINDS = ("plan", "guard", "rung", "step", "proof", "return", "note")


@dataclass(frozen=True, slots=True)
class Remediation:
    """A new episode (times: unix seconds). `paged_at`: when the page that started it went out (the incident's or
    alert's first_seen): time to service counts from it."""

    node: str
    gpu: int | None
    rung: str
    via: str
    who: str
    reason: str
    started: float
    paged_at: float | None = None
    uuid: str | None = None
    incident_id: str | None = None
    alert_id: str | None = None
    rule: str | None = None


def new_remediation_id(node: str, started: float) -> str:
    """`rem-gpu-17-20261206T041500-3fa2`: the node, the start (UTC) and a random tail."""
    return f"rem-{node}-{db_time(started):%Y%m%dT%H%M%S}-{secrets.token_hex(2)}"


def new_remediation(store: Store, r: Remediation, remediation_id: str | None = None) -> str:
    """Insert a running episode; returns its id."""
    rid = remediation_id or new_remediation_id(r.node, r.started)
    store.execute(
        "INSERT INTO remediations (remediation_id, node, gpu, uuid, incident_id, alert_id, rule, paged_at, "
        "started, ended, rung, state, via, who, reason, outcome) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, 'running', ?, ?, ?, NULL)",
        [
            rid,
            r.node,
            r.gpu,
            r.uuid,
            r.incident_id,
            r.alert_id,
            r.rule,
            db_time(r.paged_at) if r.paged_at is not None else None,
            db_time(r.started),
            r.rung,
            r.via,
            r.who,
            r.reason,
        ],
    )
    return rid


def update_remediation(
    store: Store,
    remediation_id: str,
    *,
    rung: str | None = None,
    state: str | None = None,
    ended: float | None = None,
    outcome: str | None = None,
) -> None:
    """Move an episode on: its rung, its state (an end state needs `ended`), its outcome sentence."""
    if state is not None and state not in OPEN_STATES + END_STATES:
        raise ValueError(f"unknown remediation state {state!r}")
    if state in END_STATES and ended is None:
        raise ValueError(f"state {state} ends the episode: pass ended")
    sets: list[str] = []
    args: list[Any] = []
    for col, val in (("rung", rung), ("state", state), ("outcome", outcome)):
        if val is not None:
            sets.append(f"{col} = ?")
            args.append(val)
    if ended is not None:
        sets.append("ended = ?")
        args.append(db_time(ended))
    if sets:
        store.execute(
            f"UPDATE remediations SET {', '.join(sets)} WHERE remediation_id = ?", [*args, remediation_id]
        )


def log_remediation(
    store: Store,
    remediation_id: str,
    ts: float,
    kind: str,
    name: str,
    *,
    rung: str | None = None,
    ok: bool | None = None,
    detail: str = "",
    figures: dict[str, Any] | None = None,
) -> None:
    """Append one line to the audit trail. ok: True passed / ran, False failed, None not judged (a plan line, a
    proof part that did not apply: `detail` says why)."""
    if kind not in LOG_KINDS:
        raise ValueError(f"unknown remediation log kind {kind!r} (one of {', '.join(LOG_KINDS)})")
    store.execute(
        "INSERT INTO remediation_log (remediation_id, ts, rung, kind, name, ok, detail, figures) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            remediation_id,
            db_time(ts),
            rung,
            kind,
            name,
            ok,
            detail,
            json.dumps(figures, sort_keys=True, default=str) if figures is not None else None,
        ],
    )


_COLS = (
    "remediation_id, node, gpu, uuid, incident_id, alert_id, rule, paged_at, started, ended, rung, state, via, "
    "who, reason, outcome"
)


def get_remediation(store: Store, remediation_id: str) -> dict[str, Any] | None:
    rows = store.query(f"SELECT {_COLS} FROM remediations WHERE remediation_id = ?", [remediation_id])
    return rows[0] if rows else None


def open_remediations(store: Store, node: str | None = None) -> list[dict[str, Any]]:
    """Episodes still running or proving (all nodes, or one), oldest first."""
    where = f"state IN ({', '.join(repr(s) for s in OPEN_STATES)})"
    if node is not None:
        return store.query(
            f"SELECT {_COLS} FROM remediations WHERE {where} AND node = ? ORDER BY started", [node]
        )
    return store.query(f"SELECT {_COLS} FROM remediations WHERE {where} ORDER BY started")


def list_remediations(store: Store, node: str | None = None) -> list[dict[str, Any]]:
    """Every episode (all nodes, or one), oldest first."""
    if node is not None:
        return store.query(f"SELECT {_COLS} FROM remediations WHERE node = ? ORDER BY started", [node])
    return store.query(f"SELECT {_COLS} FROM remediations ORDER BY started")


def remediation_log(store: Store, remediation_id: str) -> list[dict[str, Any]]:
    """An episode's audit trail, oldest first (figures decoded)."""
    rows = store.query(
        "SELECT ts, rung, kind, name, ok, detail, figures FROM remediation_log WHERE remediation_id = ? "
        "ORDER BY ts, rowid",
        [remediation_id],
    )
    for r in rows:
        r["figures"] = json.loads(r["figures"]) if r["figures"] else None
    return rows
