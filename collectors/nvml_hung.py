"""Which GPU's read is in flight, and the GPUs set aside because a call on them never came back.

A driver call cannot be interrupted from Python. When the agent's watchdog finds the NVML collection stuck, it
asks the collector to give up that collection (`NvmlCollector.abandon`): if the thread is inside one GPU's read,
that GPU is marked hung, what the collection had gathered so far is handed back, and the watchdog runs the next
collection on a fresh thread, which reads every other GPU and skips the hung one. The stuck thread is left in
its call; when the call returns, it sees that its collection was given up (a newer generation), notes the GPU's
return and leaves without touching anything else. The next collection then reports the GPU back.

While nothing hangs this costs about half a microsecond a read (no thread hop per read or per GPU: one lock
taken after each read, against NVML's 1.5 us to 5 ms calls); one extra thread exists per GPU stuck at once.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from fleettool.collectors.base import Collected


class Abandoned(Exception):
    """Raised in a collection that the watchdog gave up: it must return without touching shared state."""


@dataclass
class Stuck:
    gpu: int
    read: str  # the collector's read name ('energy')
    call: str  # the call in flight as the source names it ('nvmlDeviceGetTotalEnergyConsumption(gpu 3)')
    since: float  # monotonic time the call began
    ts: float  # the stuck collection's time (its `now`)
    returned: float | None = None  # monotonic time it came back (set by the stuck thread)
    skipped: int = 0  # reads of this GPU not made while it was stuck


class GpuGuard:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gen = 0
        self._cur: tuple[int, str, float] | None = None
        self._out: Collected | None = None
        self._now = 0.0
        self.hung: dict[int, Stuck] = {}

    def begin(self, out: Collected, now: float) -> int:
        """A collection at `now` starts filling `out`; its generation, checked around each read."""
        with self._lock:
            self._out, self._now = out, now
            self._cur = None
            return self._gen

    def end(self, gen: int) -> None:
        with self._lock:
            if gen == self._gen:
                self._out = None
                self._cur = None

    def enter(self, gen: int, gpu: int, read: str) -> None:
        # no lock: between reads _cur is None, so an abandon() racing this sees no read and gives up nothing
        if gen != self._gen:
            raise Abandoned
        self._cur = (gpu, read, time.monotonic())

    def leave(self, gen: int, gpu: int) -> None:
        """After a read (returned or raised). In a collection given up: note the GPU answered, then Abandoned."""
        with self._lock:
            if gen == self._gen:
                self._cur = None
                return
            stuck = self.hung.get(gpu)
            if stuck is not None and stuck.returned is None:
                stuck.returned = time.monotonic()
        raise Abandoned

    def abandon(self, call: str | None) -> tuple[Collected, Stuck] | None:
        """Give up the collection in progress if it is inside a GPU's read: that GPU is hung (named by `call`,
        the source's call in flight), and the collection's partial result is returned. None when it is not in
        a read (stuck elsewhere, or finished): the watchdog treats the whole collector as hung."""
        with self._lock:
            if self._cur is None or self._out is None:
                return None
            gpu, read, since = self._cur
            if call is None or f"(gpu {gpu})" not in call:  # the source's label is another thread's
                call = f"{read}(gpu {gpu})"
            stuck = Stuck(gpu, read, call, since, self._now)
            self.hung[gpu] = stuck
            out = self._out
            self._gen += 1
            self._cur, self._out = None, None
            return out, stuck

    def returned(self, gpu: int) -> Stuck | None:
        """The GPU's stuck call, removed from the hung set, once it has returned; else None."""
        with self._lock:
            stuck = self.hung.get(gpu)
            if stuck is None or stuck.returned is None:
                return None
            del self.hung[gpu]
            return stuck
