"""Serve the agent's latest readings on /metrics (prometheus-client), under fleettool's own names.

Series are `fleettool_<metric>{hostname, gpu, UUID[, link|collector|mig]}` in base units; counters are
exposed as counters with the `_total` suffix (fleettool_ecc_dbe_volatile_total); every event kind/code is counted
in `fleettool_events_total{kind, code}` (XIDs are counted, not kept as a "last XID" gauge that never resets);
open alerts are `fleettool_alerts{rule, severity, category, action, gpu}` = 1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from fleettool.metrics import METRICS, prom_spec

Latest = dict[tuple[str, int | None, str | None, str], float]
Counts = dict[tuple[str, int | None], int]


Alerts = list[dict[str, object]]


class AgentMetrics(Collector):
    def __init__(
        self,
        node: str,
        latest: Callable[[], Latest],
        counts: Callable[[], Counts],
        alerts: Callable[[], Alerts] | None = None,
    ) -> None:
        self.node = node
        self.latest = latest
        self.counts = counts
        self.alerts = alerts

    def collect(self) -> Iterator[Metric]:
        fams: dict[str, tuple[CounterMetricFamily | GaugeMetricFamily, list[str]]] = {}
        for (metric, gpu, uuid, sub), value in sorted(
            self.latest().items(), key=lambda kv: (kv[0][0], kv[0][1] or -1, kv[0][3])
        ):
            sub_key, _, sub_val = sub.partition("=")
            labels = ["hostname", "gpu", "UUID"] + ([sub_key] if sub_key else [])
            name, scale = prom_spec(metric)
            key = name + "|" + ",".join(labels)
            if key not in fams:
                d = METRICS.get(metric)
                helptext = f"{d.help} ({d.unit})" if d else metric
                if d is not None and d.kind == "counter":
                    base = name[: -len("_total")] if name.endswith("_total") else name
                    fam: CounterMetricFamily | GaugeMetricFamily = CounterMetricFamily(
                        base, helptext, labels=labels
                    )
                else:
                    fam = GaugeMetricFamily(name, helptext, labels=labels)
                fams[key] = (fam, labels)
            fam, _ = fams[key]
            vals = [self.node, "" if gpu is None else str(gpu), uuid or ""] + ([sub_val] if sub_key else [])
            fam.add_metric(vals, value * scale)
        yield from (f for f, _ in fams.values())
        ev = CounterMetricFamily(
            "fleettool_events", "Events seen by the agent", labels=["hostname", "kind", "code"]
        )
        for (kind, code), n in sorted(self.counts().items(), key=lambda kv: (kv[0][0], kv[0][1] or -1)):
            ev.add_metric([self.node, kind, "" if code is None else str(code)], n)
        yield ev
        if self.alerts is not None:
            al = GaugeMetricFamily(
                "fleettool_alerts",
                "Open (firing) alerts of this node: 1 per alert",
                labels=["hostname", "rule", "severity", "category", "action", "gpu"],
            )
            for a in self.alerts():
                al.add_metric(
                    [
                        self.node,
                        str(a["rule"]),
                        str(a["severity"]),
                        str(a["category"]),
                        str(a["action"]),
                        "" if a.get("gpu") is None else str(a["gpu"]),
                    ],
                    1.0,
                )
            yield al


def serve(port: int, addr: str, metrics: AgentMetrics) -> CollectorRegistry:
    from prometheus_client import start_http_server

    reg = CollectorRegistry()
    reg.register(metrics)
    start_http_server(port, addr=addr, registry=reg)
    return reg
