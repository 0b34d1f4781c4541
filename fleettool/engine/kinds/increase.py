"""increase and rate: a counter's increase over a trailing window (resets handled: a drop counts the new
value); rate is the increase per second, optionally per PCIe lane x generation.

    kind: rate
    metric: pcie_replay_total
    window: 5m
    op: ">"
    value: 10
    per_lane_gen: true           # rate only
    sub: "link=3"                # optional: one sub-series of the metric
    resets: ignore               # optional: a drop (a reset: new boot, counters cleared) counts 0, not its
                                 # new value (the IB port counters: a reset is no error); PromQL sums the
                                 # positive steps of the counter over a subquery instead of increase()
"""

from __future__ import annotations

from fleettool.engine.kinds._base import Kind, KindResult, RuleLike
from fleettool.engine.kinds._promql import Names, PromAlert, dur, fills, num, only_sub, scaled
from fleettool.engine.kinds._sql import SERIES_STALE_S, cmp, run_obs_sql, src
from fleettool.store import Store

RESET_STEP = "10s"  # the subquery step of `resets: ignore` in PromQL: at most the counters' read interval


def _evaluate(store: Store, r: RuleLike, start: float, end: float, per_second: bool) -> KindResult:
    metric = r.p("metric")
    window = float(r.p("window", 300.0))
    ctes = src(metric, sub=r.p("sub")) + (
        ", d AS (SELECT node, gpu, sub, ts, value, value - lag(value) OVER (PARTITION BY node, gpu, sub "
        "ORDER BY ts) AS dv FROM src)"
        ", inc AS (SELECT node, gpu, sub, ts, CASE WHEN dv IS NULL THEN 0 WHEN dv < 0 THEN "
        f"{'0' if r.p('resets') == 'ignore' else 'value'} ELSE dv END AS dv FROM d)"
        f", win AS (SELECT node, gpu, sub, ts, sum(dv) OVER (PARTITION BY node, gpu, sub ORDER BY ts "
        f"RANGE BETWEEN INTERVAL {int(window)} SECOND PRECEDING AND CURRENT ROW) AS v FROM inc)"
    )
    val = f"(v / {window})" if per_second else "v"
    if per_second and r.p("per_lane_gen"):
        # normalise by the link's lanes x generation: the GPU's widest/fastest link in the range (links change
        # rarely, and a per-GPU constant avoids an as-of join per point)
        ctes += ", " + src("pcie_link_width", "lw") + ", " + src("pcie_link_gen", "lg")
        ctes += (
            ", lwm AS (SELECT node, gpu, max(value) AS w FROM lw GROUP BY ALL)"
            ", lgm AS (SELECT node, gpu, max(value) AS g FROM lg GROUP BY ALL)"
            f", win2 AS (SELECT win.node, win.gpu, win.sub, win.ts, win.v / {window} / "
            "greatest(coalesce(lwm.w, 16) * coalesce(lgm.g, 4), 1) AS v FROM win "
            "LEFT JOIN lwm ON win.node = lwm.node AND win.gpu IS NOT DISTINCT FROM lwm.gpu "
            "LEFT JOIN lgm ON win.node = lgm.node AND win.gpu IS NOT DISTINCT FROM lgm.gpu)"
        )
        val = "v"
        src_tbl = "win2"
    else:
        src_tbl = "win"
    cond = cmp(val, r.p("op", ">"), repr(float(r.p("value", 0.0))))
    select = f"SELECT node, gpu, sub AS key, ts, {cond} AS active, {val} AS value FROM {src_tbl}"
    return run_obs_sql(store, ctes, select, start, end)


def evaluate_increase(store: Store, r: RuleLike, start: float, end: float) -> KindResult:
    return _evaluate(store, r, start, end, per_second=False)


def evaluate_rate(store: Store, r: RuleLike, start: float, end: float) -> KindResult:
    return _evaluate(store, r, start, end, per_second=True)


def _promql(r: RuleLike, names: Names, fn: str) -> PromAlert:
    """increase()/rate() over the counter. A GPU's counters (ECC, NVLink, PCIe) appear on /metrics at their running
    value when the agent starts, so a series that first appears above zero is history, not news, and counts 0, as
    in the engine; the agent's own counters start at 0. (Event counters, which appear at their first event, are
    the event kind's.)"""
    s = only_sub(names.series(r.p("metric")), r.p("sub"))
    e = f"{fn}({s.sel}[{dur(float(r.p('window', 300)))}])"
    if r.p("resets") == "ignore":  # the positive steps only: a reset adds nothing (RESET_STEP apart)
        e = f"sum_over_time(clamp_min({s.sel} - {s.sel} offset {RESET_STEP}, 0)[{dur(float(r.p('window', 300)))}:{RESET_STEP}])"
        if fn == "rate":
            e = f"({e} / {num(float(r.p('window', 300)))})"
    if fn == "rate" and r.p("per_lane_gen"):
        e = f"{e} / ({names.series('pcie_link_width').sel} * {names.series('pcie_link_gen').sel})"
    return PromAlert(f"{e} {r.p('op', '>')} {scaled(s, r.p('value', 0))}", fills(s))


def promql_increase(r: RuleLike, names: Names) -> PromAlert:
    return _promql(r, names, "increase")


def promql_rate(r: RuleLike, names: Names) -> PromAlert:
    return _promql(r, names, "rate")


INCREASE = Kind(
    stale_s=SERIES_STALE_S,
    name="increase",
    fields=frozenset({"metric", "op", "value", "window", "sub", "resets"}),
    requires=("metric",),
    durations=frozenset({"window"}),
    evaluate=evaluate_increase,
    promql=promql_increase,
)
RATE = Kind(
    stale_s=SERIES_STALE_S,
    name="rate",
    fields=frozenset({"metric", "op", "value", "window", "sub", "per_lane_gen", "resets"}),
    requires=("metric",),
    durations=frozenset({"window"}),
    evaluate=evaluate_rate,
    promql=promql_rate,
)
