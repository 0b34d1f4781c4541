"""Silences and acknowledgements, stored, with expiry. Both are judged at a given time (the wall clock for
the CLI and TUI): an expired silence or acknowledgement no longer applies.

A silence mutes every alert that matches all its set matchers (node, gpu, rule, category; unset = any).
An acknowledgement ("someone is on it") or a manual resolution applies to one alert by id.
"""

from __future__ import annotations

import datetime as dt
import secrets
from typing import Any

from fleettool.store import Store


def _dt(t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(t, tz=dt.timezone.utc).replace(tzinfo=None)


def add_silence(
    store: Store,
    *,
    now: float,
    until: float,
    who: str,
    reason: str,
    node: str | None = None,
    gpu: int | None = None,
    rule: str | None = None,
    category: str | None = None,
) -> str:
    if not any(v is not None for v in (node, gpu, rule, category)):
        raise ValueError("a silence needs at least one matcher (--node, --gpu, --rule or --category)")
    if until <= now:
        raise ValueError("a silence must end in the future")
    sid = secrets.token_hex(6)
    store.con.execute(
        "INSERT INTO silences VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [sid, node, gpu, rule, category, _dt(now), _dt(until), who, reason],
    )
    return sid


def expire_silence(store: Store, silence_id: str, now: float) -> bool:
    hit = store.scalar("SELECT count(*) FROM silences WHERE silence_id = ?", [silence_id])
    if hit:
        store.con.execute("UPDATE silences SET until = ? WHERE silence_id = ?", [_dt(now), silence_id])
    return bool(hit)


def active_silences(store: Store, now: float) -> list[dict[str, Any]]:
    return store.query("SELECT * FROM silences WHERE until > ? ORDER BY until", [_dt(now)])


def acknowledge(
    store: Store, alert_id: str, *, now: float, until: float, who: str, reason: str, kind: str = "ack"
) -> None:
    if not store.scalar("SELECT count(*) FROM alerts WHERE alert_id = ?", [alert_id]):
        raise KeyError(alert_id)
    store.con.execute(
        "INSERT INTO alert_acks VALUES (?, ?, ?, ?, ?, ?)",
        [alert_id, kind, _dt(now), _dt(until), who, reason],
    )
    if kind == "resolve":
        store.con.execute(
            "UPDATE alerts SET state = 'resolved', last_seen = greatest(last_seen, ?) WHERE alert_id = ?",
            [_dt(now), alert_id],
        )


def annotate(store: Store, alerts: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """Add `silenced`, `acknowledged` (and who/until) to alert rows, as of `now`."""
    sil = active_silences(store, now)
    acks: dict[str, dict[str, Any]] = {}
    for a in store.query(
        "SELECT alert_id, kind, until, who, reason FROM alert_acks WHERE until > ? ORDER BY created",
        [_dt(now)],
    ):
        acks[a["alert_id"]] = a
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
    return all(s[k] is None or s[k] == a.get(k) for k in ("node", "gpu", "rule", "category"))
