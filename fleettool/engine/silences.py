"""Silences and acknowledgements: the rules for making them (a silence needs a matcher and must end in the
future; an acknowledgement needs its alert). Storing and matching them is fleettool.store.silences.

A silence mutes every alert that matches all its set matchers (node, gpu, rule, category; unset = any).
An acknowledgement ("someone is on it") or a manual resolution applies to one alert by id.
"""

from __future__ import annotations

import secrets

from fleettool.store import Store
from fleettool.store.alerts import alert_exists, resolve_alert
from fleettool.store.silences import (
    AlertAck,
    Silence,
    active_silences,
    annotate,
    end_silence,
    insert_ack,
    insert_silence,
)

__all__ = ["acknowledge", "active_silences", "add_silence", "annotate", "expire_silence"]


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
    start: float | None = None,
) -> str:
    """Store a silence from `now` (or `start`: a maintenance window given ahead, or one already past, as a
    recording's) to `until`; returns its id."""
    if not any(v is not None for v in (node, gpu, rule, category)):
        raise ValueError("a silence needs at least one matcher (--node, --gpu, --rule or --category)")
    if start is None and until <= now:
        raise ValueError("a silence must end in the future")
    if start is not None and until <= start:
        raise ValueError("a silence must end after it starts")
    sid = secrets.token_hex(6)
    insert_silence(
        store,
        Silence(
            sid,
            now if start is None else start,
            until,
            who,
            reason,
            node=node,
            gpu=gpu,
            rule=rule,
            category=category,
        ),
    )
    return sid


def expire_silence(store: Store, silence_id: str, now: float) -> bool:
    """End a silence now. False when there is no such silence."""
    return end_silence(store, silence_id, now)


def acknowledge(
    store: Store,
    alert_id: str,
    *,
    now: float,
    until: float,
    who: str,
    reason: str,
    kind: str = "ack",
    closed_by: str = "person",
) -> None:
    """Acknowledge (kind 'ack') or resolve (kind 'resolve': by hand, or `closed_by` a remediation's proof) one
    alert. KeyError: no such alert."""
    if not alert_exists(store, alert_id):
        raise KeyError(alert_id)
    insert_ack(store, AlertAck(alert_id, kind, now, until, who, reason))
    if kind == "resolve":
        resolve_alert(store, alert_id, closed_by)
