"""Run a collector on its own thread and never wait longer than the watchdog limit for it.

A driver call that hangs (NVML stuck in the kernel) cannot be interrupted from Python. The runner notices that
the collection has not come back within `limit_s`, reports the collector hung (naming the call in flight), and
stops asking it until the stuck call returns; the agent loop and the other collectors carry on.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass

from fleettool.collectors.base import Collected, Collector


@dataclass
class RunResult:
    collected: Collected | None
    status: str  # ok | error | hung | still-hung | recovered | down
    duration_s: float
    detail: str = ""
    started: bool | None = None  # for start(): whether the collector came up


class _Job:
    def __init__(self, now: float, start: bool = False) -> None:
        self.now = now
        self.start = start  # collector.start() rather than collect(): opening a source may block too
        self.done = threading.Event()
        self.result: Collected | None = None
        self.started: bool | None = None
        self.error: BaseException | None = None


class CollectorRunner:
    """One daemon worker thread per collector (a thread stuck in the driver must not keep the process alive)."""

    def __init__(self, collector: Collector, limit_s: float = 5.0) -> None:
        self.collector = collector
        self.limit_s = limit_s
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name=f"collector-{collector.id}", daemon=True)
        self._thread.start()
        self._stuck: _Job | None = None
        self._stuck_since = 0.0
        self.hung_call: str | None = None

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                if job.start:
                    job.started = self.collector.start()
                else:
                    job.result = self.collector.collect(job.now)
            except BaseException as e:  # reported by run(); a collector bug must not kill the agent
                job.error = e
            job.done.set()

    def run(self, now: float) -> RunResult:
        if self._stuck is not None:
            if not self._stuck.done.is_set():
                return RunResult(
                    None, "still-hung", time.monotonic() - self._stuck_since, self.hung_call or ""
                )
            late, self._stuck = self._stuck, None
            self.hung_call = None
            return RunResult(late.result, "recovered", time.monotonic() - self._stuck_since)
        t0 = time.monotonic()
        job = _Job(now)
        self._jobs.put(job)
        if not job.done.wait(self.limit_s):
            self._stuck = job
            self._stuck_since = t0
            self.hung_call = self.collector.inflight() or "unknown call"
            return RunResult(None, "hung", time.monotonic() - t0, self.hung_call)
        if job.error is not None:
            return RunResult(None, "error", time.monotonic() - t0, f"{type(job.error).__name__}: {job.error}")
        return RunResult(job.result, "ok", time.monotonic() - t0)

    def start(self) -> RunResult:
        """collector.start() on the worker, waited for at most `limit_s` (a blocking open, a driver that
        hangs in init): status ok (collected=None; `started` says whether it came up), error, or hung; a
        hung start is reported by run() as still-hung until it returns, like a hung collection."""
        t0 = time.monotonic()
        job = _Job(0.0, start=True)
        self._jobs.put(job)
        if not job.done.wait(self.limit_s):
            self._stuck = job
            self._stuck_since = t0
            self.hung_call = self.collector.inflight() or "start"
            return RunResult(None, "hung", time.monotonic() - t0, self.hung_call)
        if job.error is not None:
            return RunResult(None, "error", time.monotonic() - t0, f"{type(job.error).__name__}: {job.error}")
        return RunResult(None, "ok", time.monotonic() - t0, started=bool(job.started))

    def close(self) -> None:
        self._jobs.put(None)
