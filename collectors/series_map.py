"""Series mapping without Arrow: each distinct exposition series (name + labels) -> metric, node, GPU, UUID,
sub and scale, mapped once. The dcgm-exporter collector maps its scrapes with it in pure Python (the agent loads
no pyarrow); collectors.series builds replay's Arrow tables on top of the same map.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fleettool.formats.ib_sysfs import LEGACY_WIDTHS, WIDE_MAXIMA
from fleettool.formats.openmetrics_lines import ExpositionParser
from fleettool.metrics import (
    DCGM_FP64_BLANK,
    DCGM_INT32_BLANK,
    METRICS,
    OWN_PREFIX,
    map_dcgm_name,
    own_name_spec,
)
from fleettool.metrics_fabric import NODE_EXPORTER_NAMES
from fleettool.model import GpuInfo, Sample, normalize_pci_bus_id

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
    # an IB counter at its width's maximum is saturated: a value >= ceiling, or == pinned (NaN: none)
    ceiling: list[float] = field(default_factory=list)
    pinned: list[float] = field(default_factory=list)
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
    elif name in NODE_EXPORTER_NAMES:
        metric, scale, _ = NODE_EXPORTER_NAMES[name]
        if labels.get("port") and labels.get("device"):
            sub = f"port={labels['device']}/{labels['port']}"  # fabric_samples.port_sub's form
        elif labels.get("device"):
            sub = f"netdev={labels['device']}"
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
    if sub.startswith(("port=", "netdev=")):
        pass
    elif "link" in labels or "nvlink" in labels:
        sub = f"link={labels.get('link', labels.get('nvlink'))}"
    elif "collector" in labels:
        sub = f"collector={labels['collector']}"
    elif metric is not None and metric.startswith(
        ("ib_", "nic_", "net_")
    ):  # the fabric's sub-keys (metrics_fabric)
        key = next((k for k in ("port", "device", "netdev") if labels.get(k)), None)
        if key is not None:
            sub = f"{key}={labels[key]}"
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


PodKey = tuple[str, int | None, str | None, str, str, str]  # node, gpu, uuid, namespace, pod, container


@dataclass(frozen=True, slots=True)
class MappedSeries:
    """One series, mapped: `metric` None when fleettool has no metric for it (the series is not stored)."""

    metric: str | None
    node: str
    gpu: int | None
    uuid: str | None
    sub: str
    scale: float
    int32: bool  # an integer DCGM field: its not-supported sentinels are 0x7FFFFFF0.. (a gauge)
    info: GpuInfo | None
    pod: PodKey | None
    ceiling: float = math.inf  # an IB counter at its width's maximum (saturated) is unknown, not a sample
    pinned: float = math.nan


def saturation(name: str) -> tuple[float, float]:
    """(ceiling, pinned) of an exposition series that reads a sysfs IB counter (node_exporter's): a legacy
    PortCounters value at 2**width-1 or above, or a wider counter at exactly 2**32-1 or 2**64-1, stopped counting
    (formats.ib_sysfs.is_saturated). (inf, NaN) for every other series."""
    hit = NODE_EXPORTER_NAMES.get(name)
    if hit is None or hit[2] is None:
        return math.inf, math.nan
    width = LEGACY_WIDTHS.get(hit[2].split("/", 1)[1]) if hit[2].startswith("counters/") else None
    if width is not None:
        return float((1 << width) - 1), math.nan
    return float(WIDE_MAXIMA[1]), float(WIDE_MAXIMA[0])


def map_one(parser: ExpositionParser, i: int, default_node: str) -> MappedSeries:
    """The parser's series `i` mapped; a `gpu` label that is no GPU index is reported once, at its first line."""
    name, lab = parser.series.names[i], parser.series.labels[i]
    metric, node, gpu, uuid, sub, scale, info = map_series(name, lab, default_node)
    g = lab.get("gpu")
    if g is not None and gpu is None and g.strip() != "":
        # one issue per series, at the line it first appears on; its samples are kept with no gpu (the UUID,
        # when there is one, still names the GPU)
        parser.report(
            parser.series.lines[i] if i < len(parser.series.lines) else 1,
            f"gpu label {g[:20]!r} of {name} is not a GPU index (0..{GPU_INDEX_MAX}): samples kept without a gpu",
        )
    pod = None
    if lab.get("pod"):  # dcgm-exporter's pod attribution (empty when the GPU is not allocated)
        pod = (node, gpu, uuid, lab.get("namespace", ""), lab["pod"], lab.get("container", ""))
    int32 = metric is not None and METRICS[metric].kind == "gauge"
    return MappedSeries(metric, node, gpu, uuid, sub, scale, int32, info, pod, *saturation(name))


class SeriesMapper:
    """The parser's series, each mapped once as it first appears (`map`, index = series id)."""

    def __init__(self, parser: ExpositionParser, default_node: str) -> None:
        self.parser = parser
        self.default_node = default_node
        self.map = SeriesMap()

    def _extend(self) -> None:
        sm = self.map
        for i in range(len(sm.keep), len(self.parser.series.names)):
            m = map_one(self.parser, i, self.default_node)
            sm.keep.append(m.metric is not None)
            sm.metric.append(m.metric)
            sm.node.append(m.node)
            sm.gpu.append(m.gpu)
            sm.uuid.append(m.uuid)
            sm.sub.append(m.sub)
            sm.scale.append(m.scale)
            sm.int32.append(m.int32)
            sm.ceiling.append(m.ceiling)
            sm.pinned.append(m.pinned)
            if m.metric is None:
                sm.unknown_names.add(self.parser.series.names[i])
            if m.info is not None:
                sm.gpus.setdefault((m.info.node, m.info.gpu, m.info.uuid), m.info)
            if m.pod is not None:
                sm.pods.add(m.pod)


def is_blank(m: MappedSeries, value: float) -> bool:
    """DCGM's not-supported sentinels (and NaN), and an IB counter stuck at its width's maximum (saturated): such a
    sample means "no value", not a reading."""
    return (
        value != value  # NaN
        or value >= DCGM_FP64_BLANK
        or (m.int32 and DCGM_INT32_BLANK <= value <= DCGM_INT32_BLANK + 15)
        or value >= m.ceiling
        or value == m.pinned
    )


@dataclass
class Scrape:
    """One scrape mapped: its samples, the GPUs and pod uses it names, and how many lines were bad."""

    samples: list[Sample]
    gpus: list[GpuInfo]
    pods: list[PodKey]
    errors: int


class ScrapeMapper:
    """dcgm-exporter scrapes -> samples, in pure Python (no numpy, no Arrow: the agent's hot path).

    The parser and the per-series map live across scrapes, so a series' labels are parsed and mapped once,
    on the scrape it first appears in; each later scrape costs a dict lookup and two float parses per line.
    Past `max_series` distinct series (label churn: pods coming and going) both start afresh.
    """

    def __init__(self, node: str, source: str, *, max_series: int = 50_000) -> None:
        self.node = node
        self.source = source
        self.max_series = max_series
        self._fresh()

    def _fresh(self) -> None:
        self.parser = ExpositionParser(self.source, millis=None, strict=False)
        self.mapped: list[MappedSeries] = []

    def map(self, body: bytes, now: float) -> Scrape:
        if len(self.mapped) > self.max_series:
            self._fresh()
        p = self.parser
        p.default_ts, p.lineno, p.issues, p.saw_eof = now, 0, [], False
        chunk = p.feed(body.decode("utf-8", "replace").splitlines())
        mapped = self.mapped
        for i in range(len(mapped), len(p.series.names)):
            mapped.append(map_one(p, i, self.node))
        samples: list[Sample] = []
        add = samples.append
        seen: set[int] = set()
        for sid, ts, v in zip(chunk.sid, chunk.ts, chunk.value, strict=True):
            m = mapped[sid]
            seen.add(sid)
            if m.metric is None or is_blank(m, v):
                continue
            add(Sample(ts, m.node, m.gpu, m.uuid, m.metric, v * m.scale, m.sub))
        gpus: dict[tuple[str, int | None, str | None], GpuInfo] = {}
        pods: set[PodKey] = set()
        for sid in seen:
            m = mapped[sid]
            if m.info is not None:
                gpus.setdefault((m.info.node, m.info.gpu, m.info.uuid), m.info)
            if m.pod is not None:
                pods.add(m.pod)
        return Scrape(samples, list(gpus.values()), sorted(pods, key=str), len(p.issues))
