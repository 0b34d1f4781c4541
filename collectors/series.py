"""OpenMetrics / Prometheus text -> samples: dcgm-exporter's DCGM_FI_* names and fleettool's own names.

The one series mapping of the house: the dcgm-exporter collector maps its scrapes through it, and replay maps
a recorded exposition (a saved scrape, a fleettool recording) through it, so both store the same rows. It
belongs to the collectors (they turn sources' bytes into records); the recording package below does not
import it.

Each distinct series is mapped once (name + labels -> metric, node, gpu, uuid, sub, scale); rows are then
built with Arrow `take` over the per-series arrays, and DCGM's not-supported sentinels are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fleettool.formats.openmetrics import Chunk, ExpositionParser, parse_stream
from fleettool.metrics import (
    DCGM_FP64_BLANK,
    DCGM_INT32_BLANK,
    METRICS,
    OWN_PREFIX,
    map_dcgm_name,
    own_name_spec,
)
from fleettool.model import GpuInfo, normalize_pci_bus_id
from fleettool.recording.files import iter_blocks

HOST_LABELS = ("Hostname", "hostname", "host", "node", "instance_hostname")
UUID_LABELS = ("UUID", "uuid", "gpu_uuid")


@dataclass
class SeriesMap:
    keep: list[bool] = field(default_factory=list)
    metric: list[str | None] = field(default_factory=list)
    node: list[str | None] = field(default_factory=list)
    gpu: list[int | None] = field(default_factory=list)
    uuid: list[str | None] = field(default_factory=list)
    sub: list[str] = field(default_factory=list)
    scale: list[float] = field(default_factory=list)
    int32: list[bool] = field(default_factory=list)
    gpus: dict[tuple[str, int | None, str | None], GpuInfo] = field(default_factory=dict)
    unknown_names: set[str] = field(default_factory=set)
    pods: set[tuple[str, int | None, str | None, str, str, str]] = field(default_factory=set)


GPU_INDEX_MAX = 1023  # a node's GPU index (NVML/DCGM ordinal); anything above is not one


def gpu_index(label: str | None) -> int | None:
    """The `gpu` label as a GPU index (0..GPU_INDEX_MAX), or None when absent or not one."""
    if label is None:
        return None
    g = label.strip()
    if not (g.isascii() and g.isdigit()) or len(g) > 4:
        return None
    v = int(g)
    return v if v <= GPU_INDEX_MAX else None


def map_series(
    name: str, labels: dict[str, str], default_node: str
) -> tuple[str | None, str, int | None, str | None, str, float, GpuInfo | None]:
    """One series -> (metric or None, node, gpu, uuid, sub, scale, gpu inventory row)."""
    metric: str | None = None
    scale = 1.0
    sub = ""
    if name.startswith("DCGM_"):
        hit = map_dcgm_name(name)
        if hit is not None:
            metric, scale, sub = hit
    elif name.startswith(OWN_PREFIX):
        spec = own_name_spec(name)  # recordings use fleettool_<metric>; a saved /metrics scrape, base units
        if spec is not None:
            metric, scale = spec[0], 1.0 / spec[1]
    node = default_node
    for k in HOST_LABELS:
        if labels.get(k):
            node = labels[k]
            break
    gpu = gpu_index(labels.get("gpu"))
    uuid = None
    for k in UUID_LABELS:
        if labels.get(k):
            uuid = labels[k]
            break
    if "link" in labels or "nvlink" in labels:
        sub = f"link={labels.get('link', labels.get('nvlink'))}"
    elif "collector" in labels:
        sub = f"collector={labels['collector']}"
    if labels.get("GPU_I_ID"):
        sub = f"mig={labels['GPU_I_ID']}" + (f"/{labels['GPU_CI_ID']}" if labels.get("GPU_CI_ID") else "")
    info = None
    if gpu is not None or uuid is not None:
        pci = labels.get("pci_bus_id")
        info = GpuInfo(
            node=node,
            gpu=gpu,
            uuid=uuid,
            pci_bus_id=normalize_pci_bus_id(pci) if pci else None,
            model=labels.get("modelName") or labels.get("model_name"),
            driver=labels.get("DCGM_FI_DRIVER_VERSION") or labels.get("driver"),
        )
    return metric, node, gpu, uuid, sub, scale, info


class MetricsIngest:
    """Turns parser chunks into Arrow tables in the samples layout."""

    def __init__(self, parser: ExpositionParser, default_node: str) -> None:
        self.parser = parser
        self.default_node = default_node
        self.map = SeriesMap()

    def _extend(self) -> None:
        names, labels = self.parser.series.names, self.parser.series.labels
        sm = self.map
        for i in range(len(sm.keep), len(names)):
            metric, node, gpu, uuid, sub, scale, info = map_series(names[i], labels[i], self.default_node)
            sm.keep.append(metric is not None)
            sm.metric.append(metric)
            sm.node.append(node)
            sm.gpu.append(gpu)
            sm.uuid.append(uuid)
            sm.sub.append(sub)
            sm.scale.append(scale)
            sm.int32.append(metric is not None and METRICS[metric].kind == "gauge")
            if metric is None:
                sm.unknown_names.add(names[i])
            if info is not None:
                sm.gpus.setdefault((info.node, info.gpu, info.uuid), info)
            lab = labels[i]
            g = lab.get("gpu")
            if g is not None and gpu is None and g.strip() != "":
                # one issue per series, at the line it first appears on; its samples are kept with no gpu
                # (the UUID, when there is one, still names the GPU)
                self.parser.report(
                    self.parser.series.lines[i] if i < len(self.parser.series.lines) else 1,
                    f"gpu label {g[:20]!r} of {names[i]} is not a GPU index (0..{GPU_INDEX_MAX}): "
                    "samples kept without a gpu",
                )
            if lab.get("pod"):  # dcgm-exporter's pod attribution (empty when the GPU is not allocated)
                sm.pods.add((node, gpu, uuid, lab.get("namespace", ""), lab["pod"], lab.get("container", "")))

    def table(self, chunk: Chunk) -> pa.Table:
        self._extend()
        sm = self.map
        sid = np.asarray(chunk.sid, dtype=np.int64)
        val = np.asarray(chunk.value, dtype=np.float64)
        ts = np.asarray(chunk.ts, dtype=np.float64)
        if len(sid) == 0:
            return _empty()
        keep = np.asarray(sm.keep, dtype=bool)[sid]
        scale = np.asarray(sm.scale, dtype=np.float64)[sid]
        int32 = np.asarray(sm.int32, dtype=bool)[sid]
        blank = (val >= DCGM_FP64_BLANK) | (
            int32 & (val >= DCGM_INT32_BLANK) & (val <= DCGM_INT32_BLANK + 15)
        )
        keep &= (
            ~blank & ~np.isnan(val) & np.isfinite(ts)
        )  # the parser checks timestamps; this is the backstop
        idx = pa.array(sid[keep])
        us = np.round(ts[keep] * 1e6).astype(np.int64)
        return pa.table(
            {
                "ts": pa.array(us, type=pa.timestamp("us")),
                "node": pc.take(pa.array(sm.node, pa.string()), idx),
                "gpu": pc.take(pa.array(sm.gpu, pa.int16()), idx),
                "uuid": pc.take(pa.array(sm.uuid, pa.string()), idx),
                "metric": pc.take(pa.array(sm.metric, pa.string()), idx),
                "sub": pc.take(pa.array(sm.sub, pa.string()), idx),
                "value": pa.array(val[keep] * scale[keep]),
            }
        )


def _empty() -> pa.Table:
    return pa.table(
        {
            "ts": pa.array([], pa.timestamp("us")),
            "node": pa.array([], pa.string()),
            "gpu": pa.array([], pa.int16()),
            "uuid": pa.array([], pa.string()),
            "metric": pa.array([], pa.string()),
            "sub": pa.array([], pa.string()),
            "value": pa.array([], pa.float64()),
        }
    )


def iter_metric_tables(
    path: Path, *, default_node: str, millis: bool | None, strict: bool, default_ts: float | None = None
) -> tuple[ExpositionParser, MetricsIngest, object]:
    """Returns (parser, ingest, generator of Arrow tables) for one file."""
    parser = ExpositionParser(str(path), millis=millis, strict=strict, default_ts=default_ts)
    ing = MetricsIngest(parser, default_node)

    def gen():  # type: ignore[no-untyped-def]
        for chunk in parse_stream(parser, iter_blocks(path)):
            yield ing.table(chunk)

    return parser, ing, gen()
