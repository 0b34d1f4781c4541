"""PromQL shared by the kinds, over one of two name sets: the agent's /metrics (`fleettool_<metric>`, base units) or
dcgm-exporter's own `DCGM_FI_*` series, for a fleet that runs dcgm-exporter alone.

Both label the node `Hostname` and a GPU `gpu` (dcgm-exporter's names, which the agent's /metrics follows). A kind's
PromQL form asks its name set for each metric's series (`Names.series`); a metric the name set does not have raises
`NotExpressible` with the reason, and so does a kind for a rule it cannot write in PromQL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# dcgm-exporter name -> (metric, scale): how fleettool itself reads dcgm-exporter (metrics.py has no public view of it)
from fleettool.metrics import _DCGM as DCGM_NAMES
from fleettool.metrics import prom_spec

NODE = "Hostname"  # the node label of both name sets (dcgm-exporter's; the agent's /metrics uses the same)
GPU_ON = f"{NODE}, gpu"  # what identifies one GPU in a vector match
# the label that carries a metric's sub-key on the agent's /metrics (model.Sample.sub "link=3" -> link="3")
SUB_LABELS = (
    ("nvlink_", "link"),
    ("agent_collector_", "collector"),
    ("ib_device_", "device"),
    ("nic_pcie_", "device"),
    ("ib_", "port"),
    ("net_", "netdev"),
)
# {Hostname, kind, code}: the event lines the agent has seen, per kind and code
EVENT_COUNTER = "fleettool_events_total"
# how long an event keeps its expression true; the rule's keep_firing_for holds the alert after that
EVENT_WINDOW = "10m"


class NotExpressible(Exception):  # noqa: N818 - a verdict on a rule, not an error of the program
    """This rule (or this metric) has no PromQL form in this name set; the message says why."""


@dataclass(frozen=True)
class Series:
    """A metric in one name set: its selector, the series' value per canonical unit (rule thresholds are in
    canonical units and get multiplied by it), and the label that carries the sub-key (link, collector), if any."""

    sel: str
    per_unit: float = 1.0
    sub: str | None = None


@dataclass(frozen=True)
class Names:
    """A name set the rules can be exported over: "fleettool" (the agent's /metrics) or "dcgm" (dcgm-exporter)."""

    name: str

    def series(self, metric: str) -> Series:
        if self.name == "fleettool":
            n, scale = prom_spec(metric)
            sub = next((lab for pre, lab in SUB_LABELS if metric.startswith(pre)), None)
            return Series(n, scale, sub)
        names = [n for n, (m, _) in DCGM_NAMES.items() if m == metric]
        if not names:
            raise NotExpressible(f"dcgm-exporter has no field for {metric}")
        scales = {DCGM_NAMES[n][1] for n in names}
        assert len(scales) == 1, f"{metric}: dcgm-exporter names with different units {names}"
        # DCGM 4 renamed fields and kept the old names as aliases; dcgm-exporter names a series after the field as
        # its counters CSV spells it, so both spellings are matched (one exists per GPU). NVLink totals are per GPU.
        sel = names[0] if len(names) == 1 else '{__name__=~"' + "|".join(names) + '"}'
        return Series(sel, 1.0 / scales.pop(), None)

    @property
    def events(self) -> str | None:
        """The counter of event lines per (node, kind, code), or None when this name set has none."""
        return EVENT_COUNTER if self.name == "fleettool" else None


FLEETTOOL = Names("fleettool")
DCGM = Names("dcgm")
NAME_SETS = {n.name: n for n in (FLEETTOOL, DCGM)}


def dur(s: float) -> str:
    """Seconds -> a Prometheus duration (the largest whole unit)."""
    s = int(round(s))
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if s and s % n == 0:
            return f"{s // n}{unit}"
    return f"{s}s"


def bits(expr: str, mask: int) -> str:
    """(x & mask) != 0 in PromQL, which has no bitwise operators: sum of per-bit tests floor(x / 2^b) % 2."""
    terms = [f"(floor({expr} / {1 << b}) % 2)" for b in range(64) if mask >> b & 1]
    return "(" + " + ".join(terms) + ") > 0"


def num(v: Any) -> str:
    f = float(v)
    return str(int(f)) if f.is_integer() else repr(f)


def scaled(s: Series, v: Any) -> str:
    """A threshold in the rule's (canonical) units -> the units of the series."""
    return num(float(v) * s.per_unit)


def first_appearance(sel: str, window: str = EVENT_WINDOW) -> str:
    """True for a counter series that has just appeared above zero. The agent creates a per-event counter at its
    first event, so a node's first XID is a series that starts at 1, and increase() over it is 0; this is the
    branch that fires for it. "Not there before" is no sample in the 5 minutes (Prometheus's lookback) before the
    window, read with last_over_time(): a plain `offset` stops at the stale marker a single failed scrape writes,
    and the series would page again 10 minutes later. tests/test_promtool_rules.py runs the cases in promtool."""
    return f"(({sel} unless last_over_time({sel}[5m] offset {window})) > 0)"


def in_codes(x: str, codes: list[int], open_above: int | None = None) -> str:
    """A filter keeping the samples of x whose value is one of `codes` (and any value above `open_above`):
    runs of consecutive codes become one range test (`x >= 1 <= 7`) to keep the expression short."""
    runs: list[tuple[int, int]] = []
    for c in sorted(set(codes)):
        if runs and c == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], c)
        else:
            runs.append((c, c))
    terms = [f"{x} == {a}" if a == b else f"{x} >= {a} <= {b}" for a, b in runs]
    if open_above is not None:
        terms.append(f"{x} > {open_above}")
    return "(" + " or ".join(terms) + ")"


# how an alert's value reads in a summary: %g keeps counts whole and small rates readable (0.025, not humanize's 25m)
VALUE = '{{ printf "%.6g" $value }}'
LABEL = "{{ $labels.%s }}"


@dataclass(frozen=True)
class PromAlert:
    """One Prometheus alerting rule a kind writes for a rule: its expression, and how each placeholder of the
    rule's summary reads in a Prometheus template (`fills`: node -> {{ $labels.Hostname }}, ...; a placeholder
    it has no fill for is dropped with the words that introduce it). `name`/`labels` replace the rule's own
    (the XID classes of the catalog policy are one Prometheus rule each)."""

    expr: str
    fills: dict[str, str]
    name: str | None = None
    labels: dict[str, str] | None = None


def only_sub(s: Series, sub: str | None) -> Series:
    """The series narrowed to one sub-series (a rule's `sub: "link=3"`): a label matcher on its sub-key label."""
    if sub is None:
        return s
    label, _, value = sub.partition("=")
    if s.sub != label:
        raise NotExpressible(f"the series {s.sel} carry no {label!r} label for sub: {sub}")
    matcher = f'{label}="{value}"'
    sel = s.sel[:-1] + ", " + matcher + "}" if s.sel.endswith("}") else s.sel + "{" + matcher + "}"
    return Series(sel, s.per_unit, s.sub)


def fills(s: Series | None, value: str | None = VALUE, gpu: bool = True) -> dict[str, str]:
    """The usual fills: the node and GPU labels, the sub-key's label, and the alert's value."""
    f = {"node": LABEL % NODE}
    if gpu:
        f["gpu"] = LABEL % "gpu"
    if s is not None and s.sub:
        f["key"] = LABEL % s.sub
    if value is not None:
        f["value"] = value
    return f
