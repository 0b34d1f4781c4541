"""Run a collector on its own thread and never wait longer than the watchdog limit for it.

A driver call that hangs (NVML stuck in the kernel) cannot be interrupted from Python. The runner notices that
the collection has not come back within `limit_s`, reports the collector hung (naming the call in flight), and
stops asking it until the stuck call returns; the agent loop and the other collectors carry on.

A collector that can set the stuck part aside (`Isolating`: the NVML collector, whose stuck call is one GPU's
read) is asked to first: it returns what the collection gathered (with the stuck part named in it), the stuck
thread is left to its call, and the next collection runs on a fresh worker thread, so one GPU's hung read
stops only that GPU. One worker exists per collector while nothing hangs; one more per part stuck at once.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from fleettool.collectors.base import Collected, Collector


@runtime_checkable
class Isolating(Protocol):
    def abandon(self) -> Collected | None:
        """Give up the collection stuck in progress, setting the stuck part aside (e.g. one GPU): what it had
        gathered, or None when the whole collector is stuck."""
        ...


@dataclass
class RunResult:
    collected: Collected | None
    status: str  # ok | error | hung | still-hung | recovered | down
    duration_s: float
    detail: str = ""
    started: bool | None = None  # for start(): whether the collector came up
    # error: the failures in a row so far, this one included (1: it just started failing); ok/recovered: the
    # failures in a row this success ends (0: it was not failing). The agent reports the changes only.
    failures: int = 0


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
        self._jobs: queue.SimpleQueue[_Job | None] = self._spawn()
        self.retired_workers = 0  # workers left in a stuck call after the collector set it aside
        self._stuck: _Job | None = None
        self._stuck_since = 0.0
        self.hung_call: str | None = None
        self.failures = 0  # collections in a row that raised

    def _spawn(self) -> queue.SimpleQueue[_Job | None]:
        jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        name = f"collector-{self.collector.id}"
        threading.Thread(target=self._work, args=(jobs,), name=name, daemon=True).start()
        return jobs

    def _work(self, jobs: queue.SimpleQueue[_Job | None]) -> None:
        while True:
            job = jobs.get()
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
            call = self.collector.inflight() or "unknown call"
            partial = self.collector.abandon() if isinstance(self.collector, Isolating) else None
            if partial is not None:  # the stuck part is set aside: its worker is left in the call
                self._jobs.put(None)  # it exits once the call returns
                self._jobs = self._spawn()
                self.retired_workers += 1
                return RunResult(partial, "ok", time.monotonic() - t0, f"set aside: {call}")
            self._stuck = job
            self._stuck_since = t0
            self.hung_call = call
            return RunResult(None, "hung", time.monotonic() - t0, self.hung_call)
        if job.error is not None:
            self.failures += 1
            detail = f"{type(job.error).__name__}: {job.error}"
            return RunResult(None, "error", time.monotonic() - t0, detail, failures=self.failures)
        ended, self.failures = self.failures, 0
        return RunResult(job.result, "ok", time.monotonic() - t0, failures=ended)

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
