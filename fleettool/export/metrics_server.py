"""Serve the agent's latest readings on /metrics (prometheus-client), under fleettool's own names.

Series are `fleettool_<metric>{hostname, gpu, UUID[, link|collector|mig]}`; every event kind/code is counted in
`fleettool_events_total{kind, code}` (XIDs are counted, not kept as a "last XID" gauge that never resets).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from fleettool.metrics import METRICS, own_metric_name

Latest = dict[tuple[str, int | None, str | None, str], float]
Counts = dict[tuple[str, int | None], int]


class AgentMetrics(Collector):
    def __init__(self, node: str, latest: Callable[[], Latest], counts: Callable[[], Counts]) -> None:
        self.node = node
        self.latest = latest
        self.counts = counts

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        fams: dict[str, tuple[GaugeMetricFamily, list[str]]] = {}
        for (metric, gpu, uuid, sub), value in sorted(
            self.latest().items(), key=lambda kv: (kv[0][0], kv[0][1] or -1, kv[0][3])
        ):
            sub_key, _, sub_val = sub.partition("=")
            labels = ["hostname", "gpu", "UUID"] + ([sub_key] if sub_key else [])
            name = own_metric_name(metric)
            key = name + "|" + ",".join(labels)
            if key not in fams:
                d = METRICS.get(metric)
                fams[key] = (GaugeMetricFamily(name, d.help if d else metric, labels=labels), labels)
            fam, _ = fams[key]
            vals = [self.node, "" if gpu is None else str(gpu), uuid or ""] + ([sub_val] if sub_key else [])
            fam.add_metric(vals, value)
        yield from (f for f, _ in fams.values())
        ev = CounterMetricFamily(
            "fleettool_events", "Events seen by the agent", labels=["hostname", "kind", "code"]
        )
        for (kind, code), n in sorted(self.counts().items(), key=lambda kv: (kv[0][0], kv[0][1] or -1)):
            ev.add_metric([self.node, kind, "" if code is None else str(code)], n)
        yield ev


def serve(port: int, addr: str, metrics: AgentMetrics) -> CollectorRegistry:
    from prometheus_client import start_http_server

    reg = CollectorRegistry()
    reg.register(metrics)
    start_http_server(port, addr=addr, registry=reg)
    return reg
