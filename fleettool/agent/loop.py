"""The agent's collection loop.

Each tick: run every collector under its watchdog, add health samples, keep the latest value of each series
for /metrics, and append rows to an in-memory buffer. Every `flush_s` the buffer goes to the store in one
Arrow batch (the file is opened only for the flush, so readers can open it between flushes). A flush that
cannot get the file (locked, disk full) keeps the buffer and tries again; past `max_buffer_rows` the oldest
rows are dropped and counted. SIGTERM/SIGINT stop the loop after a final flush.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fleettool.agent.watchdog import CollectorRunner
from fleettool.collectors.base import Collected, Collector
from fleettool.collectors.registry import ReportsAvailability
from fleettool.engine.incremental import RuleScheduler
from fleettool.model import Event, EventKind, GpuInfo, PodUse, Sample
from fleettool.store import Store, StoreError


@dataclass
class AgentConfig:
    db: Path | None
    node: str
    interval_s: float = 1.0
    flush_s: float = 30.0
    watchdog_s: float = 5.0
    raw_keep_s: float = 7 * 86400.0
    rollup_keep_s: float = 400 * 86400.0
    retention_every_s: float = 3600.0
    max_buffer_rows: int = 2_000_000
    health_every_s: float = 10.0
    duration_s: float | None = None
    quiet: bool = False
    export_to: str | None = None  # a fleet location: Parquet segments of every whole hour go there
    export_every_s: float = 3600.0


@dataclass
class AgentStats:
    ticks: int = 0
    flushed_rows: int = 0
    flushes: int = 0
    flush_failures: int = 0
    dropped_rows: int = 0
    last_flush_error: str | None = None


@dataclass
class Buffer:
    samples: list[Sample] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    gpus: dict[tuple[str, int | None, str | None], GpuInfo] = field(default_factory=dict)
    pods: list[PodUse] = field(default_factory=list)

    def rows(self) -> int:
        return len(self.samples) + len(self.events)


class Agent:
    def __init__(
        self,
        cfg: AgentConfig,
        collectors: list[Collector],
        sink: Callable[[Collected], None] | None = None,
        clock: Callable[[], float] = time.time,
        scheduler: RuleScheduler | None = None,
    ) -> None:
        self.cfg = cfg
        self.collectors = collectors
        self.runners = {c.id: CollectorRunner(c, cfg.watchdog_s) for c in collectors}
        self.sink = sink
        self.scheduler = scheduler  # the rules, evaluated over the store after a flush when due
        self.open_alerts: list[dict[str, object]] = []  # firing alerts of this node, for /metrics
        self.clock = clock
        self.buf = Buffer()
        self.stats = AgentStats()
        self.latest: dict[tuple[str, int | None, str | None, str], float] = {}
        self.event_counts: dict[tuple[str, int | None], int] = {}
        self._stop = threading.Event()
        self._health: dict[str, tuple[float, float]] = {}  # collector -> (up, hung)
        self._last_health = -1e18
        self._last_retention = -1e18
        self._last_export = -1e18
        self._started = False

    # -- control ------------------------------------------------------------------------------------------
    def stop(self, *_: object) -> None:
        self._stop.set()

    def install_signals(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    def log(self, msg: str) -> None:
        if not self.cfg.quiet:
            print(f"fleettool agent: {msg}", file=sys.stderr, flush=True)

    # -- loop ---------------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._started:
            return
        self._started = True
        now = self.clock()
        for c in self.collectors:
            if self._stop.is_set():  # SIGTERM while starting: open nothing more
                break
            # on the collector's own thread, under the watchdog: an open that blocks (a driver stuck in
            # init, a path on a hung mount) cannot hold up the loop or SIGTERM
            res = self.runners[c.id].start()
            if res.status == "hung":
                msg = f"collector {c.id} hung for more than {self.cfg.watchdog_s:g}s starting ({res.detail})"
            elif res.status == "error":
                msg = f"collector {c.id} failed to start: {res.detail}"
            elif not res.started:
                msg = f"collector {c.id} unavailable: {c.reason}"
            else:
                continue
            self.log(msg + " (will retry)")
            self._event(now, msg, c.id)

    def run(self) -> AgentStats:
        self.start()
        t_end = None if self.cfg.duration_s is None else time.monotonic() + self.cfg.duration_s
        next_tick = time.monotonic()
        last_flush = time.monotonic()
        try:
            while not self._stop.is_set():
                self.tick()
                if time.monotonic() - last_flush >= self.cfg.flush_s:
                    self.flush()
                    last_flush = time.monotonic()
                if t_end is not None and time.monotonic() >= t_end:
                    break
                next_tick += self.cfg.interval_s
                delay = next_tick - time.monotonic()
                if delay < 0:  # fell behind (a slow flush): skip missed ticks rather than burst
                    next_tick = time.monotonic()
                    delay = 0
                self._stop.wait(delay)
        finally:
            self.flush(final=True)
            for r in self.runners.values():
                r.close()
            for c in self.collectors:
                with contextlib.suppress(Exception):  # closing a broken driver must not mask the flush
                    c.close()
        return self.stats

    def tick(self) -> None:
        now = self.clock()
        self.stats.ticks += 1
        health_due = now - self._last_health >= self.cfg.health_every_s
        for cid, runner in self.runners.items():
            res = runner.run(now)
            up, hung = 1.0, 0.0
            avail = getattr(runner.collector, "reason", None) is None
            if res.status in ("ok", "recovered"):
                if res.collected is not None:
                    self._add(res.collected)
                    if res.collected.errors:
                        up = 0.0
                if res.status == "recovered":
                    self._event(now, f"collector {cid} returned after hanging {res.duration_s:.1f}s", cid)
                avail = getattr(runner.collector, "reason", None) is None
                if not avail:
                    up = 0.0  # not running: no data from it; `available` says it is absent, not failing
            elif res.status == "hung":
                up, hung = 0.0, 1.0
                self._event(
                    now, f"collector {cid} hung for more than {self.cfg.watchdog_s:g}s in {res.detail}", cid
                )
                self.log(f"collector {cid} hung in {res.detail}")
            elif res.status == "still-hung":
                up, hung = 0.0, 1.0
            else:
                up = 0.0
                self._event(now, f"collector {cid} failed: {res.detail}", cid)
            prev = self._health.get(cid)
            self._health[cid] = (up, hung)
            if health_due or prev != (up, hung):
                self._report_health(now, runner.collector, avail, up, hung, res.duration_s)
        if health_due:
            self._last_health = now
            n = self.cfg.node
            self._add(
                Collected(
                    samples=[
                        Sample(now, n, None, None, "agent_buffer_rows", float(self.buf.rows())),
                        Sample(
                            now, n, None, None, "agent_flush_failures_total", float(self.stats.flush_failures)
                        ),
                        Sample(
                            now, n, None, None, "agent_dropped_rows_total", float(self.stats.dropped_rows)
                        ),
                    ]
                )
            )

    def _report_health(
        self, now: float, c: Collector, avail: bool, up: float, hung: float, duration_s: float
    ) -> None:
        """One collector's health gauges, the same for every collector, plus the node-level gauge that a
        collector may name for its availability (ReportsAvailability: NVML's agent_nvml_available)."""
        n, sub = self.cfg.node, f"collector={c.id}"
        self._add(
            Collected(samples=[Sample(now, n, None, None, "agent_collector_available", float(avail), sub)])
        )
        rows = [
            Sample(now, n, None, None, "agent_collector_up", up, sub),
            Sample(now, n, None, None, "agent_collector_hung", hung, sub),
            Sample(now, n, None, None, "agent_collector_duration_s", round(duration_s, 6), sub),
        ]
        if isinstance(c, ReportsAvailability):
            rows.append(Sample(now, n, None, None, c.availability_metric, 0.0 if c.reason else 1.0))
        self._add(Collected(samples=rows))

    def _event(self, now: float, msg: str, source: str) -> None:
        self._add(Collected(events=[Event(now, self.cfg.node, EventKind.AGENT.value, msg, source=source)]))

    def _add(self, c: Collected) -> None:
        for s in c.samples:
            self.latest[(s.metric, s.gpu, s.uuid, s.sub)] = s.value
        for e in c.events:
            key = (e.kind, e.code)
            self.event_counts[key] = self.event_counts.get(key, 0) + 1
        if self.sink is not None:
            self.sink(c)
        if self.cfg.db is None:
            return
        self.buf.samples.extend(c.samples)
        self.buf.events.extend(c.events)
        for g in c.gpus:
            self.buf.gpus[(g.node, g.gpu, g.uuid)] = g
        self.buf.pods.extend(c.pods)
        over = self.buf.rows() - self.cfg.max_buffer_rows
        if over > 0:
            drop = min(over, len(self.buf.samples))
            del self.buf.samples[:drop]
            self.stats.dropped_rows += drop

    # -- store --------------------------------------------------------------------------------------------
    def flush(self, final: bool = False) -> bool:
        if self.cfg.db is None or (not self.buf.rows() and not self.buf.gpus):
            return True
        now = self.clock()
        try:
            # the schema is created on the first flush only: a later open just checks its version
            store = Store(self.cfg.db, wait_s=5.0 if final else 0.2, migrate=self.stats.flushes == 0)
        except StoreError as e:
            self._flush_failed(e)
            return False
        from fleettool.pipeline import Pipeline

        pipe = Pipeline(store, scheduler=self.scheduler)
        try:
            buf = self.buf
            c = Collected(samples=buf.samples, events=buf.events, gpus=list(buf.gpus.values()), pods=buf.pods)
            n = pipe.write(c, now)
            if self.scheduler is not None:
                try:  # the pipeline rolls back a failed evaluation
                    pipe.evaluate_due(now)
                    self.open_alerts = pipe.firing_alerts(self.cfg.node)
                except Exception as e:  # a broken rule must not stop collection
                    self.log(
                        f"rule evaluation failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
                    )
            if self.cfg.export_to and now - self._last_export >= self.cfg.export_every_s:
                self._last_export = now
                try:
                    from fleettool.fleet.location import open_location
                    from fleettool.fleet.segments import export

                    export(store, open_location(self.cfg.export_to), self.cfg.node, now)
                except Exception as e:  # the store keeps everything; the next export catches up
                    self.log(
                        f"export to {self.cfg.export_to} failed: {str(e).splitlines()[0] if str(e) else e!r}"
                    )
            if now - self._last_retention >= self.cfg.retention_every_s:
                store.apply_retention(now, self.cfg.raw_keep_s, self.cfg.rollup_keep_s)
                self._last_retention = now
        except Exception as e:  # disk full, I/O error: keep the buffer, try again next time
            with contextlib.suppress(Exception):
                store.rollback()
            store.close()
            self._flush_failed(e)
            return False
        store.close()
        self.stats.flushes += 1
        self.stats.flushed_rows += n
        self.buf = Buffer()
        if self.stats.last_flush_error is not None:
            self.log("store writable again")
            self.stats.last_flush_error = None
        return True

    def _flush_failed(self, e: Exception) -> None:
        self.stats.flush_failures += 1
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        if msg != self.stats.last_flush_error:
            self.log(f"flush failed, keeping {self.buf.rows()} rows in memory: {msg}")
            self.buf.events.append(
                Event(
                    self.clock(), self.cfg.node, EventKind.AGENT.value, f"flush failed: {msg}", source="agent"
                )
            )
        self.stats.last_flush_error = msg
