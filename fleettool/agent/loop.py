"""The agent's collection loop.

Each tick: run every collector under its watchdog, add health samples, keep the latest value of each series
for /metrics, and append rows to an in-memory buffer. The buffer goes to the store after the first tick and
then every `flush_s` (agent/flush.py: the file is opened only for the flush, so readers can open it between
flushes); a flush that cannot get the file (locked, disk full) keeps the buffer and tries again; past
`max_buffer_bytes` (--max-buffer, sized to the DaemonSet's memory limit) the oldest samples are dropped and counted. SIGTERM/SIGINT stop the loop after a final flush;
rows it could not save are counted in `unsaved_rows`.

Between ticks the loop waits on the kernel log device, so a kernel line is read when it arrives; an XID (or
any event of URGENT_EVENT_KINDS, or a change of a metric an instant rule watches) flushes at once and is
judged by the event rules there and then. Ticks are scheduled on monotonic time; periodic jobs (health,
retention, export, the NVML tiers, the rules) are due again after a step back of the wall clock, and
retention never counts from a clock that has run ahead of monotonic time.
"""

from __future__ import annotations

import contextlib
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from fleettool.agent import memory
from fleettool.agent.config import SAMPLE_BYTES, AgentConfig, AgentStats, Buffer
from fleettool.agent.dedup import XidDedup
from fleettool.agent.flush import URGENT_EVENT_KINDS, due, flush_buffer
from fleettool.agent.node_condition import NodeCondition
from fleettool.agent.topology import TopologyRefresh
from fleettool.agent.watchdog import CollectorRunner
from fleettool.collectors.base import Collected, Collector
from fleettool.collectors.registry import ReportsAvailability
from fleettool.engine.incremental import RuleScheduler
from fleettool.model import Event, EventKind, GpuInfo, Sample

GPU_REFRESH_S = 300.0  # an unchanged GPU's inventory row (its last_seen) is rewritten this often
# a GPU (index and UUID) whose reads have stopped this long (lost, hung, swapped for another) leaves `latest`:
# /metrics stops exposing its series and Prometheus marks them stale. dcgm-exporter answers every 10 s.
GPU_STALE_S = 30.0
_PORT_SUBS = ("port=", "netde")  # the fabric collector's sub-entities that can vanish with their NIC


def merge_gpu(known: GpuInfo | None, new: GpuInfo) -> GpuInfo:
    """A GPU's identity for /metrics: the first value each collector gives a field stays (NVML runs first;
    dcgm-exporter's `--replace-blanks-in-model-name` spelling must not flip the series' labels every 10 s),
    and fills only what is unknown. A different UUID at the index is another GPU: it replaces the row."""
    if known is None or (new.uuid is not None and known.uuid is not None and new.uuid != known.uuid):
        return new
    fill = {f: getattr(new, f) for f in ("uuid", "pci_bus_id", "model", "driver", "serial")}
    changes = {f: v for f, v in fill.items() if v is not None and getattr(known, f) is None}
    return replace(known, **changes) if changes else known


class Agent:
    def __init__(
        self,
        cfg: AgentConfig,
        collectors: list[Collector],
        sink: Callable[[Collected], None] | None = None,
        clock: Callable[[], float] = time.time,
        scheduler: RuleScheduler | None = None,
        mono: Callable[[], float] = time.monotonic,
        topology: TopologyRefresh | None = None,
    ) -> None:
        self.cfg = cfg
        # --topology files and the live sources (agent/topology.py): stored at each flush
        self.topology = topology
        self.collectors = collectors
        self.runners = {c.id: CollectorRunner(c, cfg.watchdog_s) for c in collectors}
        self.sink = sink
        self.scheduler = scheduler  # the rules, evaluated over the store after a flush when due
        self.open_alerts: list[dict[str, object]] = []  # firing alerts of this node, for /metrics
        self.incidents: dict[tuple[str, str, str], int] = {}  # the store's by (scope, severity, state)
        self.remediations: dict[tuple[str, str], int] = {}  # the store's open episodes by (node, rung)
        self.clock = clock
        self.mono = mono
        # the wall clock as monotonic time says it should read: retention never runs ahead of it, so a clock
        # stepped forward (30 days, then corrected) cannot roll up and delete the raw data
        self._anchor = (clock(), mono())
        self.dedup = XidDedup()  # an XID seen by NVML's event API and by the kernel log is stored once
        self._event_wakers: list[str] = []
        self._quiet_until_tick = False
        # an event or an instant-rule metric changed: flush and judge now, not at the timer
        self._urgent = False
        self.node_condition: NodeCondition | None = None  # GpuHealthy through the Kubernetes API (its thread)
        self._watched = scheduler.instant_metrics() if scheduler is not None else frozenset()
        self._urgent_kinds = URGENT_EVENT_KINDS | (
            scheduler.event_kinds() if scheduler is not None else frozenset()
        )
        self.buf = Buffer()
        self.stats = AgentStats()
        self.latest: dict[tuple[str, int | None, str | None, str], float] = {}
        self._gpu_seen: dict[tuple[int, str | None], float] = {}  # (GPU, UUID) -> monotonic time of last read
        self.gpu_stale_s = max(GPU_STALE_S, 3.0 * cfg.interval_s)
        self._port_seen: dict[str, float] = {}  # a NIC port's or netdev's sub -> monotonic time of last read
        self._gpus_written: dict[tuple[str, int | None, str | None], tuple[GpuInfo, float]] = {}
        self.gpus: dict[int, GpuInfo] = {}  # this node's GPUs by index, for /metrics' identity labels
        self.event_counts: dict[tuple[str, int | None], int] = {}
        self._stop = threading.Event()
        self._health: dict[str, tuple[float, float]] = {}  # collector -> (up, hung)
        self._last_health = -1e18
        self._last_retention = -1e18
        self._last_export = -1e18
        self._started = False
        # for /healthz and /readyz (agent/health.py): when the loop last finished a tick, when the flush now
        # running began, and the dropped-row count at the last flush that reached the store
        self.started_mono = mono()
        self.last_tick_mono: float | None = None
        self.flushing_since: float | None = None
        self.dropped_at_last_flush = 0

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
        if self.topology is not None:  # after the GPU source opened: its fabric info is read first thing
            self.topology.start()

    def run(self) -> AgentStats:
        memory.limit_arenas()  # before the collectors' threads start
        self.start()
        t_end = None if self.cfg.duration_s is None else time.monotonic() + self.cfg.duration_s
        next_tick = time.monotonic()
        last_flush = -1e18  # the first flush follows the first tick: readers see data from start-up
        try:
            while not self._stop.is_set():
                self.tick()
                if time.monotonic() - last_flush >= self.cfg.flush_s or self._urgent:
                    self.flush()
                    last_flush = time.monotonic()
                if t_end is not None and time.monotonic() >= t_end:
                    break
                next_tick += self.cfg.interval_s
                if next_tick < time.monotonic():  # fell behind (a slow flush): skip missed ticks, no burst
                    next_tick = time.monotonic()
                while not self._stop.is_set() and self._wait_for_events(next_tick - time.monotonic()):
                    self._collect_events()  # kernel lines arrived: read them now, between ticks
                    if self._urgent:
                        self.flush()
        finally:
            if self.topology is not None:
                self.topology.stop()
            ok = self.flush(final=True)
            if not ok:
                self.stats.unsaved_rows = self.buf.rows()
            for r in self.runners.values():
                r.close()
            for c in self.collectors:
                with contextlib.suppress(Exception):  # closing a broken driver must not mask the flush
                    c.close()
        return self.stats

    def _wait_fds(self) -> dict[int, str]:
        """The collectors that can wake the loop (the /dev/kmsg device), by fd; none while one is hung."""
        fds = {}
        for cid, runner in self.runners.items():
            get = getattr(runner.collector, "wait_fd", None)
            if get is not None and not runner.hung_call and (fd := get()) is not None:
                fds[fd] = cid
        return fds

    def _wait_for_events(self, delay: float) -> bool:
        """Sleep `delay` seconds (until the next tick); True early when an event source has something to
        read. A stop signal is seen within 0.25 s (select is retried after signals, PEP 475)."""
        deadline = time.monotonic() + delay
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            fds = self._wait_fds() if not self._quiet_until_tick else {}
            if not fds:
                self._stop.wait(left)
                return False
            try:
                ready, _, _ = select.select(list(fds), [], [], min(left, 0.25))
            except (OSError, ValueError):  # the fd was closed under us (the collector reopening it)
                self._quiet_until_tick = True
                continue
            if ready:
                self._event_wakers = [fds[fd] for fd in ready]
                return True
        return False

    def _collect_events(self) -> None:
        """Run the collectors whose source woke the loop; one that brings nothing (a read error keeps the fd
        readable) is not waited on again until the next tick, so the loop never spins."""
        now = self.clock()
        got = False
        for cid in self._event_wakers:
            res = self.runners[cid].run(now)
            if res.status in ("ok", "recovered") and res.collected is not None:
                got = got or bool(res.collected.events or res.collected.gpus or res.collected.samples)
                self._add(res.collected)
        self._event_wakers = []
        if not got:
            self._quiet_until_tick = True

    def tick(self) -> None:
        now = self.clock()
        self._quiet_until_tick = False
        self.stats.ticks += 1
        health_due = due(now, self._last_health, self.cfg.health_every_s)
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
                if res.failures:  # it had been failing: one event for the whole run of failures
                    self._event(
                        now, f"collector {cid} recovered after {res.failures} failed collections", cid
                    )
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
                if res.failures == 1:  # the first of a run: the health gauge says it goes on failing
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
                        Sample(
                            now, n, None, None, "agent_events_deduplicated_total", float(self.dedup.dropped)
                        ),
                        *(self.topology.samples(now) if self.topology is not None else []),
                    ]
                )
            )
        if self.node_condition is not None:  # its API calls run on its own thread; their failures come here
            for msg in self.node_condition.drain():
                self._event(now, msg, "node-condition")
        self._drop_stale_gpus()
        self.last_tick_mono = self.mono()

    def _drop_stale_gpus(self) -> None:
        """A GPU whose reads stopped (lost, hung, another GPU now at its index) takes its series out of `latest`,
        so /metrics stops exposing its last values; the agent's own series about it (agent_*: hung, reads
        skipped) stay. It comes back with its next read. A NIC's port (sub port=..., netdev=...) whose reads stopped leaves the same way."""
        now = self.mono()
        stale = {g for g, seen in self._gpu_seen.items() if now - seen > self.gpu_stale_s}
        gone = {p for p, seen in self._port_seen.items() if now - seen > self.gpu_stale_s}
        if not stale and not gone:
            return
        for g in stale:
            del self._gpu_seen[g]
        for p in gone:
            del self._port_seen[p]
        for k in [k for k in self.latest if ((k[1], k[2]) in stale or k[3] in gone) and k[0][:6] != "agent_"]:
            del self.latest[k]

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
        watched = self._watched
        mono = self.mono() if c.samples else 0.0
        for s in c.samples:
            k = (s.metric, s.gpu, s.uuid, s.sub)
            if s.gpu is not None and not s.metric.startswith("agent_"):
                self._gpu_seen[(s.gpu, s.uuid)] = mono
            elif s.sub[:5] in _PORT_SUBS:
                self._port_seen[s.sub] = mono
            if s.metric in watched and self.latest.get(k, s.value) != s.value:
                self._urgent = True  # a double-bit count or remap flag changed: its instant rule judges now
            self.latest[k] = s.value
        if c.events:
            now = self.clock()
            c.events = [e for e in c.events if self.dedup.keep(e, now)]
        for e in c.events:
            key = (e.kind, e.code)
            self.event_counts[key] = self.event_counts.get(key, 0) + 1
            if e.kind in self._urgent_kinds:
                self._urgent = True
        if self.sink is not None:
            self.sink(c)
        for g in c.gpus:
            if g.gpu is not None:
                self.gpus[g.gpu] = merge_gpu(self.gpus.get(g.gpu), g)
        if self.cfg.db is None:
            return
        self.buf.samples.extend(c.samples)
        self.buf.events.extend(c.events)
        for g in c.gpus:
            # the inventory is written when a GPU's facts change, else at most every GPU_REFRESH_S (its
            # last_seen): rewriting 8 unchanged rows each flush cost ~10 ms of a ~60 ms flush
            gkey = (g.node, g.gpu, g.uuid)
            seen = self._gpus_written.get(gkey)
            now = self.clock()
            if seen is None or seen[0] != g or not 0 <= now - seen[1] < GPU_REFRESH_S:
                self._gpus_written[gkey] = (g, now)
                self.buf.gpus[gkey] = g
        self.buf.pods.extend(c.pods)
        over = self.buf.nbytes() - self.cfg.max_buffer_bytes
        if over > 0:  # the oldest samples go (events are kept: they are few and each one matters)
            drop = min(-(-over // SAMPLE_BYTES), len(self.buf.samples))
            del self.buf.samples[:drop]
            self.stats.dropped_rows += drop

    # -- store --------------------------------------------------------------------------------------------
    def flush(self, final: bool = False) -> bool:
        """The buffer to the store, then the rules (the due ones; at once the event and instant rules when an
        event came), export and retention. False when the buffer could not be written (it is kept)."""
        urgent, self._urgent = self._urgent, False
        self.flushing_since = self.mono()
        try:
            ok = flush_buffer(self, final=final, urgent=urgent)
        finally:
            self.flushing_since = None
        if ok:
            self.dropped_at_last_flush = self.stats.dropped_rows
        memory.trim()  # the rule pass's peak goes back to the kernel, not kept until the next one
        if not ok and urgent:
            self._urgent = True  # still to be judged at once: the next tick tries again
        return ok

    def retention_now(self) -> float:
        """The time retention counts from: the wall clock, but never ahead of where monotonic time since
        start-up puts it (a clock stepped forward must not make retention delete the raw data)."""
        wall0, mono0 = self._anchor
        return min(self.clock(), wall0 + (self.mono() - mono0))
