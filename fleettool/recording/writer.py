"""Write a recording in the standard formats: OpenMetrics with timestamps for series, kernel-log text for
events, so any fleettool recording can also be backfilled into Prometheus (promtool tsdb create-blocks-from
openmetrics) or read by grep.

OpenMetrics wants each metric family's samples together, so series are collected in memory and written
grouped at the end (a node-hour at 8 GPUs is ~1 M samples, ~50 MB of Python objects).

The writer takes what a collection returned (any object with `samples`, `events` and `gpus`, such as a
collector's Collected) without importing the collectors: recording sits below them. recording.own reads the
file back.
"""

from __future__ import annotations

import gzip
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

from fleettool.metrics import METRICS, own_metric_name
from fleettool.model import Event, EventKind, GpuInfo, Sample


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


class RecordingWriter:
    def __init__(self, out: Path, node: str) -> None:
        self.out = out
        self.node = node
        self.series: dict[tuple[str, int | None, str | None, str], list[tuple[float, float]]] = defaultdict(
            list
        )
        self.events: list[tuple[float, str]] = []
        self.gpus: dict[int | None, GpuInfo] = {}

    def add(self, c: Collection) -> None:
        for s in c.samples:
            self.series[(s.metric, s.gpu, s.uuid, s.sub)].append((s.ts, s.value))
        for g in c.gpus:
            self.gpus[g.gpu] = g
        for e in c.events:
            if e.ts is None:
                continue
            if e.kind == EventKind.XID.value and e.code is not None:
                pci = e.pci_bus_id or "0000:00:00"
                line = f"NVRM: Xid (PCI:{pci}): {e.code}, pid='<unknown>', name=<unknown>, {e.message}"
            else:
                line = f"fleettool[{e.source or 'agent'}]: {e.kind}: {e.message}"
            self.events.append((e.ts, line))

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

    def write(self) -> list[Path]:
        self.out.mkdir(parents=True, exist_ok=True)
        om = self.out / "nvml.om.gz"
        by_metric: dict[str, list[tuple[int | None, str | None, str]]] = defaultdict(list)
        for key in self.series:
            by_metric[key[0]].append(key[1:])
        with gzip.open(om, "wt", encoding="utf-8", compresslevel=6) as f:
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
        paths = [om]
        log = self.out / "kernel.log"
        lines = []
        t0 = min((pts[0][0] for pts in self.series.values() if pts), default=None)
        if t0 is None:
            t0 = min((ts for ts, _ in self.events), default=0.0)
        for g in sorted((g for g in self.gpus.values() if g.gpu is not None), key=lambda g: g.gpu or 0):
            if g.pci_bus_id and g.uuid:
                lines.append((t0, f"NVRM: GPU at PCI:{g.pci_bus_id}: {g.uuid}"))
        lines.extend(sorted(self.events))
        if lines:
            with open(log, "w", encoding="utf-8") as f:
                for ts, text in lines:
                    stamp = datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S%z")
                    f.write(f"{stamp} {self.node} kernel: {text}\n")
            paths.append(log)
        return paths
