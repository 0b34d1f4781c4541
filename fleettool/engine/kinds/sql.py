"""sql: the escape hatch, a query over the store returning node, gpu, ts, active, value; $start and $end
bound the evaluation.

    kind: sql
    query: "SELECT node, gpu, ts, value > 3 AS active, value FROM samples WHERE metric = 'x' AND ts >= $start"
    needs_metric: x              # optional: the query's rows are points of this metric in [$start, $end] only,
                                 # so with none there it finds nothing and the agent skips it
                                 # (engine/prefilter.py, in the thresholds' one query)
"""

from __future__ import annotations

from fleettool.engine.kinds._base import Kind, KindResult, RuleLike
from fleettool.engine.kinds._sql import SERIES_STALE_S, run_obs_sql
from fleettool.store import Store


def evaluate(store: Store, r: RuleLike, start: float, end: float) -> KindResult:
    q = str(r.p("query"))
    select = f"SELECT node, gpu, coalesce(try_cast(NULL AS VARCHAR), '') AS key, ts, active, value FROM ({q})"
    return run_obs_sql(store, "dummy AS (SELECT 1)", select, start, end)


KIND = Kind(
    stale_s=SERIES_STALE_S,
    name="sql",
    fields=frozenset({"query", "needs_metric"}),
    requires=("query",),
    evaluate=evaluate,
    no_promql="a SQL query over the store",
)
