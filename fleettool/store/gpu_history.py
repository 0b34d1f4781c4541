"""Which GPU sat at a node's index at a given time: the UUID of (node, gpu) at time t.

A GPU swapped at the same index keeps its index and changes its UUID, so an alert judged about the old GPU must
carry the old UUID. The samples say it best (each row carries the UUID it was read with): the newest UUID read
at that index at most SAMPLE_LOOKBACK_S before t. Past raw retention, the inventory: the GPU first seen at or
before t most recently, else the first one seen after it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleettool.store.values import db_time

if TYPE_CHECKING:
    from fleettool.store.db import Store

SAMPLE_LOOKBACK_S = 600.0  # the slowest NVML tier reads every 10 minutes


def gpu_uuid_at(store: Store, node: str, gpu: int, t: float) -> str | None:
    """The UUID of this node's GPU `gpu` at unix time `t`, or None when nothing names it."""
    v = store.scalar(
        "SELECT uuid FROM samples WHERE node = ? AND gpu = ? AND uuid IS NOT NULL AND ts BETWEEN ? AND ? "
        "ORDER BY ts DESC LIMIT 1",
        [node, gpu, db_time(t - SAMPLE_LOOKBACK_S), db_time(t)],
    )
    if v is None:
        at = db_time(t)
        v = store.scalar(
            "SELECT uuid FROM gpus WHERE node = ? AND gpu = ? AND uuid IS NOT NULL "
            "ORDER BY (first_seen <= ?) DESC, CASE WHEN first_seen <= ? THEN first_seen END DESC, first_seen "
            "LIMIT 1",
            [node, gpu, at, at],
        )
    return None if v is None else str(v)
