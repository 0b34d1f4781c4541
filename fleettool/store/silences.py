"""The silences and alert_acks tables, and what they say about alert rows at a given time.

A silence mutes every alert that matches all its set matchers (node, gpu, rule, category; NULL = any) until its
`until`. An acknowledgement (kind 'ack') or a manual resolution (kind 'resolve') applies to one alert by id,
also until a time. Both are judged at a given time: an expired one no longer applies. The rules (a silence
needs a matcher and must end in the future) live in `fleettool.engine.silences`; this module only stores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleettool.store.values import db_time

if TYPE_CHECKING:
    from fleettool.store.db import Store

MATCHERS = ("node", "gpu", "rule", "category")


@dataclass(frozen=True, slots=True)
class Silence:
    """One row of `silences` (times in unix seconds)."""

    silence_id: str
    created: float
    until: float
    who: str
    reason: str
    node: str | None = None
    gpu: int | None = None
    rule: str | None = None
    category: str | None = None


@dataclass(frozen=True, slots=True)
class AlertAck:
    """One row of `alert_acks`: kind 'ack' (someone is on it) or 'resolve' (closed by hand)."""

    alert_id: str
    kind: str
    created: float
    until: float
    who: str
    reason: str


def insert_silence(store: Store, s: Silence) -> None:
    store.execute(
        "INSERT INTO silences (silence_id, node, gpu, rule, category, created, until, who, reason) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            s.silence_id,
            s.node,
            s.gpu,
            s.rule,
            s.category,
            db_time(s.created),
            db_time(s.until),
            s.who,
            s.reason,
        ],
    )


def end_silence(store: Store, silence_id: str, at: float) -> bool:
    """Make a silence end at `at`. False when there is no such silence."""
    if not store.scalar("SELECT count(*) FROM silences WHERE silence_id = ?", [silence_id]):
        return False
    store.execute("UPDATE silences SET until = ? WHERE silence_id = ?", [db_time(at), silence_id])
    return True


def active_silences(store: Store, now: float) -> list[dict[str, Any]]:
    """Every silence in force at `now` (rows of `silences`: started, not yet ended), the soonest to end first."""
    return store.query(
        "SELECT * FROM silences WHERE until > ? AND (created IS NULL OR created <= ?) ORDER BY until",
        [db_time(now), db_time(now)],
    )


def listed_silences(store: Store, now: float, *, past: bool = False) -> list[dict[str, Any]]:
    """Silences in force at `now` and those scheduled to start later (with `past`, ended ones too), by start."""
    where = "" if past else "WHERE until > ? "
    return store.query(
        f"SELECT * FROM silences {where}ORDER BY created NULLS FIRST, until", [] if past else [db_time(now)]
    )


def insert_ack(store: Store, ack: AlertAck) -> None:
    store.execute(
        "INSERT INTO alert_acks (alert_id, kind, created, until, who, reason) VALUES (?, ?, ?, ?, ?, ?)",
        [ack.alert_id, ack.kind, db_time(ack.created), db_time(ack.until), ack.who, ack.reason],
    )


def active_acks(store: Store, now: float) -> dict[str, dict[str, Any]]:
    """alert_id -> its latest acknowledgement or resolution still in force at `now`."""
    out: dict[str, dict[str, Any]] = {}
    for a in store.query(
        "SELECT alert_id, kind, until, who, reason FROM alert_acks WHERE until > ? ORDER BY created",
        [db_time(now)],
    ):
        out[a["alert_id"]] = a
    return out


def annotate(store: Store, alerts: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """Add `silenced`, `silence_id`, `acknowledged`, `ack_by` and `ack_until` to alert rows, as of `now`."""
    sil = active_silences(store, now)
    acks = active_acks(store, now)
    out = []
    for a in alerts:
        s = next((s for s in sil if _matches(s, a)), None)
        k = acks.get(a.get("alert_id", ""))
        out.append(
            {
                **a,
                "silenced": s is not None,
                "silence_id": s["silence_id"] if s else None,
                "acknowledged": k is not None and k["kind"] == "ack",
                "ack_by": k["who"] if k else None,
                "ack_until": k["until"] if k else None,
            }
        )
    return out


def _matches(s: dict[str, Any], a: dict[str, Any]) -> bool:
    return all(s[k] is None or s[k] == a.get(k) for k in MATCHERS)
