"""threshold: a gauge against a value, against another metric (plus an offset), or a bitmask of reasons.

kind: threshold
metric: clock_event_reasons
bitmask_any: 0x60            # or: op: ">", value: 85   or: op: ">", than_metric: ..., value: offset
sub: "link=3"                # optional: one sub-series of the metric (one NVLink, one collector)
"""

from __future__ import annotations

from fleettool.engine.kinds._base import Kind, KindResult, RuleLike
from fleettool.engine.kinds._promql import Names, PromAlert, bits, fills, only_sub, scaled
from fleettool.engine.kinds._sql import SERIES_STALE_S, cmp, run_obs_sql, src
from fleettool.store import Store


def evaluate(store: Store, r: RuleLike, start: float, end: float) -> KindResult:
    metric = r.p("metric")
    ctes = src(metric, sub=r.p("sub"))
    if r.p("bitmask_any") is not None:
        mask = int(r.p("bitmask_any"))
        cond = f"((src.value::BIGINT & {mask}) <> 0)"
        select = (
            "SELECT src.node, src.gpu, src.sub AS key, src.ts, " + cond + " AS active, src.value FROM src"
        )
    elif r.p("than_metric") is not None:
        ctes += ", " + src(r.p("than_metric"), "other")
        off = float(r.p("value", 0.0))
        cond = cmp("src.value", r.p("op", ">"), f"(other.value + {off})")
        select = (
            "SELECT src.node, src.gpu, src.sub AS key, src.ts, coalesce(" + cond + ", false) AS active, "
            "src.value FROM src ASOF LEFT JOIN other ON src.node = other.node "
            "AND src.gpu IS NOT DISTINCT FROM other.gpu AND src.sub = other.sub AND src.ts >= other.ts"
        )
    else:
        cond = cmp("src.value", r.p("op", ">"), repr(float(r.p("value", 0.0))))
        select = (
            "SELECT src.node, src.gpu, src.sub AS key, src.ts, " + cond + " AS active, src.value FROM src"
        )
    return run_obs_sql(store, ctes, select, start, end)


def promql(r: RuleLike, names: Names) -> PromAlert:
    """The alert's value is the metric's: for a bitmask rule, the reasons bitmask (in decimal: Prometheus's
    templates cannot print a number in hex)."""
    s = only_sub(names.series(r.p("metric")), r.p("sub"))
    op = r.p("op", ">")
    if r.p("bitmask_any") is not None:
        f = fills(s)
        f["value_hex"] = "{{ $value }}"
        return PromAlert(f"{s.sel} and {bits(s.sel, int(r.p('bitmask_any')))}", f)
    if r.p("than_metric"):
        off = float(r.p("value", 0))
        o = names.series(r.p("than_metric"))
        rhs = o.sel if off == 0 else f"({o.sel} + {scaled(s, off)})"
        return PromAlert(f"{s.sel} {op} {rhs}", fills(s))
    return PromAlert(f"{s.sel} {op} {scaled(s, r.p('value', 0))}", fills(s))


KIND = Kind(
    stale_s=SERIES_STALE_S,
    name="threshold",
    fields=frozenset({"metric", "op", "value", "than_metric", "bitmask_any", "sub"}),
    requires=("metric",),
    evaluate=evaluate,
    promql=promql,
)
