"""absent: a GPU whose series stop while the other GPUs of its node go on reporting (it fell off the bus, or its
exporter lost it): active from its last sample + `after` until the node's last sample, or until the GPU's
series come back, which ends the finding there (a proven return: no keep_firing_for after it).

    kind: absent
    metric: gpu_temp_c           # optional: any metric when left out
    after: 2m
"""

from __future__ import annotations

from typing import Any

from fleettool.engine.kinds._base import Kind, KindResult, RuleLike
from fleettool.engine.kinds._sql import epoch, read, ts_param
from fleettool.store import Store


def evaluate(store: Store, r: RuleLike, start: float, end: float) -> KindResult:
    after = float(r.p("after", 120.0))
    metric = r.p("metric")
    where = f"AND metric = '{metric}'" if metric else ""
    p = {"start": ts_param(start), "end": ts_param(end)}
    res = KindResult()
    for node, gpu in _suspects(store, where, after, p):
        for a, c in _silences(store, node, gpu, where, after, p):
            # the node's last sample from another GPU in the silence: it went on reporting without this one
            t = read(
                store,
                f"""SELECT max(ts) AS t FROM samples WHERE node = $node AND gpu IS NOT NULL AND gpu <> $gpu
                    AND ts > $a AND ts <= $b {where}""",
                {"node": node, "gpu": gpu, "a": ts_param(a), "b": ts_param(end if c is None else c)},
            )[0]["t"]
            b = epoch(t) if t is not None else a
            if c is not None and b >= c:
                b = c - 1e-3
            if b - a < after:  # the node went quiet too: the GPU was not alone in its silence
                continue
            ent = (node, gpu, "")
            obs = res.obs.setdefault(ent, [])
            obs += [(a + after, True, b - a), (b, True, b - a)]
            ex = res.extra.setdefault(ent, {})
            ex.update(last_sample=a, silent_s=b - a)
            ex.pop("back_at", None)
            if c is not None:  # its series came back: the silence ends there
                obs += [(c, True, c - a), (c, False, None)]
                ex.update(keep_s=0.0, back_at=c)
    return res


def _suspects(store: Store, where: str, after: float, p: dict[str, Any]) -> list[tuple[str, int]]:
    """GPUs that may have a silence of `after` or more in the window: missing from a bucket of after/2 in which
    their node reported, or silent at its end (one aggregation over the window; exact check per suspect)."""
    rows = read(
        store,
        f"""WITH b AS (SELECT node, gpu, floor(epoch(ts) / {after / 2}) AS b, max(ts) AS t FROM samples
                 WHERE gpu IS NOT NULL AND ts BETWEEN $start AND $end {where} GROUP BY ALL),
               g AS (SELECT node, gpu, count(*) AS nb, max(t) AS t FROM b GROUP BY node, gpu),
               nd AS (SELECT node, count(DISTINCT b) AS nb, max(t) AS t, count(DISTINCT gpu) AS n FROM b
                 GROUP BY node)
            SELECT g.node, g.gpu FROM g JOIN nd USING (node)
            WHERE nd.n >= 2 AND (g.nb < nd.nb OR epoch(nd.t) - epoch(g.t) >= {after})
            ORDER BY g.node, g.gpu""",
        p,
    )
    return [(x["node"], x["gpu"]) for x in rows]


def _silences(
    store: Store, node: str, gpu: int, where: str, after: float, p: dict[str, Any]
) -> list[tuple[float, float | None]]:
    """(last sample before, first sample after: None while still silent) of each gap of `after` or more."""
    rows = read(
        store,
        f"""SELECT a, c FROM (SELECT ts AS a, lead(ts) OVER (ORDER BY ts) AS c FROM (SELECT DISTINCT ts
                 FROM samples WHERE node = $node AND gpu = $gpu AND ts BETWEEN $start AND $end {where}))
            WHERE c IS NULL OR epoch(c) - epoch(a) >= {after} ORDER BY a""",
        {**p, "node": node, "gpu": gpu},
    )
    return [(epoch(x["a"]), None if x["c"] is None else epoch(x["c"])) for x in rows]


KIND = Kind(
    name="absent",
    fields=frozenset({"metric", "after"}),
    durations=frozenset({"after"}),
    evaluate=evaluate,
    no_promql="a series that stops while its node's others go on is judged against the node in the store; "
    "PromQL's absent() sees only a series missing everywhere",
)
