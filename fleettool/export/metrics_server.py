"""Serve the agent on its metrics port: /metrics (prometheus-client), /healthz and /readyz.

Series are `fleettool_<metric>` in base units; counters are exposed as counters with the `_total` suffix
(fleettool_ecc_dbe_volatile_total); every event kind/code is counted in `fleettool_events_total{kind, code}`
(XIDs are counted, not kept as a "last XID" gauge that never resets); open alerts are
`fleettool_alerts{rule, severity, category, action[, gpu]}` = 1; the store's incidents (fleettool/incidents/: one
per fault across GPUs and nodes) are counted in `fleettool_incidents{scope, severity, state}` (one series per
combination the store holds, resolved ones included, so a rate of new incidents can be read); the store's
remediation episodes still running or proving are `fleettool_remediations_in_progress{node, rung}` (a series
leaves when its episode ends).

Labels are dcgm-exporter's, so a Prometheus fed by both joins them on `Hostname` and `gpu` (or `UUID`) without
relabelling: a GPU's series carry `gpu`, `UUID`, `pci_bus_id` (as NVML and dcgm-exporter spell it,
`00000000:1A:00.0`), `device` (`nvidia0`), `modelName`, `Hostname` and `DCGM_FI_DRIVER_VERSION`, taken from the
GPU inventory the agent collected; node-level series (agent health, the GPU count, events) carry `Hostname`
only. A label whose value is unknown is left out, never written as "" (Prometheus reads both the same, but an
empty identity label reads as a GPU with no name). `fleettool_build_info` and `fleettool_gpu_info` are info
series (value 1) to join on, as `kube_pod_info` is used.

The port also answers the probes: GET /healthz and /readyz return 200 with one line saying why, or 503 with
the line saying what is wrong; the agent decides (fleettool/agent/health.py). Any other path is 404, so a
misspelt probe path fails instead of passing on the metrics page. How the port survives its clients (timeouts,
a connection cap, single-flight renders) is fleettool/export/http.py; TLS and basic auth, web_config.py.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from fleettool import __version__
from fleettool.export.http import HttpServer, Limits, Probe
from fleettool.export.web_config import WebConfig, check_password
from fleettool.metrics import METRICS, prom_spec
from fleettool.model import GpuInfo, canonical_pci_bus_id

Latest = dict[tuple[str, int | None, str | None, str], float]
Counts = dict[tuple[str, int | None], int]
Alerts = list[dict[str, object]]
IncidentCounts = Mapping[tuple[str, str, str], int]  # (scope, severity, state) -> incidents
RemediationCounts = Mapping[tuple[str, str], int]  # (node, rung) -> open remediation episodes
Gpus = Mapping[int, GpuInfo]

HOST = "Hostname"  # dcgm-exporter's node label (it has been `Hostname` in every release to 2025)
DRIVER = "DCGM_FI_DRIVER_VERSION"  # dcgm-exporter puts the driver version on each series under its field name


def dcgm_pci_bus_id(pci: str) -> str:
    """The store's PCI key (`0000:1a:00`) as NVML and dcgm-exporter print it (`00000000:1A:00.0`), so the
    label joins with dcgm-exporter's. A GPU is function 0 of its device (its audio or USB parts are .1 up)."""
    return canonical_pci_bus_id(pci) or pci


def gpu_labels(node: str, gpu: int, uuid: str | None, info: GpuInfo | None) -> dict[str, str]:
    """A GPU's identity labels, in dcgm-exporter's names; unknown values are left out."""
    if info is not None and uuid is not None and info.uuid is not None and info.uuid != uuid:
        info = None  # another GPU now answers at this index: its inventory row is not this series'
    lab = {"gpu": str(gpu)}
    if uuid or (info is not None and info.uuid):
        lab["UUID"] = str(uuid or (info.uuid if info else ""))
    if info is not None and info.pci_bus_id:
        lab["pci_bus_id"] = dcgm_pci_bus_id(info.pci_bus_id)
    lab["device"] = f"nvidia{gpu}"  # dcgm-exporter's: "nvidia" + the GPU's index, as /dev/nvidiaN
    if info is not None and info.model:
        lab["modelName"] = info.model
    lab[HOST] = node
    if info is not None and info.driver:
        lab[DRIVER] = info.driver
    return lab


class AgentMetrics(Collector):
    def __init__(
        self,
        node: str,
        latest: Callable[[], Latest],
        counts: Callable[[], Counts],
        alerts: Callable[[], Alerts] | None = None,
        gpus: Callable[[], Gpus] | None = None,
        incidents: Callable[[], IncidentCounts] | None = None,
        remediations: Callable[[], RemediationCounts] | None = None,
    ) -> None:
        self.node = node
        self.latest = latest
        self.counts = counts
        self.alerts = alerts
        self.gpus = gpus or dict
        self.incidents = incidents
        self.remediations = remediations

    def _labels(self, gpu: int | None, uuid: str | None, inv: Gpus) -> dict[str, str]:
        if gpu is not None:
            return gpu_labels(self.node, gpu, uuid, inv.get(gpu))
        lab = {HOST: self.node}
        if uuid:  # a GPU known by UUID only (no index): name it, nothing more
            lab["UUID"] = uuid
        return lab

    def collect(self) -> Iterator[Metric]:
        inv = dict(self.gpus())
        yield from self._build_info()
        yield from self._gpu_info(inv)
        fams: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
        for (metric, gpu, uuid, sub), value in sorted(
            self.latest().items(), key=lambda kv: (kv[0][0], -1 if kv[0][1] is None else kv[0][1], kv[0][3])
        ):
            name, scale = prom_spec(metric)
            fam = fams.get(name)
            if fam is None:
                d = METRICS.get(metric)
                helptext = f"{d.help} ({d.unit})" if d else metric
                if d is not None and d.kind == "counter":
                    base = name[: -len("_total")] if name.endswith("_total") else name
                    fam = fams[name] = CounterMetricFamily(base, helptext)
                else:
                    fam = fams[name] = GaugeMetricFamily(name, helptext)
            labels = self._labels(gpu, uuid, inv)
            sub_key, _, sub_val = sub.partition("=")
            if sub_key:
                labels[sub_key] = sub_val
            # the family's own sample name: a counter's is <name>_total
            sample = name if isinstance(fam, GaugeMetricFamily) else fam.name + "_total"
            fam.add_sample(sample, labels, value * scale)
        yield from fams.values()
        ev = CounterMetricFamily("fleettool_events", "Events seen by the agent")
        for (kind, code), n in sorted(self.counts().items(), key=lambda kv: (kv[0][0], kv[0][1] or -1)):
            lab = {HOST: self.node, "kind": kind}
            if code is not None:
                lab["code"] = str(code)
            ev.add_sample("fleettool_events_total", lab, n)
        yield ev
        if self.alerts is not None:
            al = GaugeMetricFamily("fleettool_alerts", "Open (firing) alerts of this node: 1 per alert")
            for a in self.alerts():
                lab = {HOST: self.node}
                lab.update({k: str(a[k]) for k in ("rule", "severity", "category", "action")})
                if a.get("gpu") is not None:
                    g = int(str(a["gpu"]))
                    lab.update(gpu_labels(self.node, g, None, inv.get(g)))
                al.add_sample("fleettool_alerts", lab, 1.0)
            yield al
        if self.incidents is not None:
            yield self._incidents(self.incidents())
        if self.remediations is not None:
            yield self._remediations(self.remediations())

    def _remediations(self, counts: RemediationCounts) -> Metric:
        rem = GaugeMetricFamily(
            "fleettool_remediations_in_progress",
            "Remediation episodes in the store still running or proving, by node and the rung now tried",
        )
        for (node, rung), n in sorted(counts.items()):
            rem.add_sample(
                "fleettool_remediations_in_progress", {HOST: self.node, "node": node, "rung": rung}, n
            )
        return rem

    def _incidents(self, counts: IncidentCounts) -> Metric:
        inc = GaugeMetricFamily(
            "fleettool_incidents",
            "Incidents in the store (faults folded across GPUs and nodes), by scope, severity and state",
        )
        for (scope, severity, state), n in sorted(counts.items()):
            lab = {HOST: self.node, "scope": scope, "severity": severity, "state": state}
            inc.add_sample("fleettool_incidents", lab, float(n))
        return inc

    def _build_info(self) -> Iterator[Metric]:
        info = InfoMetricFamily("fleettool_build", "The agent's version and the Python running it")
        info.add_metric(
            [],
            {
                "version": __version__,
                "python": platform.python_version(),
                "implementation": platform.python_implementation(),
                HOST: self.node,
            },
        )
        yield info

    def _gpu_info(self, inv: Gpus) -> Iterator[Metric]:
        info = InfoMetricFamily(
            "fleettool_gpu", "One series per GPU of the node's inventory, with its identity labels"
        )
        for gpu in sorted(inv):
            g = inv[gpu]
            lab = gpu_labels(self.node, gpu, g.uuid, g)
            if g.serial:
                lab["serial"] = g.serial
            info.add_metric([], lab)
        yield info


PROBE_PATHS = frozenset({"/healthz", "/readyz"})


def serve(
    port: int,
    addr: str,
    metrics: AgentMetrics,
    probes: Mapping[str, Probe] | None = None,
    limits: Limits | None = None,
    web: WebConfig | None = None,
) -> HttpServer:
    """Bind `addr:port` now (an OSError when it cannot be: the caller names the port) and answer on a daemon
    thread (fleettool/export/http.py: bounded connections, timeouts, single-flight renders). Returns the server
    (`shutdown()` stops it)."""
    from prometheus_client.exposition import choose_encoder

    probes = dict(probes or {})
    reg = CollectorRegistry()
    reg.register(metrics)
    server: HttpServer | None = None

    class _ServerCounts(Collector):
        def collect(self) -> Iterator[Metric]:
            if server is not None:
                yield from server.counts.metrics({HOST: metrics.node})

    reg.register(_ServerCounts())

    def render(accept: str) -> tuple[bytes, str]:
        encoder, ctype = choose_encoder(accept)
        return encoder(reg), ctype

    index = "fleettool agent " + __version__ + "\n" + "".join(f"{p}\n" for p in ("/metrics", *sorted(probes)))
    server = HttpServer(
        addr,
        port,
        render,
        probes,
        index.encode(),
        limits=limits,
        tls=web.tls if web else None,
        auth=web.auth if web else None,
        check_password=check_password,
    )
    return server
