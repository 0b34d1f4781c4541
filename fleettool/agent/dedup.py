"""One XID, two witnesses: NVML's event API and the kernel log report the same XID within milliseconds of each
other. The agent keeps the first report of an XID code on a GPU (by PCI id, else index) and drops a report of
the same code on the same GPU from the other source within `window_s`; repeats from one source are real repeats
(an XID storm) and are all kept. Drops are counted (agent_events_deduplicated_total)."""

from __future__ import annotations

from fleettool.model import Event, EventKind

WINDOW_S = 10.0


class XidDedup:
    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._seen: dict[tuple[int | None, str], tuple[float, str]] = {}  # (code, gpu) -> (time, source)
        self.dropped = 0

    def keep(self, e: Event, now: float) -> bool:
        if e.kind != EventKind.XID.value or (e.pci_bus_id is None and e.gpu is None):
            return True
        gpu = e.pci_bus_id.lower() if e.pci_bus_id else f"index={e.gpu}"
        key, family, t = (e.code, gpu), (e.source or "").split(":")[0], e.ts if e.ts is not None else now
        prev = self._seen.get(key)
        if prev is not None and prev[1] != family and abs(t - prev[0]) <= self.window_s:
            self.dropped += 1
            return False
        self._seen[key] = (t, family)
        if len(self._seen) > 4096:  # bounded: forget the reports older than the window
            self._seen = {k: v for k, v in self._seen.items() if abs(t - v[0]) <= self.window_s}
        return True
