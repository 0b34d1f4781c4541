"""Write a recording in standard formats: OpenMetrics with timestamps for series, kernel-log text for the events
a kernel prints, and JSON lines for fleettool's own events, so any fleettool recording can also be backfilled
into Prometheus (promtool tsdb create-blocks-from openmetrics) or read by grep, and `fleettool replay` stores the
same samples, events and GPU inventory the agent collected.

- `nvml.om.gz`: every series, grouped by family (OpenMetrics wants each family's samples together, so series
  are collected in memory and written at the end: a node-hour at 8 GPUs is ~1 M samples, ~50 MB of Python
  objects), and `fleettool_gpu_info`, one info series per GPU of the inventory with its identity labels (gpu,
  UUID, pci_bus_id, ...), as the agent's /metrics has it. Replay takes the inventory from those labels, so a GPU
  that never answered a read (lost from the first tick) still has its index, and an XID line naming its PCI id
  is given that index.
- `kernel.log`: events that are kernel messages (XID, SXid, fallen off the bus, GSP timeouts, boot), as real
  driver lines in rsyslog's RFC 3339 shape (`2026-12-05T07:56:04.001234+00:00 gpu-9 kernel: NVRM: Xid (...)`,
  microseconds, the kernel's `[uptime]` when the line had one), first the driver's `GPU at PCI:...: GPU-...` and
  board-serial lines for every GPU known. A line read from the kernel log is written as it was read (from
  `NVRM:` on); an XID that NVML's event API reported is written as the driver's XID line. Each is read back
  (formats.kmsg, as replay will) before it is written: one that would not come back as the same event (kind,
  code, PCI id, message, detail, time, node) goes to events.jsonl instead.
- `events.jsonl`: every other event (NVML errors and events, the agent's health, an XID whose PCI id is not
  known, an event with no time), one JSON object a line with the event's fields (formats.fleettool_events).
  These are no kernel messages: written as kernel lines they would pass for what the driver said, have no
  place for the GPU index, UUID, code and detail, and need the kernel-log parser (which the live kmsg collector
  runs over /dev/kmsg) to trust userspace text; a file of their own keeps the kernel log a kernel log.

The writer takes what a collection returned (any object with `samples`, `events` and `gpus`, such as a
collector's Collected) without importing the collectors: recording sits below them. recording.own reads the
OpenMetrics file back.
"""

from __future__ import annotations

import datetime as dt
import gzip
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from fleettool.formats.fleettool_events import dump_event
from fleettool.formats.kmsg import KernelLogParser
from fleettool.metrics import METRICS, own_metric_name
from fleettool.model import Event, EventKind, GpuInfo, Sample

# the kinds of event that are kernel messages (formats.kmsg_body's records)
KERNEL_KINDS = frozenset(
    {
        EventKind.XID.value,
        EventKind.SXID.value,
        EventKind.FELL_OFF_BUS.value,
        EventKind.GSP_TIMEOUT.value,
        "gsp-rate-limit",
        "boot",
    }
)
GPU_INFO = "fleettool_gpu"  # the info family of the GPU inventory (its series: fleettool_gpu_info)


class Collection(Protocol):
    """What one collection returned (collectors.base.Collected has this shape)."""

    @property
    def samples(self) -> Sequence[Sample]: ...

    @property
    def events(self) -> Sequence[Event]: ...

    @property
    def gpus(self) -> Sequence[GpuInfo]: ...


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _fmt(v: float) -> str:
    if v != v:
        return "NaN"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return repr(v)


def kernel_stamp(ts: float) -> str:
    """Unix seconds -> an RFC 3339 stamp to the microsecond, rounded as the store rounds (whole microseconds)."""
    t = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=round(ts * 1e6))
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")


def kernel_text(e: Event) -> list[str] | None:
    """The kernel-log message(s) of an event that is a kernel message (without stamp and host), or None for an
    event that is not one, or one no driver line can carry (an XID without its PCI id)."""
    if e.kind not in KERNEL_KINDS:
        return None
    raw = e.raw
    i = raw.find("Linux version " if e.kind == "boot" else "NVRM:")
    if i < 0 and e.kind == EventKind.SXID.value and (j := raw.find("SXid (")) >= 0:
        i = raw.rfind("nvidia-", 0, j)  # the NVSwitch's device name before "SXid ("
    if i >= 0:
        body = raw[i:]
        up = e.detail.get("uptime")
        if isinstance(up, (int, float)) and not isinstance(up, bool):
            body = f"[{up:12.6f}] {body}"
        pci = e.pci_bus_id
        if e.kind == EventKind.FELL_OFF_BUS.value and pci and pci not in body.lower():
            # the driver's three-line message: its PCI id was on the first line, the event's raw is the last
            return [f"NVRM: The NVIDIA GPU {pci}.0", body]
        return [body]
    if e.kind == EventKind.XID.value and e.code is not None and e.pci_bus_id:
        # an XID NVML's event API reported: the line the driver prints for it
        return [f"NVRM: Xid (PCI:{e.pci_bus_id}): {e.code}, pid='<unknown>', name=<unknown>, {e.message}"]
    return None


def kernel_lines(e: Event) -> list[str] | None:
    """The whole kernel-log lines (stamp, host, message) of an event that is a kernel message, when they read
    back (formats.kmsg, as replay reads them) as this same event; else None (it is written as JSON)."""
    texts = kernel_text(e) if e.ts is not None else None
    if texts is None or e.ts is None:
        return None
    lines = [f"{kernel_stamp(e.ts)} {e.node} kernel: {t}" for t in texts]
    recs = list(KernelLogParser().feed_all(lines))
    back = recs[-1] if recs else None
    if back is None or back.host != e.node or kernel_stamp(back.ts or 0.0) != kernel_stamp(e.ts):
        return None
    same = (back.kind, back.code, back.pci_bus_id, back.message, back.detail)
    return lines if same == (e.kind, e.code, e.pci_bus_id, e.message, e.detail) else None


class RecordingWriter:
    def __init__(self, out: Path, node: str) -> None:
        self.out = out
        self.node = node
        self.series: dict[tuple[str, int | None, str | None, str], list[tuple[float, float]]] = defaultdict(
            list
        )
        self.events: list[Event] = []
        self.gpus: dict[int | None, GpuInfo] = {}  # by index: the labels of the series
        self.announced: dict[tuple[str | None, str | None], GpuInfo] = {}  # no index: the driver's lines

    def add(self, c: Collection) -> None:
        for s in c.samples:
            self.series[(s.metric, s.gpu, s.uuid, s.sub)].append((s.ts, s.value))
        for g in c.gpus:
            if g.gpu is not None:
                self.gpus[g.gpu] = g
            else:
                self.announced[(g.uuid, g.pci_bus_id)] = g
        self.events.extend(c.events)

    def _labels(self, gpu: int | None, uuid: str | None, sub: str) -> str:
        parts = [f'hostname="{_esc(self.node)}"']
        if gpu is not None:
            parts.append(f'gpu="{gpu}"')
            g = self.gpus.get(gpu)
            if uuid:
                parts.append(f'UUID="{_esc(uuid)}"')
            if g is not None and g.pci_bus_id:
                parts.append(f'pci_bus_id="{_esc(g.pci_bus_id)}"')
            if g is not None and g.model:
                parts.append(f'modelName="{_esc(g.model)}"')
            if g is not None and g.driver:
                parts.append(f'driver="{_esc(g.driver)}"')
        if sub:
            k, _, v = sub.partition("=")
            parts.append(f'{k}="{_esc(v)}"')
        return "{" + ",".join(parts) + "}"

    def _t0(self) -> float:
        """The recording's first instant: its first sample or event."""
        firsts = [pts[0][0] for pts in self.series.values() if pts]
        firsts += [e.ts for e in self.events if e.ts is not None]
        return min(firsts, default=0.0)

    def write(self) -> list[Path]:
        self.out.mkdir(parents=True, exist_ok=True)
        t0 = self._t0()
        paths = [self._write_openmetrics(t0)]
        kernel: list[tuple[float, list[str]]] = []
        own: list[Event] = []
        for e in self.events:
            lines = kernel_lines(e)
            if lines is None or e.ts is None:
                own.append(e)
            else:
                kernel.append((e.ts, lines))
        kernel.sort(key=lambda k: k[0])  # stable: a multi-line message keeps its order
        identity = self._identity_lines()
        if identity or kernel:
            log = self.out / "kernel.log"
            with open(log, "w", encoding="utf-8") as f:
                for text in identity:
                    f.write(f"{kernel_stamp(t0)} {self.node} kernel: {text}\n")
                for _, lines in kernel:
                    f.writelines(ln + "\n" for ln in lines)
            paths.append(log)
        if own:
            ev = self.out / "events.jsonl"
            with open(ev, "w", encoding="utf-8") as f:
                for e in sorted(own, key=lambda e: (e.ts is None, e.ts or 0.0)):
                    f.write(dump_event(e) + "\n")
            paths.append(ev)
        return paths

    def _identity_lines(self) -> list[str]:
        """The driver's announcement lines (PCI id -> UUID, then the board serial) for every GPU known."""
        known = sorted((g for g in self.gpus.values() if g.gpu is not None), key=lambda g: g.gpu or 0)
        uuids = {g.uuid for g in known}
        known += [g for g in self.announced.values() if g.uuid not in uuids]
        lines = []
        for g in known:
            if g.pci_bus_id and g.uuid:
                lines.append(f"NVRM: GPU at PCI:{g.pci_bus_id}: {g.uuid}")
                if g.serial:
                    lines.append(f"NVRM: GPU Board Serial Number: {g.serial}")
        return lines

    def _write_openmetrics(self, t0: float) -> Path:
        om = self.out / "nvml.om.gz"
        by_metric: dict[str, list[tuple[int | None, str | None, str]]] = defaultdict(list)
        for key in self.series:
            by_metric[key[0]].append(key[1:])
        with gzip.open(om, "wt", encoding="utf-8", compresslevel=6) as f:
            inventory = sorted((g for g in self.gpus.values() if g.gpu is not None), key=lambda g: g.gpu or 0)
            if inventory:
                f.write(f"# TYPE {GPU_INFO} info\n")
                f.write(
                    f"# HELP {GPU_INFO} One series per GPU of the node's inventory, with its identity labels\n"
                )
                for g in inventory:
                    f.write(f"{GPU_INFO}_info{self._labels(g.gpu, g.uuid, '')} 1 {t0:.3f}\n")
            for metric in sorted(by_metric):
                name = own_metric_name(metric)
                d = METRICS.get(metric)
                f.write(f"# TYPE {name} gauge\n")
                if d is not None:
                    f.write(f"# HELP {name} {d.help} ({d.unit}, {d.kind})\n")
                for gpu, uuid, sub in sorted(
                    by_metric[metric], key=lambda k: (k[0] is None, k[0] or 0, k[2])
                ):
                    lab = self._labels(gpu, uuid, sub)
                    for ts, v in self.series[(metric, gpu, uuid, sub)]:
                        f.write(f"{name}{lab} {_fmt(v)} {ts:.3f}\n")
            f.write("# EOF\n")
        return om
