"""One XID, two witnesses: NVML's event API and the kernel log report the same XID within milliseconds of each
other. The agent keeps the first report of an XID code on a GPU (by PCI id, else index) and drops a report of
the same code on the same GPU from the other source within `window_s`; repeats from one source are real repeats
(an XID storm) and are all kept. Drops are counted (agent_events_deduplicated_total).

Reports are compared on the clock /dev/kmsg stamps with, seconds since boot (CLOCK_MONOTONIC: see
sources/kmsg_boot.py), never on wall time, so a step of the wall clock between the two reports (the first NTP
sync after boot) cannot make one XID two: a kernel line's time is its own stamp (detail.uptime), any other
report's is the moment it was stamped (by the wall clock, read on the monotonic one as it reaches the agent).
After a restart, the kernel log's backlog is matched against the XIDs the store has from NVML by the collector
(store/kmsg_cursor.py, collectors/kmsg.py)."""

from __future__ import annotations

from collections.abc import Callable

from fleettool.model import Event, EventKind
from fleettool.sources.kmsg_boot import DEDUP_WINDOW_S, monotonic_now, xid_gpu_key

WINDOW_S = DEDUP_WINDOW_S


class XidDedup:
    def __init__(self, window_s: float = WINDOW_S, *, monotonic: Callable[[], float] = monotonic_now) -> None:
        self.window_s = window_s
        self.monotonic = monotonic
        self._seen: dict[tuple[int | None, str], tuple[float, str]] = {}  # (code, gpu) -> (uptime, source)
        self.dropped = 0

    def keep(self, e: Event, now: float) -> bool:
        """`now`: the agent's wall clock, only to age a report with no kernel stamp; the comparison is on
        time since boot."""
        gpu = xid_gpu_key(e.pci_bus_id, e.gpu)
        if e.kind != EventKind.XID.value or gpu is None:
            return True
        family = (e.source or "").split(":")[0]
        up = e.detail.get("uptime")
        if family != "kmsg" or not isinstance(up, (int, float)):
            # no kernel stamp: the time since boot now, less the report's age by the wall clock (milliseconds:
            # the report was stamped by this clock just before it got here)
            up = self.monotonic() - (0.0 if e.ts is None else now - e.ts)
        t = float(up)
        key = (e.code, gpu)
        prev = self._seen.get(key)
        if prev is not None and prev[1] != family and abs(t - prev[0]) <= self.window_s:
            self.dropped += 1
            return False
        self._seen[key] = (t, family)
        if len(self._seen) > 4096:  # bounded: forget the reports older than the window
            self._seen = {k: v for k, v in self._seen.items() if abs(t - v[0]) <= self.window_s}
        return True
