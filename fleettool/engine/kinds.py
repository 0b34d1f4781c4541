"""Each rule kind as SQL over the store: observations per entity (node, gpu, key) in event time.

Every kind yields rows (node, gpu, key, ts, active, value). Long series are run-length encoded in SQL
(gaps-and-islands) so Python sees only the start and end of each stretch where the condition held or did not,
which is all the state machine needs. Raw samples and 1-minute rollups are read together (rollups hold the
minutes whose raw samples retention dropped; they never overlap).
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from fleettool.engine.rules import Rule
from fleettool.metrics import METRICS
from fleettool.store import Store

Entity = tuple[str, int | None, str]  # node, gpu, key
Obs = list[tuple[float, bool, float | None]]


@dataclass
class KindResult:
    obs: dict[Entity, Obs] = field(default_factory=dict)
    extra: dict[Entity, dict[str, Any]] = field(default_factory=dict)  # evidence and per-entity overrides


def _ts(t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(t, tz=dt.timezone.utc).replace(tzinfo=None)


def _src(metric: str, alias: str = "src") -> str:
    """A CTE of one metric's points in [$start, $end] from raw samples and rollups."""
    agg = "vmax" if METRICS[metric].kind == "counter" or METRICS[metric].unit == "bitmask" else "vmean"
    m = metric.replace("'", "''")
    return (
        f"{alias} AS (SELECT ts, node, gpu, sub, value FROM samples WHERE metric = '{m}' "
        f"AND ts BETWEEN $start AND $end UNION ALL SELECT minute AS ts, node, gpu, sub, {agg} AS value "
        f"FROM samples_1m WHERE metric = '{m}' AND minute BETWEEN $start AND $end)"
    )


_RLE = """
, o AS MATERIALIZED ({obs})
, hot AS (SELECT DISTINCT node, gpu, key FROM o WHERE active)
, oh AS (SELECT o.* FROM o SEMI JOIN hot ON o.node = hot.node AND o.gpu IS NOT DISTINCT FROM hot.gpu
         AND o.key = hot.key)
, c AS (SELECT *, coalesce(active <> lag(active) OVER w, true) AS chg FROM oh
        WINDOW w AS (PARTITION BY node, gpu, key ORDER BY ts))
, g AS (SELECT *, sum(chg::INTEGER) OVER (PARTITION BY node, gpu, key ORDER BY ts) AS run FROM c)
SELECT node, gpu, key, any_value(active) AS active, min(ts) AS t0, max(ts) AS t1,
       arg_min(value, ts) AS v0, arg_max(value, ts) AS v1, max(value) AS vmax
FROM g GROUP BY node, gpu, key, run ORDER BY node, gpu, key, t0
"""
# Only entities where the condition held at least once are run-length encoded: in a healthy fleet that is a
# handful of GPUs, and the encoding (two window passes) is what costs.


def _epoch(v: Any) -> float:
    if isinstance(v, dt.datetime):
        return v.replace(tzinfo=dt.timezone.utc).timestamp()
    return float(v)


def run_obs_sql(store: Store, ctes: str, obs_select: str, start: float, end: float) -> KindResult:
    sql = "WITH " + ctes + _RLE.format(obs=obs_select)
    rows = store.con.execute(sql, {"start": _ts(start), "end": _ts(end)}).fetchall()
    res = KindResult()
    for node, gpu, key, active, t0, t1, v0, v1, vmax in rows:
        ent = (node, gpu, key or "")
        lst = res.obs.setdefault(ent, [])
        a, b = _epoch(t0), _epoch(t1)
        lst.append((a, bool(active), v0))
        if b > a:
            lst.append((b, bool(active), v1))
        if active:
            ex = res.extra.setdefault(ent, {})
            ex["peak"] = vmax if ex.get("peak") is None else max(ex["peak"], vmax)
    return res


def _cmp(expr: str, op: str, rhs: str) -> str:
    return f"({expr} {op} {rhs})"


def threshold(store: Store, r: Rule, start: float, end: float) -> KindResult:
    metric = r.p("metric")
    ctes = _src(metric)
    if r.p("bitmask_any") is not None:
        mask = int(r.p("bitmask_any"))
        cond = f"((src.value::BIGINT & {mask}) <> 0)"
        select = (
            "SELECT src.node, src.gpu, src.sub AS key, src.ts, " + cond + " AS active, src.value FROM src"
        )
    elif r.p("than_metric") is not None:
        ctes += ", " + _src(r.p("than_metric"), "other")
        off = float(r.p("value", 0.0))
        cond = _cmp("src.value", r.p("op", ">"), f"(other.value + {off})")
        select = (
            "SELECT src.node, src.gpu, src.sub AS key, src.ts, coalesce(" + cond + ", false) AS active, "
            "src.value FROM src ASOF LEFT JOIN other ON src.node = other.node "
            "AND src.gpu IS NOT DISTINCT FROM other.gpu AND src.sub = other.sub AND src.ts >= other.ts"
        )
    else:
        cond = _cmp("src.value", r.p("op", ">"), repr(float(r.p("value", 0.0))))
        select = (
            "SELECT src.node, src.gpu, src.sub AS key, src.ts, " + cond + " AS active, src.value FROM src"
        )
    return run_obs_sql(store, ctes, select, start, end)


def increase(store: Store, r: Rule, start: float, end: float, per_second: bool = False) -> KindResult:
    """Counter increase (resets handled: a drop counts the new value) over a trailing window; rate = / window."""
    metric = r.p("metric")
    window = float(r.p("window", 300.0))
    ctes = _src(metric) + (
        ", d AS (SELECT node, gpu, sub, ts, value, value - lag(value) OVER (PARTITION BY node, gpu, sub "
        "ORDER BY ts) AS dv FROM src)"
        ", inc AS (SELECT node, gpu, sub, ts, CASE WHEN dv IS NULL THEN 0 WHEN dv < 0 THEN value ELSE dv END "
        "AS dv FROM d)"
        f", win AS (SELECT node, gpu, sub, ts, sum(dv) OVER (PARTITION BY node, gpu, sub ORDER BY ts "
        f"RANGE BETWEEN INTERVAL {int(window)} SECOND PRECEDING AND CURRENT ROW) AS v FROM inc)"
    )
    val = f"(v / {window})" if per_second else "v"
    if per_second and r.p("per_lane_gen"):
        # normalise by the link's lanes x generation: the GPU's widest/fastest link in the range (links change
        # rarely, and a per-GPU constant avoids an as-of join per point)
        ctes += ", " + _src("pcie_link_width", "lw") + ", " + _src("pcie_link_gen", "lg")
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
    cond = _cmp(val, r.p("op", ">"), repr(float(r.p("value", 0.0))))
    select = f"SELECT node, gpu, sub AS key, ts, {cond} AS active, {val} AS value FROM {src_tbl}"
    return run_obs_sql(store, ctes, select, start, end)


def trend(store: Store, r: Rule, start: float, end: float) -> KindResult:
    """A rising counter: over a trailing window of hourly maxima, the increase and the least-squares slope;
    the value is the projected seconds until `capacity` is reached."""
    metric = r.p("metric")
    window = float(r.p("window", 7 * 86400.0))
    cap = float(r.p("capacity", 512))
    min_inc = float(r.p("min_increase", 3))
    horizon = float(r.p("horizon", 10 * 365 * 86400.0))
    ctes = _src(metric) + (
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
    res = run_obs_sql(store, ctes, select, start, end)
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


def peer(store: Store, r: Rule, start: float, end: float) -> KindResult:
    """A GPU against its peers (the other GPUs of its node, or every GPU of the same model and driver in the
    fleet), minute by minute, smoothed over `window`, only while the GPU is loaded (when_metric >= when_min)."""
    metric = r.p("metric")
    window = float(r.p("window", 300.0))
    below = r.p("below_fraction")
    above = r.p("above_fraction")
    min_peers = int(r.p("min_peers", 4))
    scope = r.p("scope", "node")
    ctes = _src(metric) + (
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
            + _src(r.p("when_metric"), "ld")
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


def absent(store: Store, r: Rule, start: float, end: float) -> KindResult:
    """A GPU whose series stop while the other GPUs of its node go on reporting (it fell off the bus, or its
    exporter lost it): active from its last sample + `after` until the node's last sample."""
    after = float(r.p("after", 120.0))
    metric = r.p("metric")
    where = f"AND metric = '{metric}'" if metric else ""
    rows = store.con.execute(
        f"""WITH last AS (SELECT node, gpu, max(ts) AS t FROM samples WHERE gpu IS NOT NULL
                 AND ts BETWEEN $start AND $end {where} GROUP BY node, gpu),
               nl AS (SELECT node, max(t) AS t, count(*) AS n FROM last GROUP BY node)
            SELECT last.node, last.gpu, last.t, nl.t, nl.n FROM last JOIN nl USING (node)
            WHERE nl.n >= 2 AND epoch(nl.t) - epoch(last.t) >= {after}""",
        {"start": _ts(start), "end": _ts(end)},
    ).fetchall()
    res = KindResult()
    for node, gpu, t_gpu, t_node, _n in rows:
        a = _epoch(t_gpu)
        b = _epoch(t_node)
        res.obs[(node, gpu, "")] = [(a + after, True, b - a), (b, True, b - a)]
        res.extra[(node, gpu, "")] = {"last_sample": a, "silent_s": b - a}
    return res


def sql(store: Store, r: Rule, start: float, end: float) -> KindResult:
    """The escape hatch: a query returning node, gpu, ts, active, value (and optionally key); $start/$end bound."""
    q = str(r.p("query"))
    select = f"SELECT node, gpu, coalesce(try_cast(NULL AS VARCHAR), '') AS key, ts, active, value FROM ({q})"
    return run_obs_sql(store, "dummy AS (SELECT 1)", select, start, end)


def nccl_localize(store: Store, r: Rule, start: float, end: float) -> KindResult:
    """Slow node from NCCL runs. Pairwise runs (two nodes): a run is slow when its large-message busbw sits below
    (1 - slow_fraction) x the median of runs of the same op and rank count; the culprit is in every slow pair and
    in no fast pair. Single-node runs: a node below the median of the others is slow."""
    slow_frac = float(r.p("slow_fraction", 0.2))
    min_size = int(r.p("min_size", 0))
    op = r.p("op")
    rows = store.con.execute(
        """SELECT r.run_id, r.ts, r.op, r.ranks, r.nodes, r.peak_busbw_gbps,
                  (SELECT max(greatest(coalesce(x.ip_busbw_gbps, 0), coalesce(x.oop_busbw_gbps, 0)))
                     FROM nccl_rows x WHERE x.run_id = r.run_id AND x.size_bytes = (
                         SELECT max(size_bytes) FROM nccl_rows y WHERE y.run_id = r.run_id)
                       AND x.size_bytes >= $min_size) AS big
           FROM nccl_runs r""",
        {"min_size": min_size},
    ).fetchall()
    end_default = end
    groups: dict[tuple[str, int, int], list[tuple[str, float, list[str], float | None]]] = defaultdict(list)
    for run_id, ts, rop, ranks, nodes, peak, big in rows:
        if op and rop != op:
            continue
        bw = big if big else peak
        if not bw or not nodes:
            continue
        t = _epoch(ts) if ts is not None else end_default
        groups[(rop, int(ranks or 0), len(nodes))].append((run_id, float(bw), list(nodes), t))
    res = KindResult()
    for (_op, _ranks, nn), runs in groups.items():
        if len(runs) < 3:
            continue
        med = statistics.median(bw for _, bw, _, _ in runs)
        slow = [x for x in runs if x[1] < med * (1 - slow_frac)]
        fast = [x for x in runs if x[1] >= med * (1 - slow_frac)]
        if not slow:
            continue
        fast_nodes = {n for _, _, ns, _ in fast for n in ns}
        if nn >= 2:
            common = set(slow[0][2])
            for _, _, ns, _ in slow[1:]:
                common &= set(ns)
            culprits = common - fast_nodes
            if not culprits:
                culprits = {n for _, _, ns, _ in slow for n in ns} - fast_nodes
        else:
            culprits = {n for _, _, ns, _ in slow for n in ns}
        for node in sorted(culprits):
            mine = [x for x in slow if node in x[2]]
            t0 = min(x[3] for x in mine)
            t1 = max(x[3] for x in mine)
            ratio = min(x[1] for x in mine) / med
            ent = (node, None, "")
            res.obs[ent] = [(t0, True, ratio), (t1, True, ratio)]
            res.extra[ent] = {
                "median_busbw_gbps": med,
                "slow_runs": [{"run_id": x[0], "nodes": x[2], "busbw_gbps": x[1]} for x in mine],
                "fast_runs": len(fast),
            }
    return res


def events(store: Store, r: Rule, start: float, end: float) -> KindResult:
    """Event lines of the given kinds (and codes); each is active at its time, then inactive just after, so the
    alert fires at once and stays for keep_firing_for. Per-event judgement (XID catalog) is applied by the
    evaluator from the extra rows."""
    kinds = list(r.p("events") or ["xid"])
    codes = r.p("codes")
    q = (
        "SELECT ts, node, gpu, uuid, pci_bus_id, kind, code, message, detail::VARCHAR FROM events "
        "WHERE kind IN (SELECT unnest($kinds)) AND (ts IS NULL OR ts BETWEEN $start AND $end)"
    )
    params: dict[str, Any] = {"kinds": kinds, "start": _ts(start), "end": _ts(end)}
    if codes:
        q += " AND code IN (SELECT unnest($codes))"
        params["codes"] = [int(c) for c in codes]
    q += " ORDER BY node, gpu, ts"
    res = KindResult()
    import json

    for ts, node, gpu, uuid, pci, kind, code, message, detail in store.con.execute(q, params).fetchall():
        t = _epoch(ts) if ts is not None else end
        key = f"{kind}:{code}" if code is not None else kind
        ent = (node, gpu, key)
        ex = res.extra.setdefault(ent, {"events": []})
        ex["events"].append(
            {
                "ts": t,
                "kind": kind,
                "code": code,
                "message": message,
                "pci_bus_id": pci,
                "uuid": uuid,
                "detail": json.loads(detail) if detail else {},
            }
        )
        lst = res.obs.setdefault(ent, [])
        lst.append((t, True, float(code) if code is not None else None))
        lst.append((t + 1.0, False, None))
    for obs in res.obs.values():
        obs.sort(key=lambda o: (o[0], not o[1]))
    return res


KIND_FUNCS = {
    "threshold": threshold,
    "increase": increase,
    "rate": lambda s, r, a, b: increase(s, r, a, b, per_second=True),
    "trend": trend,
    "peer": peer,
    "absent": absent,
    "sql": sql,
    "nccl_localize": nccl_localize,
    "event": events,
}
