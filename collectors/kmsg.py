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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from fleettool.collectors.base import Collected
from fleettool.collectors.registry import CollectorConfig, CollectorConfigError
from fleettool.formats.kmsg import KernelLogParser, KernelRecord, record_to_event
from fleettool.model import Event, GpuInfo
from fleettool.sources.base import SourceUnavailable
from fleettool.sources.kmsg import LineSource, check_spec, open_auto

MAX_LINES_PER_TICK = 20_000


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
    id = "kmsg"

    def __init__(self, node: str, *, source: LineSource | None = None, spec: str = "auto") -> None:
        self.node = node
        self.spec = spec
        self.source = source
        self.parser: KernelLogParser | None = None
        self._reason: str | None = None
        self.lines_read = 0

    @property
    def reason(self) -> str | None:
        return self._reason

    def inflight(self) -> str | None:
        if self.source is None:
            return f"opening {self.spec}"
        return f"reading {self.source.name}"

    def start(self) -> bool:
        try:
            if self.source is None:
                self.source = open_auto(self.spec)
            else:
                self.source.open()
        except SourceUnavailable as e:
            self._reason = str(e)  # a path is looked at again (os.stat) on the next try
            return False
        self._reason = None
        # journal lines have no year only in the short format; short-iso (what we ask for) has one
        self.parser = KernelLogParser(
            year=dt.datetime.now(dt.timezone.utc).year, boot_time=self.source.boot_time, host=None
        )
        return True

    def collect(self, now: float) -> Collected:
        out = Collected()
        if (self.source is None or self.parser is None) and not self.start():
            return out
        assert self.source is not None and self.parser is not None
        lines = self.source.read(MAX_LINES_PER_TICK)
        self.lines_read += len(lines)
        # a line without any time arrived now; events are this node's (a journal's host names this machine)
        batch = kernel_events(
            self.parser.feed_all(lines), self.node, f"kmsg:{self.source.name}", now=now, this_node=True
        )
        out.events = batch.events
        out.gpus = [g for g, _ in batch.announced]
        return out

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
    return KmsgCollector(cfg.node, spec=cfg.kmsg)
