"""absent: a GPU whose series stop while the other GPUs of its node go on reporting (it fell off the bus, or its
exporter lost it): active from its last sample + `after` until the node's last sample, or until the GPU's
series come back, which ends the finding there (a proven return: no keep_firing_for after it).

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
    # each silence of a GPU (a gap of `after` or more between its samples, or since its last one) while its
    # node's other GPUs went on reporting: its start, its end (NULL: still silent) and the node's last sample
    # in it. Only GPUs with a silence are read twice.
    rows = read(
        store,
        f"""WITH s AS (SELECT DISTINCT node, gpu, ts FROM samples WHERE gpu IS NOT NULL
                 AND ts BETWEEN $start AND $end {where}),
               nl AS (SELECT node, max(ts) AS t, count(DISTINCT gpu) AS n FROM s GROUP BY node),
               l AS (SELECT node, gpu, ts AS a, lead(ts) OVER (PARTITION BY node, gpu ORDER BY ts) AS c FROM s),
               gap AS (SELECT l.node, l.gpu, l.a, l.c FROM l JOIN nl USING (node)
                 WHERE nl.n >= 2 AND epoch(coalesce(l.c, nl.t)) - epoch(l.a) >= {after})
            SELECT gap.node, gap.gpu, gap.a AS t_gpu, gap.c AS t_back,
                   (SELECT max(o.ts) FROM s o WHERE o.node = gap.node AND o.gpu <> gap.gpu AND o.ts > gap.a
                    AND (gap.c IS NULL OR o.ts < gap.c)) AS t_node
            FROM gap ORDER BY gap.node, gap.gpu, gap.a""",
        {"start": ts_param(start), "end": ts_param(end)},
    )
    res = KindResult()
    for row in rows:
        if row["t_node"] is None:
            continue
        a, b = epoch(row["t_gpu"]), epoch(row["t_node"])
        if b - a < after:  # the node went quiet too: the GPU was not alone in its silence
            continue
        ent = (row["node"], row["gpu"], "")
        obs = res.obs.setdefault(ent, [])
        obs += [(a + after, True, b - a), (b, True, b - a)]
        ex = res.extra.setdefault(ent, {})
        ex.update(last_sample=a, silent_s=b - a)
        if row["t_back"] is not None:  # its series came back: the silence ends there
            c = epoch(row["t_back"])
            obs += [(c, True, c - a), (c, False, None)]  # silent until then
            ex["keep_s"] = 0.0
            ex["back_at"] = epoch(row["t_back"])
        else:
            ex.pop("back_at", None)
    return res


KIND = Kind(
    name="absent",
    fields=frozenset({"metric", "after", "mode"}),
    durations=frozenset({"after"}),
    evaluate=evaluate,
    no_promql="a series that stops while its node's others go on is judged against the node in the store; "
    "PromQL's absent() sees only a series missing everywhere",
)
