"""The kernel-log collector: XIDs, SXids, fallen-off-the-bus and GSP timeouts as events, live.

Lines come from an injected LineSource (/dev/kmsg, journalctl, a FIFO, a followed file: see
fleettool.sources.kmsg, which picks the reader by what a `--kmsg PATH` is); the pure parser turns them into
records. The driver's `GPU at PCI:...: GPU-<uuid>` lines become inventory (PCI id -> UUID), so the store can
give each XID its GPU index; the agent resolves that at flush from NVML's or dcgm-exporter's inventory.

Whatever keeps it from reading (a path that is missing, a directory, a socket, a device that is not
/dev/kmsg, no permission) makes it unavailable with that reason: the agent goes on, reports
agent_collector_available{collector="kmsg"}=0 and an agent event naming the reason, and looks at the path
again each tick. `fleettool agent` refuses a missing explicit path before it starts (sources.kmsg.check_spec):
a path someone typed is meant to be read, and a typo must not pass for a quiet kernel log.

`kernel_events` is the one conversion of kernel records into events and GPU announcements: the live collector
and replay (fleettool.ingest) both call it, so a replayed kernel log exercises the collector's code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from fleettool.collectors.base import Collected
from fleettool.collectors.registry import CollectorConfig, CollectorConfigError
from fleettool.formats.kmsg import KernelLogParser, KernelRecord, record_to_event
from fleettool.model import Event, EventKind, GpuInfo
from fleettool.sources.base import SourceUnavailable
from fleettool.sources.kmsg import LineSource, check_spec, open_auto
from fleettool.sources.kmsg_boot import (
    BOOT_ID_PATH,
    DEDUP_WINDOW_S,
    KmsgResume,
    boot_wall_time,
    read_boot_id,
    read_btime,
    xid_gpu_key,
)

MAX_LINES_PER_TICK = 20_000
BACKOFF_S = (1.0, 60.0)  # a lost source is reopened after 1 s, then 2, 4, ... at most 60 s apart
LIVE_SOURCES = ("kmsg", "journal")  # this machine's own kernel log: its boot is recorded
BOOT_TIME_FROM = "CLOCK_REALTIME - CLOCK_MONOTONIC at the agent's first start in this boot"


@dataclass
class KernelBatch:
    """What a run of kernel records holds: GPU events, and the driver's announcement lines (identity: PCI id
    -> UUID, board serial) with the time of each line."""

    events: list[Event] = field(default_factory=list)
    announced: list[tuple[GpuInfo, float | None]] = field(default_factory=list)
    boot_relative: int = 0  # events with only an uptime, no wall time (detail.time = boot-relative)
    untimed: int = 0  # events with no time at all (detail.time = none)


def kernel_events(
    records: Iterable[KernelRecord],
    node: str,
    source: str,
    *,
    now: float | None = None,
    this_node: bool = False,
) -> KernelBatch:
    """Kernel records -> events and GPU announcements, live and in replay.

    `now`: the time of a record that carries none (live: it arrived now). Without it such an event stays
    untimed, marked detail.time = "boot-relative" (the line has an uptime) or "none".
    `this_node`: every event and announcement is `node`'s (live: a journal's host field names this machine);
    otherwise a line's own host names its node (a syslog of many hosts), `node` only those naming none."""
    out = KernelBatch()
    for rec in _settled(records):
        if now is not None and rec.ts is None:
            rec.ts = now
        host = node if this_node else (rec.host or node)
        if rec.kind == "gpu-announce":
            out.announced.append((GpuInfo(host, None, rec.uuid, rec.pci_bus_id, serial=rec.serial), rec.ts))
            continue
        ev = record_to_event(rec, host, source=source)
        if ev is None:
            continue
        if ev.node != host:
            ev = _renode(ev, host)
        if ev.ts is None:
            mark = "boot-relative" if rec.uptime is not None else "none"
            ev = dataclasses.replace(ev, detail={**ev.detail, "time": mark})
            if rec.uptime is not None:
                out.boot_relative += 1
            else:
                out.untimed += 1
        out.events.append(ev)
    return out


SXID_FOLLOW_LINES = 64  # an SXid's follow-on lines come within this many kernel lines of its first line


def _settled(records: Iterable[KernelRecord]) -> Iterator[KernelRecord]:
    """The records, each SXid held back until the stream is SXID_FOLLOW_LINES lines past it (or ends): its
    follow-on lines (`Severity ...`, `Data {...}`), interleaved with other switches' lines, come after it and
    are folded into its detail by the parser meanwhile. Live, a batch's end releases them: a follow-on line
    read in a later tick still folds (no event of its own) but adds nothing to the stored detail."""
    held: list[KernelRecord] = []
    for rec in records:
        while held and rec.lineno - held[0].lineno > SXID_FOLLOW_LINES:
            yield held.pop(0)
        if rec.kind == "sxid":
            held.append(rec)
        elif held:
            held.append(rec)  # keeps the order of the stream
        else:
            yield rec
    yield from held


class KmsgCollector:
    """The kernel log as events. From /dev/kmsg: the whole ring buffer at start, each record once (what the
    store holds of this boot, `resume`, is skipped by sequence number), stamped with this boot's wall time fixed
    once (sources/kmsg_boot.py), and the boot itself recorded once per boot (a `boot` event, as replay records
    one from a `Linux version` line, so the repeat policy sees the agent's boots). A source that fails while
    read (journalctl exited, a read error) is reopened with backoff (`backoff`: first and longest wait), and
    gives one agent event when it is lost and one when it reads again, never one per tick."""

    id = "kmsg"

    def __init__(
        self,
        node: str,
        *,
        source: LineSource | None = None,
        spec: str = "auto",
        resume: KmsgResume | None = None,
        boot_id_path: str = BOOT_ID_PATH,
        backoff: tuple[float, float] = BACKOFF_S,
        mono: Callable[[], float] = time.monotonic,
        realtime: Callable[[], float] = time.time,
    ) -> None:
        self.node = node
        self.spec = spec
        self.source = source
        self._given = source  # an injected source is reopened, never replaced
        self.resume = resume
        self.boot_id_path = boot_id_path
        self.backoff, self.mono, self.realtime = backoff, mono, realtime
        self.parser: KernelLogParser | None = None
        self._reason: str | None = None
        self.lines_read = 0
        self.skipped_stored = 0  # backlog records the store already held (or another source's XIDs)
        self.boot_id: str | None = None
        self._boot_time: float | None = None  # fixed at the first start in this process (or from the store)
        self._boot_event: Event | None = None  # the boot record, given with the next collect
        self._after_seq = -1  # the highest /dev/kmsg sequence number handled (this boot)
        self._other_xids: list[tuple[int, str, float]] = []
        self._retry_at: float | None = None  # after a loss: the next reopen, on `mono`
        self._delay = backoff[0]
        self._opened_at = 0.0
        self.restarts = 0

    @property
    def reason(self) -> str | None:
        return self._reason

    def inflight(self) -> str | None:
        if self.source is None:
            return f"opening {self.spec}"
        return f"reading {self.source.name}"

    def start(self) -> bool:
        if self._retry_at is not None and self.mono() < self._retry_at:
            return False  # lost a while ago: wait out the backoff
        try:
            if self._given is None:
                self.source = open_auto(self.spec)
            else:
                self._given.open()
                self.source = self._given
        except SourceUnavailable as e:
            if self._retry_at is not None:  # reopening after a loss: wait longer before the next try
                self._retry_at = self.mono() + self._next_delay()
            self._reason = str(e)  # a path is looked at again (os.stat) on the next try
            self.source = self._given
            return False
        self._reason = None
        self._opened_at = self.mono()
        if self.source.name in LIVE_SOURCES:
            self._fix_boot(self.source)
        if self.parser is None:  # kept across reopens: the state that spans lines survives a restart
            # journal lines have no year only in the short format; short-iso (what we ask for) has one
            self.parser = KernelLogParser(
                year=dt.datetime.now(dt.timezone.utc).year, boot_time=self.source.boot_time, host=None
            )
        return True

    def _fix_boot(self, src: LineSource) -> None:
        """This boot's id and wall time, once per process: the store's (resume) when it has this boot, else
        the wall clock's now; the boot record when the store has none for this boot."""
        if self._boot_time is None:
            self.boot_id = read_boot_id(self.boot_id_path)
            r = self.resume if self.resume is not None and self.resume.boot_id == self.boot_id else None
            if r is not None and r.last_seq is not None:
                self._after_seq = r.last_seq
            if r is not None:
                self._other_xids = list(r.other_xids)
            if r is not None and r.boot_time is not None:
                self._boot_time = r.boot_time
            else:
                self._boot_time = boot_wall_time(self.realtime())
                if self.boot_id is not None:
                    self._boot_event = Event(
                        self._boot_time,
                        self.node,
                        "boot",
                        f"boot {self.boot_id} (recorded by the agent)",
                        source="kmsg:boot",
                        detail={"boot_id": self.boot_id, "btime": read_btime(), "boot_time": BOOT_TIME_FROM},
                    )
        src.boot_time = self._boot_time

    def _next_delay(self) -> float:
        d = self._delay
        self._delay = min(self._delay * 2, self.backoff[1])
        return d

    def collect(self, now: float) -> Collected:
        out = Collected()
        if (self.source is None or self.parser is None or self._retry_at is not None) and not self.start():
            return out
        assert self.source is not None and self.parser is not None
        if self._retry_at is not None:  # reopened after a loss: one event for the change
            self._retry_at = None
            self._reason = None
            out.events.append(
                self._agent_event(
                    now, f"kernel log {self.source.name} reading again (restart {self.restarts})"
                )
            )
        if self._boot_event is not None:
            out.events.append(self._boot_event)
            self._boot_event = None
        try:
            batch = self._read(now, self.source, self.parser)
        except OSError as e:
            return self._lost(now, out, e)
        out.events.extend(batch.events)
        out.gpus = [g for g, _ in batch.announced]
        return out

    def _read(self, now: float, src: LineSource, parser: KernelLogParser) -> KernelBatch:
        read_records = getattr(src, "read_records", None)
        if read_records is None:
            lines = src.read(MAX_LINES_PER_TICK)
            self.lines_read += len(lines)
            # a line without any time arrived now; events are this node's (a journal's host names this machine)
            return kernel_events(
                parser.feed_all(lines), self.node, f"kmsg:{src.name}", now=now, this_node=True
            )
        recs: list[tuple[int, int, str]] = read_records(MAX_LINES_PER_TICK)
        self.lines_read += len(recs)
        return kernel_events(
            self._records(recs, parser), self.node, f"kmsg:{src.name}", now=now, this_node=True
        )

    def _records(self, recs: list[tuple[int, int, str]], parser: KernelLogParser) -> Iterator[KernelRecord]:
        """/dev/kmsg records -> kernel records of this boot not yet stored, each with its sequence number and
        boot id. Every record is parsed (the state that spans lines, an SXid before its follow-on lines, is
        rebuilt from the backlog); those the store holds give no event."""
        for seq, usec, msg in recs:
            rec = parser.feed_message(msg, ts=None, uptime=usec / 1e6, host=None)
            old, self._after_seq = seq <= self._after_seq, max(self._after_seq, seq)
            if rec is None or rec.kind == "boot":  # the boot is recorded from its boot id, once
                continue
            if rec.kind == "gpu-announce":  # identity, merged: given again after a restart
                yield rec
                continue
            if old or self._other_source_had(rec):
                self.skipped_stored += 1
                continue
            rec.detail.update(kmsg_seq=seq, boot_id=self.boot_id)
            yield rec

    def _other_source_had(self, rec: KernelRecord) -> bool:
        """A backlog XID that NVML's event API gave before the restart (stored from it). NVML's report is
        stamped by the wall clock of its moment: it is matched against the line's wall time by this boot's
        fixed time and by the clock now (one of the two holds when the clock stepped in between)."""
        if rec.kind != "xid" or not self._other_xids or rec.uptime is None or rec.ts is None:
            return False
        key = xid_gpu_key(rec.pci_bus_id, None)
        now_ts = boot_wall_time(self.realtime()) + rec.uptime
        return any(
            c == rec.code and k == key and min(abs(t - rec.ts), abs(t - now_ts)) <= DEDUP_WINDOW_S
            for c, k, t in self._other_xids
        )

    def _lost(self, now: float, out: Collected, e: OSError) -> Collected:
        assert self.source is not None
        name = self.source.name
        with contextlib.suppress(OSError):
            self.source.close()
        self.source = self._given
        self.restarts += 1
        lost_at = self.mono()
        if lost_at - self._opened_at > self.backoff[1]:
            self._delay = self.backoff[0]  # it had run a while: start the backoff again
        wait = self._next_delay()
        self._retry_at = lost_at + wait
        self._reason = f"kernel log {name} lost: {e}; reopening with backoff"
        out.events.append(self._agent_event(now, f"{self._reason} (first retry in {wait:g}s)"))
        return out

    def _agent_event(self, now: float, msg: str) -> Event:
        return Event(now, self.node, EventKind.AGENT.value, msg, source=self.id)

    def wait_fd(self) -> int | None:
        """A file descriptor that becomes readable when kernel lines arrive (the /dev/kmsg device), for the
        agent to wake on at once: the source's own `wait_fd()`. Sources without one are read each tick (the
        journal's pipe is drained by its own thread, a FIFO reads as readable at EOF when no writer is there,
        a followed file always does)."""
        get = getattr(self.source, "wait_fd", None)
        return None if get is None else get()

    def close(self) -> None:
        if self.source is not None:
            with contextlib.suppress(OSError):
                self.source.close()


def _renode(ev: Event, node: str) -> Event:
    return dataclasses.replace(ev, node=node)


def from_config(cfg: CollectorConfig) -> KmsgCollector | None:
    """The registry's factory: the kernel log named by `--kmsg` (None for off). A path someone typed must
    exist: a typo would otherwise pass for a quiet kernel log."""
    if cfg.kmsg == "off":
        return None
    if (why := check_spec(cfg.kmsg)) is not None:
        raise CollectorConfigError(why)
    return KmsgCollector(cfg.node, spec=cfg.kmsg, resume=cfg.kmsg_resume)
