"""Fold the store's alerts into incidents and write them: what every judgement (replay, the agent's flush, a
fleet's evaluation) runs after it writes alerts, so each reads the same incidents from the same alerts."""

from __future__ import annotations

from fleettool.incidents.fold import fold_incidents
from fleettool.incidents.inputs import load
from fleettool.store import Store
from fleettool.store.incidents import replace_incidents


def refresh_incidents(store: Store, now: float | None = None) -> int:
    """Fold every alert of `store` into incidents (silences as of `now`, default the wall clock) and replace the
    stored incidents with them. The incidents written."""
    alerts, ctx = load(store, now)
    return replace_incidents(store, fold_incidents(alerts, ctx))
