"""peer: a GPU against its peers (the other GPUs of its node, or every GPU of the same model and driver in the
fleet), minute by minute, smoothed over `window`, only while the GPU is loaded (when_metric >= when_min).

    kind: peer
    metric: sm_clock_mhz
    scope: node                  # node | fleet
    below_fraction: 0.15         # and/or above_fraction
    window: 5m
    min_peers: 4
    when_metric: gpu_util_pct
    when_min: 80
"""

from __future__ import annotations

from fleettool.engine.kinds._base import Kind, KindResult, RuleLike
from fleettool.engine.kinds._promql import (
    GPU_ON,
    NODE,
    Names,
    NotExpressible,
    PromAlert,
    dur,
    fills,
    num,
    scaled,
)
from fleettool.engine.kinds._sql import SERIES_STALE_S, run_obs_sql, src
from fleettool.store import Store


def evaluate(store: Store, r: RuleLike, start: float, end: float) -> KindResult:
    metric = r.p("metric")
    window = float(r.p("window", 300.0))
    below = r.p("below_fraction")
    above = r.p("above_fraction")
    min_peers = int(r.p("min_peers", 4))
    scope = r.p("scope", "node")
    ctes = src(metric) + (
        ", m AS (SELECT node, gpu, time_bucket(INTERVAL 1 MINUTE, ts) AS ts, avg(value) AS value FROM src "
        "WHERE gpu IS NOT NULL GROUP BY ALL)"
    )
    if window > 60:
        ctes += (
            f", s AS (SELECT node, gpu, ts, avg(value) OVER (PARTITION BY node, gpu ORDER BY ts "
            f"RANGE BETWEEN INTERVAL {int(window)} SECOND PRECEDING AND CURRENT ROW) AS value FROM m)"
        )
    else:
        ctes += ", s AS (SELECT * FROM m)"  # one-minute points are already the smoothing asked for
    if scope == "fleet":
        ctes += (
            ", inv AS (SELECT node, gpu, any_value(coalesce(model, '?')) || '|' || any_value(coalesce(driver, '?')) "
            "AS grp FROM gpus WHERE gpu IS NOT NULL GROUP BY node, gpu)"
            ", sg AS (SELECT s.*, coalesce(inv.grp, '?') AS grp FROM s LEFT JOIN inv USING (node, gpu))"
            ", p AS (SELECT *, median(value) OVER (PARTITION BY grp, ts) AS med, "
            "count(*) OVER (PARTITION BY grp, ts) AS n FROM sg)"
        )
    else:
        ctes += (
            ", p AS (SELECT *, median(value) OVER (PARTITION BY node, ts) AS med, "
            "count(*) OVER (PARTITION BY node, ts) AS n FROM s)"
        )
    load = ""
    if r.p("when_metric"):
        ctes += (
            ", "
            + src(r.p("when_metric"), "ld")
            + (
                ", lm AS (SELECT node, gpu, time_bucket(INTERVAL 1 MINUTE, ts) AS ts, avg(value) AS lv FROM ld "
                "GROUP BY ALL)"
            )
        )
        ctes += ", p2 AS (SELECT p.*, lm.lv FROM p LEFT JOIN lm USING (node, gpu, ts))"
        load = f" AND coalesce(lv, 0) >= {float(r.p('when_min', 0))}"
        tbl = "p2"
    else:
        tbl = "p"
    conds = []
    if below is not None:
        conds.append(f"value < med * (1 - {float(below)})")
    if above is not None:
        conds.append(f"value > med * (1 + {float(above)})")
    cond = f"(n >= {min_peers} AND med > 0 AND ({' OR '.join(conds) or 'false'}){load})"
    select = f"SELECT node, gpu, '' AS key, ts, {cond} AS active, value / nullif(med, 0) AS value FROM {tbl}"
    return run_obs_sql(store, ctes, select, start, end)


def promql(r: RuleLike, names: Names) -> PromAlert:
    """Node scope: the GPU's smoothed value over its node's median, so the alert's value is the ratio the engine
    reports; with at least `min_peers` GPUs reporting on the node, and only while loaded."""
    if r.p("scope", "node") != "node":
        raise NotExpressible(
            "a fleet-scope peer groups GPUs by model and driver from the store's inventory (evaluated by fleettool)"
        )
    s = names.series(r.p("metric"))
    sm = f"avg_over_time({s.sel}[{dur(float(r.p('window', 300)))}])"
    ratio = f"{sm} / on({NODE}) group_left quantile by ({NODE}) (0.5, {sm})"
    conds = []
    if r.p("below_fraction") is not None:
        conds.append(f"{ratio} < {num(1 - float(r.p('below_fraction')))}")
    if r.p("above_fraction") is not None:
        conds.append(f"{ratio} > {num(1 + float(r.p('above_fraction')))}")
    if not conds:
        raise NotExpressible("neither below_fraction nor above_fraction: the rule never fires")
    e = " or ".join(f"({c})" for c in conds) if len(conds) > 1 else conds[0]
    e = f"({e}) and on({NODE}) count by ({NODE}) ({sm}) >= {int(r.p('min_peers', 4))}"
    if r.p("when_metric"):
        w = names.series(r.p("when_metric"))
        e = f"({e}) and on({GPU_ON}) {w.sel} >= {scaled(w, r.p('when_min', 0))}"
    return PromAlert(e, fills(s, value="{{ $value | humanizePercentage }}"))


KIND = Kind(
    stale_s=SERIES_STALE_S,
    name="peer",
    fields=frozenset(
        {
            "metric",
            "scope",
            "below_fraction",
            "above_fraction",
            "window",
            "min_peers",
            "when_metric",
            "when_min",
        }
    ),
    requires=("metric",),
    durations=frozenset({"window"}),
    evaluate=evaluate,
    promql=promql,
)
