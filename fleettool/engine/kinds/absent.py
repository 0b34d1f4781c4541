"""absent: a GPU whose series stop while the other GPUs of its node go on reporting (it fell off the bus, or its
exporter lost it): active from its last sample + `after` until the node's last sample.

    kind: absent
    metric: gpu_temp_c           # optional: any metric when left out
    after: 2m
"""

from __future__ import annotations

from fleettool.engine.kinds._base import Kind, KindResult, RuleLike
from fleettool.engine.kinds._sql import epoch, read, ts_param
from fleettool.store import Store


def evaluate(store: Store, r: RuleLike, start: float, end: float) -> KindResult:
    after = float(r.p("after", 120.0))
    metric = r.p("metric")
    where = f"AND metric = '{metric}'" if metric else ""
    rows = read(
        store,
        f"""WITH last AS (SELECT node, gpu, max(ts) AS t FROM samples WHERE gpu IS NOT NULL
                 AND ts BETWEEN $start AND $end {where} GROUP BY node, gpu),
               nl AS (SELECT node, max(t) AS t, count(*) AS n FROM last GROUP BY node)
            SELECT last.node, last.gpu, last.t AS t_gpu, nl.t AS t_node FROM last JOIN nl USING (node)
            WHERE nl.n >= 2 AND epoch(nl.t) - epoch(last.t) >= {after}""",
        {"start": ts_param(start), "end": ts_param(end)},
    )
    res = KindResult()
    for row in rows:
        a = epoch(row["t_gpu"])
        b = epoch(row["t_node"])
        ent = (row["node"], row["gpu"], "")
        res.obs[ent] = [(a + after, True, b - a), (b, True, b - a)]
        res.extra[ent] = {"last_sample": a, "silent_s": b - a}
    return res


KIND = Kind(
    name="absent",
    fields=frozenset({"metric", "after", "mode"}),
    durations=frozenset({"after"}),
    evaluate=evaluate,
    no_promql="a series that stops while its node's others go on is judged against the node in the store; "
    "PromQL's absent() sees only a series missing everywhere",
)
