"""A line that says a GPU is gone (an XID the catalog policy calls gpu-lost, XID 79; the driver's "fallen off
the bus") holds while its GPU stays gone, not for keep_firing_for after the line.

The design: a hardware fault stays open until its action is seen. For a lost GPU the store shows that action:
its own series come back (a reset, a reboot or a new GPU at its index all do that), or the node boots. So a held
line's finding is active from the line for as long as the node goes on reporting (any sample of the node, GPU or
node level) while this GPU reports nothing, and ends, without keep_firing_for, at the GPU's first sample
RETURN_AFTER_S or more after the line, or at the node's next boot. A node that reports nothing after the line (a
kernel log alone, or telemetry that stopped) proves nothing either way: the line keeps its plain event life
(keep_firing_for after it).

The agent judges over a trailing window: a held line older than the window is read too (`older`), while the
GPU is still missing from the window's samples; it drops out once the GPU reports from the window's start.
"""

from __future__ import annotations

import functools
from typing import Any

from fleettool.engine.kinds._base import Obs
from fleettool.engine.kinds._sql import epoch, read, ts_param
from fleettool.model import Category
from fleettool.store import Store
from fleettool.xid_catalog import catalog, judge

RETURN_AFTER_S = 60.0  # a sample this long after the line proves the GPU back (not one read in flight)


@functools.cache
def lost_codes() -> tuple[int, ...]:
    """The XID codes the catalog policy judges gpu-lost (by code alone)."""
    return tuple(c for c in sorted(catalog()) if judge(c).category == Category.GPU_LOST)


def holds_line(kind: str, code: int | None, detail: dict[str, Any]) -> bool:
    if kind == "fell-off-bus":
        return True
    return kind == "xid" and code is not None and judge(int(code), detail).category == Category.GPU_LOST


def older_sql(kinds: list[str], codes: list[int] | None) -> str | None:
    """The WHERE of held lines before the window, newest per GPU and key (None: the rule reads none)."""
    alts = []
    if "fell-off-bus" in kinds:
        alts.append("kind = 'fell-off-bus'")
    xc = [c for c in lost_codes() if not codes or c in codes]
    if "xid" in kinds and xc:
        alts.append(f"(kind = 'xid' AND code IN ({', '.join(map(str, xc))}))")
    if not alts:
        return None
    return f"ts < $start AND gpu IS NOT NULL AND ({' OR '.join(alts)})"


def episode(
    store: Store,
    node: str,
    gpu: int | None,
    t: float,
    value: float | None,
    window: tuple[float, float],
    boots: list[float],
) -> tuple[Obs, str] | None:
    """The observations of one held line at t, judged over [start, end], and how it ended ('returned',
    'boot', 'still-lost', or 'no-evidence' for a plain event life); None for a line before the window whose
    GPU was back by the window's start (or a boot came between)."""
    start, end = window
    boot = next((b for b in sorted(boots) if b > t), None)
    if t < start and boot is not None and boot <= start:
        return None
    if gpu is None:  # no index: its series cannot be told apart
        return ([(t, True, value), (t + 1.0, False, None)], "no-evidence") if t >= start else None
    lo = max(t, start)
    row = read(
        store,
        """SELECT max(ts) AS node_last,
                  min(ts) FILTER (WHERE gpu = $gpu AND ts >= $back) AS gpu_back
           FROM samples WHERE node = $node AND ts > $lo AND ts <= $end""",
        {
            "node": node,
            "gpu": gpu,
            "lo": ts_param(lo),
            "end": ts_param(end),
            "back": ts_param(max(t + RETURN_AFTER_S, start)),
        },
    )[0]
    back = epoch(row["gpu_back"]) if row["gpu_back"] is not None else None
    if t < start and back is not None and back <= start + RETURN_AFTER_S:
        return None  # reporting from the window's start: it came back before (an earlier judgement saw it)
    how = "returned"
    if boot is not None and (back is None or boot < back):
        back, how = boot, "boot"
    if back is not None and back <= end:
        return [(t, True, value), (back, True, value), (back, False, None)], how  # gone until back
    if row["node_last"] is None:  # the node said nothing since: no proof either way
        return ([(t, True, value), (t + 1.0, False, None)], "no-evidence") if t >= start else None
    return [(t, True, value), (max(t, epoch(row["node_last"])), True, value)], "still-lost"
