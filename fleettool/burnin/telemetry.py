"""Telemetry while a burn-in test runs: NVML read every half second for the GPUs under test, on a thread.
Keeps every sample (stored with the run) and, per GPU, the OR of the clock-event reasons seen, so the verdict
can tell power capping (normal) from thermal or HW slowdown (a finding). Where the source lists processes
(NVML, the fake) it also keeps every process seen on each GPU, and whether this run's own PID was among them,
for the busy check (busy.py)."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

from fleettool.model import Sample
from fleettool.sources.base import GpuProcess, GpuSource, ProcessLister, SourceError

READS = ("clock_events", "temperature", "power", "clocks", "utilization")


@dataclass
class Watch:
    samples: list[Sample] = field(default_factory=list)
    reasons: dict[int, int] = field(default_factory=dict)
    max_temp: dict[int, float] = field(default_factory=dict)
    errors: int = 0
    processes: dict[int, dict[int, GpuProcess]] = field(default_factory=dict)  # GPU -> PID -> process
    self_seen: set[int] = field(default_factory=set)  # GPUs on which NVML listed this run's own PID
    listed: set[int] = field(default_factory=set)  # GPUs whose process list was read at least once


class TelemetryWatcher:
    def __init__(self, source: GpuSource | None, node: str, gpus: list[int], period_s: float = 0.5) -> None:
        self.source = source
        self.node = node
        self.gpus = gpus
        self.period_s = period_s
        self.watch = Watch()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> TelemetryWatcher:
        self.watch = Watch()
        if self.source is not None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="burnin-telemetry", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        assert self.source is not None
        while not self._stop.is_set():
            now = time.time()
            for g in self.gpus:
                for what in READS:
                    try:
                        rows = self.source.read(g, what, now)
                    except SourceError:
                        self.watch.errors += 1
                        continue
                    for metric, sub, value in rows:
                        self.watch.samples.append(Sample(now, self.node, g, None, metric, value, sub))
                        if metric == "clock_event_reasons":
                            self.watch.reasons[g] = self.watch.reasons.get(g, 0) | int(value)
                        elif metric == "gpu_temp_c":
                            self.watch.max_temp[g] = max(self.watch.max_temp.get(g, value), value)
                self._processes(g, now)
            self._stop.wait(self.period_s)

    def _processes(self, g: int, now: float) -> None:
        if not isinstance(self.source, ProcessLister):
            return
        try:
            procs = self.source.running_processes(g, now)
        except SourceError:
            self.watch.errors += 1
            return
        self.watch.listed.add(g)
        seen = self.watch.processes.setdefault(g, {})
        for p in procs:
            seen.setdefault(p.pid, p)
            if p.pid == os.getpid():
                self.watch.self_seen.add(g)


def open_nvml() -> tuple[GpuSource | None, str]:
    """NVML opened, or None and why not (no driver, no library: telemetry and the busy check are then absent,
    and the report says so)."""
    try:
        from fleettool.sources.nvml import NvmlSource

        src = NvmlSource()
        src.open()
        return src, ""
    except Exception as e:
        return None, f"NVML did not open ({e})"
