"""trend: a rising counter projected to its capacity (row remaps running out).

Over a trailing window of hourly maxima, the increase and the least-squares slope; the value is the projected
seconds until `capacity` is reached, and the finding turns critical when that is within `critical_within`.

    kind: trend
    metric: remap_correctable_rows
    window: 7d
    min_increase: 3
    capacity: 512
    horizon: 90d
    critical_within: 14d
"""

from __future__ import annotations

from fleettool.engine.kinds._base import Kind, KindResult, RuleLike
from fleettool.engine.kinds._promql import Names, PromAlert, dur, fills, num, scaled
from fleettool.engine.kinds._sql import run_obs_sql, src
from fleettool.store import Store

TREND_STALE_S = 3 * 3600.0  # hourly points: three missed hours


def evaluate(store: Store, r: RuleLike, start: float, end: float) -> KindResult:
    metric = r.p("metric")
    window = float(r.p("window", 7 * 86400.0))
    cap = float(r.p("capacity", 512))
    min_inc = float(r.p("min_increase", 3))
    horizon = float(r.p("horizon", 10 * 365 * 86400.0))
    ctes = src(metric) + (
        ", h AS (SELECT node, gpu, sub, time_bucket(INTERVAL 1 HOUR, ts) AS ts, max(value) AS value FROM src "
        "GROUP BY ALL)"
        f", w AS (SELECT node, gpu, sub, ts, value, "
        f"regr_slope(value, epoch(ts)) OVER win AS slope, value - min(value) OVER win AS inc, "
        f"count(*) OVER win AS n FROM h WINDOW win AS (PARTITION BY node, gpu, sub ORDER BY ts "
        f"RANGE BETWEEN INTERVAL {int(window)} SECOND PRECEDING AND CURRENT ROW))"
        f", t AS (SELECT *, CASE WHEN slope > 0 THEN ({cap} - value) / slope ELSE NULL END AS tte FROM w)"
    )
    cond = f"(inc >= {min_inc} AND slope > 0 AND n >= 6 AND tte IS NOT NULL AND tte <= {horizon})"
    select = f"SELECT node, gpu, sub AS key, ts, {cond} AS active, tte AS value FROM t"
    res = run_obs_sql(store, ctes, select, start, end, gap_s=TREND_STALE_S)
    crit = r.p("critical_within")
    for ent, obs in res.obs.items():
        last_active = [o for o in obs if o[1]]
        if last_active:
            tte = last_active[-1][2]
            ex = res.extra.setdefault(ent, {})
            ex["time_to_exhaustion_s"] = tte
            if crit is not None and tte is not None and tte <= float(crit):
                ex["severity"] = "critical"
    return res


def promql(r: RuleLike, names: Names) -> PromAlert:
    """The alert's value is the projected time to capacity in seconds, as in the engine (deriv() is the
    least-squares slope over the window; the engine's is over hourly maxima)."""
    s = names.series(r.p("metric"))
    w = dur(float(r.p("window", 7 * 86400)))
    slope = f"deriv({s.sel}[{w}])"
    tte = f"({scaled(s, r.p('capacity', 512))} - {s.sel}) / {slope}"
    if r.p("horizon") is not None:
        tte += f" <= {num(r.p('horizon'))}"
    f = fills(s, value=None)
    f["exhaustion"] = "{{ $value | humanizeDuration }}"
    return PromAlert(
        f"{tte} and increase({s.sel}[{w}]) >= {scaled(s, r.p('min_increase', 3))} and {slope} > 0", f
    )


KIND = Kind(
    stale_s=TREND_STALE_S,
    name="trend",
    fields=frozenset({"metric", "window", "min_increase", "capacity", "horizon", "critical_within"}),
    requires=("metric",),
    durations=frozenset({"window", "horizon", "critical_within"}),
    evaluate=evaluate,
    promql=promql,
)
