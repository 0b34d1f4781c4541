"""SQL shared by the kinds: one metric's points from raw samples and rollups, the run-length encoding of a
condition per entity, and the one read of the store they all go through.

Every series kind yields rows (node, gpu, key, ts, active, value). Long series are run-length encoded in SQL
(gaps-and-islands) so Python sees only the start and end of each stretch where the condition held or did not,
which is all the state machine needs. Raw samples and 1-minute rollups are read together (rollups hold the
minutes whose raw samples retention dropped; they never overlap).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from fleettool.engine.kinds._base import KindResult
from fleettool.metrics import METRICS
from fleettool.store import Store


def ts_param(t: float) -> dt.datetime:
    """Unix seconds -> the naive UTC timestamp the store's columns hold."""
    return dt.datetime.fromtimestamp(t, tz=dt.timezone.utc).replace(tzinfo=None)


def epoch(v: Any) -> float:
    """A store timestamp (naive UTC) or a number -> unix seconds."""
    if isinstance(v, dt.datetime):
        return v.replace(tzinfo=dt.timezone.utc).timestamp()
    return float(v)


def read(store: Store, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Rows of a query with named $parameters (a rule's own SQL uses $start and $end)."""
    return store.query(sql, params)  # type: ignore[arg-type]  # DuckDB takes a mapping as it takes a list


def rollup_column(metric: str) -> str:
    """Which 1-minute rollup column stands for a metric's points: the max for counters and bitmasks (a count
    or a reason bit seen in the minute), else the mean."""
    return "vmax" if METRICS[metric].kind == "counter" or METRICS[metric].unit == "bitmask" else "vmean"


def src(metric: str, alias: str = "src", sub: str | None = None) -> str:
    """A CTE of one metric's points in [$start, $end] from raw samples and rollups; `sub` ("link=3") keeps one
    sub-series of it (a rule's `sub` field)."""
    agg = rollup_column(metric)
    m = metric.replace("'", "''")
    only = "" if sub is None else " AND sub = '" + sub.replace("'", "''") + "'"
    return (
        f"{alias} AS (SELECT ts, node, gpu, sub, value FROM samples WHERE metric = '{m}'{only} "
        f"AND ts BETWEEN $start AND $end UNION ALL SELECT minute AS ts, node, gpu, sub, {agg} AS value "
        f"FROM samples_1m WHERE metric = '{m}'{only} AND minute BETWEEN $start AND $end)"
    )


# a series with no point for this long has stopped (engine/state.py: a firing alert goes stale): three reads of
# the agent's slowest NVML tier (every 10 minutes), and well past a scrape interval or a minute rollup
SERIES_STALE_S = 1800.0


def cmp(expr: str, op: str, rhs: str) -> str:
    return f"({expr} {op} {rhs})"


_RLE = """
, o AS MATERIALIZED ({obs})
, hot AS (SELECT DISTINCT node, gpu, key FROM o WHERE active)
, oh AS (SELECT o.* FROM o SEMI JOIN hot ON o.node = hot.node AND o.gpu IS NOT DISTINCT FROM hot.gpu
         AND o.key = hot.key)
, c AS (SELECT *, coalesce(epoch(ts) - epoch(lag(ts) OVER w) >= {gap}, false) AS after_gap,
              coalesce(active <> lag(active) OVER w OR epoch(ts) - epoch(lag(ts) OVER w) >= {gap}, true) AS chg
        FROM oh
        WINDOW w AS (PARTITION BY node, gpu, key ORDER BY ts))
, g AS (SELECT *, sum(chg::INTEGER) OVER (PARTITION BY node, gpu, key ORDER BY ts) AS run FROM c)
SELECT node, gpu, key, any_value(active) AS active, min(ts) AS t0, max(ts) AS t1,
       arg_min(value, ts) AS v0, arg_max(value, ts) AS v1, max(value) AS vmax, bool_or(after_gap) AS after_gap
FROM g GROUP BY node, gpu, key, run ORDER BY node, gpu, key, t0
"""
# A gap of `gap` seconds or more (the series stopped) also ends a stretch, so the state machine sees it.
# Only entities where the condition held at least once are run-length encoded: in a healthy fleet that is a
# handful of GPUs, and the encoding (two window passes) is what costs.


def run_obs_sql(
    store: Store, ctes: str, obs_select: str, start: float, end: float, gap_s: float = SERIES_STALE_S
) -> KindResult:
    """Observations of `obs_select` (rows node, gpu, key, ts, active, value over the CTEs), run-length encoded;
    the peak value while active goes to extra["peak"]. A gap of `gap_s` or more between points ends a stretch,
    and the time of the point before it goes to extra["gaps"] (the series stopped there)."""
    sql = "WITH " + ctes + _RLE.format(obs=obs_select, gap=float(gap_s))
    res = KindResult()
    for row in read(store, sql, {"start": ts_param(start), "end": ts_param(end)}):
        active = row["active"]
        ent = (row["node"], row["gpu"], row["key"] or "")
        lst = res.obs.setdefault(ent, [])
        a, b = epoch(row["t0"]), epoch(row["t1"])
        if row["after_gap"] and lst:  # the series stopped after its previous point (engine/state.py: stale)
            res.extra.setdefault(ent, {}).setdefault("gaps", set()).add(lst[-1][0])
        lst.append((a, bool(active), row["v0"]))
        if b > a:
            lst.append((b, bool(active), row["v1"]))
        if active:
            ex = res.extra.setdefault(ent, {})
            vmax = row["vmax"]
            ex["peak"] = vmax if ex.get("peak") is None else max(ex["peak"], vmax)
    return res
