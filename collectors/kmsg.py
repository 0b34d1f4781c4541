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
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt

from fleettool.collectors.base import Collected
from fleettool.formats.kmsg import KernelLogParser, record_to_event
from fleettool.model import Event, GpuInfo
from fleettool.sources.base import SourceUnavailable
from fleettool.sources.kmsg import LineSource, open_auto

MAX_LINES_PER_TICK = 20_000


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
        for rec in self.parser.feed_all(lines):
            if rec.ts is None:
                rec.ts = now  # a line without any time: it arrived now
            if rec.kind == "gpu-announce":
                out.gpus.append(GpuInfo(self.node, None, rec.uuid, rec.pci_bus_id, serial=rec.serial))
                continue
            # events are this node's: a journal's host field names the same machine
            ev = record_to_event(rec, self.node, source=f"kmsg:{self.source.name}")
            if ev is not None:
                out.events.append(ev if ev.node == self.node else _renode(ev, self.node))
        return out

    def close(self) -> None:
        if self.source is not None:
            with contextlib.suppress(OSError):
                self.source.close()


def _renode(ev: Event, node: str) -> Event:
    return dataclasses.replace(ev, node=node)
