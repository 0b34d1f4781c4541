"""A hardware fault stays open until the action it asks for is seen, not for keep_firing_for after its line.

Which lines hold (`hold_of`): a line that says the GPU is gone (an XID the catalog policy calls gpu-lost, XID 79;
the driver's "fallen off the bus"), and an XID whose judged action is a GPU reset, a node reboot or hardware
inspection (a DBE, XID 48; XID 154 "Drain and Reset"; a pending (63) or failed (64) remap; the catalog's
RESET_GPU/RESTART_BM/CHECK_MECHANICALS codes). Informational and workload XIDs keep their plain event life.

What closes a held line is evidence in the store after it (kinds/_closing.py), of the kinds its action accepts
(CLOSED_BY): a boot of the node (a new boot_id), a GPU reset (the recovery action back to NONE, an XID 154 to
"None", or the driver announcing the GPU again without a boot), a new GPU (another UUID at the index), a lifecycle
return with a passing burn-in, and for a lost GPU its own series coming back. A person resolving the alert closes
it too (engine/evaluate.py write_alerts). A reboot does not cure an RMA candidate: inspect-hardware waits for a
new GPU or a proven return. The finding records which evidence closed it (evidence "held"; "open" while open).

A held line is active from the line to its closing, ending there without keep_firing_for; with no closing yet, to
its node's horizon (kinds/_horizon.py: how far the node's own records reach), so it never depends on other
nodes' files. The agent judges over a trailing window: a held line older than the window is read too (`older`)
while it is not closed by the window's start.
"""

from __future__ import annotations

import functools
from typing import Any

from fleettool.engine.kinds._base import Obs
from fleettool.engine.kinds._closing import RETURN_AFTER_S, Evidence, first_closing
from fleettool.model import Category
from fleettool.xid_catalog import catalog, judge

HOLD_ACTIONS = ("reset-gpu", "reboot-node", "inspect-hardware")
# what each hold accepts as its closing, in the order they are looked for
CLOSED_BY: dict[str, tuple[str, ...]] = {
    "lost": ("returned", "boot", "new-gpu", "lifecycle-return"),
    "reset-gpu": ("reset", "boot", "new-gpu", "lifecycle-return"),
    "reboot-node": ("boot", "new-gpu", "lifecycle-return"),
    "inspect-hardware": ("new-gpu", "lifecycle-return"),
}
DETAIL_CODES = (154, *range(144, 151))  # codes whose judgement (and so their hold) is in the line


def hold_of(kind: str, code: int | None, detail: dict[str, Any]) -> str | None:
    """What a line holds for: 'lost', or the action it asks for; None for a plain event life."""
    if kind == "fell-off-bus":
        return "lost"
    if kind != "xid" or code is None:
        return None
    j = judge(int(code), detail)
    if j.category == Category.GPU_LOST:
        return "lost"
    return j.action.value if j.action.value in HOLD_ACTIONS else None


@functools.cache
def hold_codes() -> tuple[int, ...]:
    """The XID codes whose lines may hold: by code alone, or by what the line says (DETAIL_CODES)."""
    return tuple(sorted({c for c in catalog() if hold_of("xid", c, {}) is not None} | set(DETAIL_CODES)))


def older_sql(kinds: list[str], codes: list[int] | None) -> str | None:
    """The WHERE of held lines before the window, newest per GPU and key (None: the rule reads none)."""
    alts = []
    if "fell-off-bus" in kinds:
        alts.append("kind = 'fell-off-bus'")
    xc = [c for c in hold_codes() if not codes or c in codes]
    if "xid" in kinds and xc:
        alts.append(f"(kind = 'xid' AND code IN ({', '.join(map(str, xc))}))")
    if not alts:
        return None
    return f"ts < $start AND ({' OR '.join(alts)})"


def episode(
    ev: Evidence,
    hold: str,
    t: float,
    value: float | None,
    window: tuple[float, float],
    horizon: float,
) -> tuple[Obs, str, float | None] | None:
    """The observations of one held line at t judged over `window`, how it ended ('open' while open) and
    when (None while open); None for a line before the window closed by the window's start."""
    start, end = window
    got = first_closing(ev, CLOSED_BY[hold], t, start, end)
    if got is not None:
        at, how = got
        if t < start and at <= start + (RETURN_AFTER_S if how == "returned" else 0.0):
            return None  # closed before the window (an earlier judgement saw it)
        return [(t, True, value), (at, True, value), (at, False, None)], how, at
    return [(t, True, value), (max(t, horizon), True, value)], "open", None
