"""When each NVML read tier is due: every tier on its own deadlines, so a late tick never skips a read.

A tier is due once its next deadline has passed (or is at most `early_s` away: a tick a hair early on the wall
clock still takes its read). A read moves the deadline on by the tier's period from the previous deadline, not
from the tick's time, so ticks that start late (a busy CPU, a slow flush, the loop's own jitter) take every
period's read. Only a deadline that passed with no collection at all before the next one fell due is a
skipped period, counted per tier (`skipped`, reported as agent_nvml_periods_skipped_total).

The times are the collection's `now` (the wall clock in the agent, a test's clock in tests). A clock stepped
back makes every tier due once and starts the deadlines over; one that jumps forward by more than
`step_s` since the last collection (a clock set, a machine suspended) starts them over too, without counting
the periods in between as skipped: the agent was not late, its clock moved (a loop that really stops is
/healthz's to report).
"""

from __future__ import annotations

from fleettool.sources.base import Tier

EARLY_FRACTION = 0.1  # of the tick: how early on the wall clock a collection may take a deadline's read
CLOCK_STEP_S = 300.0  # a gap between collections past max(this, 10 ticks) is a clock step, not lateness


class TierSchedule:
    def __init__(self, every_s: dict[Tier, float], tick_s: float) -> None:
        self.every_s = dict(every_s)
        self.early_s = EARLY_FRACTION * tick_s
        self.step_s = max(CLOCK_STEP_S, 10.0 * tick_s)
        self.next: dict[Tier, float] = {}
        self.skipped: dict[Tier, int] = {t: 0 for t in self.every_s}
        self._forced: set[Tier] = set()
        self._last: float | None = None

    def restart(self) -> None:
        """Every tier due at the next collection, deadlines from there (a reopened source)."""
        self.next = {}

    def force(self, tier: Tier) -> None:
        """Due at the next collection as well, its deadlines unchanged (a DBE: read the ECC counters now)."""
        self._forced.add(tier)

    def due(self, now: float) -> list[Tier]:
        last, self._last = self._last, now
        if last is not None and (now < last or now - last > self.step_s):
            self.next = {}  # the clock was stepped (back, or far forward): start the deadlines over
        out = []
        for tier, every in self.every_s.items():
            nxt = self.next.get(tier)
            if nxt is None:
                self.next[tier] = now + every
                out.append(tier)
                continue
            if now < nxt - self.early_s:
                if tier in self._forced:
                    out.append(tier)
                continue
            nxt += every
            if now >= nxt:  # the next deadline has passed too: the one before it got no read at all
                missed = int((now - nxt) // every) + 1
                self.skipped[tier] += missed
                nxt += missed * every
            self.next[tier] = nxt
            out.append(tier)
        self._forced.clear()
        return out
