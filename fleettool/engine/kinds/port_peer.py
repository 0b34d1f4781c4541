"""port_peer and port_count: a node's ports against each other and against their own past, not a table per SKU
(gpud PR #295's "0 LinkUp out of 18, expected 8").

    kind: port_peer              # one port's rate or width below its peers' or its own best
    metric: ib_port_rate_gbps
    below_fraction: 0.1          # more than 10 % below the median of the node's ACTIVE ports of its kind (link
                                 # layer and driver: mlx5 InfiniBand rails, not a RoCE bond or an Omni-Path port)
    min_peers: 2                 # ports of that link layer on the node, itself included, for the peer test
    window: 1d                   # ... or more than 10 % below its own best while ACTIVE in this window

    kind: port_count             # the node's count of ACTIVE ports below its own count earlier since its boot
    metric: ib_port_state        # the port states counted (the one metric it reads)
    window: 1d

Only ACTIVE ports (ib_port_state 4 or 5, the latest state at or before the reading) are judged or compared: a
port that is down reads a meaningless rate, and is NicPortDown's. A boot starts the node's history afresh: a
port that trains at boot, or a port down by design after it, is no loss.
"""

from __future__ import annotations

from fleettool.engine.kinds._base import Kind, KindResult, RuleLike
from fleettool.engine.kinds._promql import NODE, Names, NotExpressible, PromAlert, dur, fills, num
from fleettool.engine.kinds._sql import SERIES_STALE_S, read, run_obs_sql, src, ts_param
from fleettool.store import Store

ACTIVE = 4.0
# a port's kind beside its link layer: its driver, from the device's name (mlx5_3 -> mlx5, hfi1_0 -> hfi1), so a
# node's CX-7 rails are compared with each other and not with an older HCA or an Omni-Path port beside them
HCA_RE = "([A-Za-z]+[0-9]*)"
HCA_SQL = f"regexp_extract(sub, '^port={HCA_RE}', 1)"


def _state(metric: str) -> str:
    """A CTE `a` of the metric's points with the port's state and link layer as of each point."""
    return (
        src(metric)
        + ", "
        + src("ib_port_state", "st")
        + ", "
        + src("ib_port_link_layer", "ll")
        + ", a AS (SELECT src.node, src.sub, src.ts, src.value, st.value AS state, coalesce(ll.value, 0) AS layer "
        "FROM src ASOF LEFT JOIN st ON src.node = st.node AND src.sub = st.sub AND src.ts >= st.ts "
        "ASOF LEFT JOIN ll ON src.node = ll.node AND src.sub = ll.sub AND src.ts >= ll.ts)"
        ", boots AS (SELECT node, ts FROM events WHERE kind = 'boot' AND ts IS NOT NULL)"
    )


def _with_boot(tbl: str) -> str:
    """The rows of `tbl` with the node's last boot at or before each (the partition of its history)."""
    return (
        f"SELECT {tbl}.*, coalesce(epoch(boots.ts), 0) AS boot FROM {tbl} "
        f"ASOF LEFT JOIN boots ON {tbl}.node = boots.node AND {tbl}.ts >= boots.ts"
    )


def _suspects(store: Store, r: RuleLike, start: float, end: float, frac: float) -> bool:
    """Whether any port could be below its peers or its best in the range: one aggregate per port (its lowest
    value against its own highest, and against the highest of its node's ports of its kind). A peer median
    and a port's best are never above those highs, so with no suspect there is no finding; the full
    judgement (two as-of joins and three window passes over every point) runs only when there is one."""
    m = r.p("metric")
    sql = (
        "WITH "
        + src(m)
        + ", "
        + src("ib_port_link_layer", "ll")
        + ", agg AS (SELECT node, sub, min(value) AS mn, max(value) AS mx FROM src GROUP BY ALL)"
        ", lay AS (SELECT node, sub, max(value) AS layer FROM ll GROUP BY ALL)"
        f", g AS (SELECT agg.*, coalesce(lay.layer, 0) AS layer, {HCA_SQL.replace('sub', 'agg.sub')} AS hca "
        "FROM agg LEFT JOIN lay ON agg.node = lay.node AND agg.sub = lay.sub)"
        ", top AS (SELECT node, layer, hca, max(mx) AS gmx FROM g GROUP BY ALL)"
        f" SELECT count(*) AS n FROM g JOIN top USING (node, layer, hca) WHERE g.mn < {1 - frac} * greatest(g.mx, top.gmx)"
    )
    return bool(read(store, sql, {"start": ts_param(start), "end": ts_param(end)})[0]["n"])


def evaluate_peer(store: Store, r: RuleLike, start: float, end: float) -> KindResult:
    frac = float(r.p("below_fraction", 0.1))
    window = int(float(r.p("window", 86400)))
    if not _suspects(store, r, start, end, frac):
        return KindResult()
    ctes = _state(r.p("metric")) + (
        f", act AS (SELECT * FROM a WHERE state >= {ACTIVE})"
        f", ab AS ({_with_boot('act')})"
        f", p AS (SELECT *, median(value) OVER (PARTITION BY node, layer, {HCA_SQL}, ts) AS med, "
        f"count(*) OVER (PARTITION BY node, layer, {HCA_SQL}, ts) AS n, "
        "max(value) OVER (PARTITION BY node, sub, boot ORDER BY ts "
        f"RANGE BETWEEN INTERVAL {window} SECOND PRECEDING AND CURRENT ROW) AS best FROM ab)"
    )
    cond = (
        f"((n >= {int(r.p('min_peers', 2))} AND value < med * (1 - {frac})) OR value < best * (1 - {frac}))"
    )
    select = f"SELECT node, NULL::INTEGER AS gpu, sub AS key, ts, {cond} AS active, value FROM p"
    return run_obs_sql(store, ctes, select, start, end)


def evaluate_count(store: Store, r: RuleLike, start: float, end: float) -> KindResult:
    window = int(float(r.p("window", 86400)))
    ctes = src(r.p("metric")) + (
        ", boots AS (SELECT node, ts FROM events WHERE kind = 'boot' AND ts IS NOT NULL)"
        f", act AS (SELECT node, ts, count(*) FILTER (WHERE value >= {ACTIVE}) AS n FROM src GROUP BY node, ts)"
        f", ab AS ({_with_boot('act')})"
        ", p AS (SELECT *, max(n) OVER (PARTITION BY node, boot ORDER BY ts "
        f"RANGE BETWEEN INTERVAL {window} SECOND PRECEDING AND CURRENT ROW) AS before FROM ab)"
    )
    select = "SELECT node, NULL::INTEGER AS gpu, '' AS key, ts, n < before AS active, n AS value FROM p"
    return run_obs_sql(store, ctes, select, start, end)


def _active(names: Names, metric: str, layer: int | None = None) -> str:
    """The metric's series of ACTIVE ports (of one link layer), with their driver as label `hca`."""
    s, st = names.series(metric).sel, names.series("ib_port_state").sel
    e = f"({s} and on({NODE}, port) {st} >= 4)"
    if layer is not None:
        e = f"({e} and on({NODE}, port) {names.series('ib_port_link_layer').sel} == {layer})"
    return f'label_replace({e}, "hca", "$1", "port", "{HCA_RE}.*")'


def promql_peer(r: RuleLike, names: Names) -> PromAlert:
    """Per link layer (1 InfiniBand, 2 Ethernet), the port against its node's median; or against its own best
    over the window (a 1-minute subquery; PromQL knows no boots, so a port slower since a reboot counts too)."""
    if names.name != "fleettool":
        raise NotExpressible("dcgm-exporter exports no InfiniBand port series")
    keep = num(1 - float(r.p("below_fraction", 0.1)))
    alts = []
    for layer in (1, 2):
        a = _active(names, r.p("metric"), layer)
        alts.append(
            f"({a} < on({NODE}, hca) group_left quantile by ({NODE}, hca) (0.5, {a}) * {keep} "
            f"and on({NODE}, hca) count by ({NODE}, hca) ({a}) >= {int(r.p('min_peers', 2))})"
        )
    a = _active(names, r.p("metric"))
    alts.append(f"({a} < max_over_time({a}[{dur(float(r.p('window', 86400)))}:1m]) * {keep})")
    s = names.series(r.p("metric"))
    return PromAlert(f"max without (hca) ({' or '.join(alts)})", fills(s, gpu=False))


def promql_count(r: RuleLike, names: Names) -> PromAlert:
    if names.name != "fleettool":
        raise NotExpressible("dcgm-exporter exports no InfiniBand port series")
    st = names.series(r.p("metric")).sel
    n = f"count by ({NODE}) ({st} >= 4)"
    return PromAlert(
        f"{n} < max_over_time(({n})[{dur(float(r.p('window', 86400)))}:1m])", fills(None, gpu=False)
    )


PEER = Kind(
    stale_s=SERIES_STALE_S,
    name="port_peer",
    fields=frozenset({"metric", "below_fraction", "min_peers", "window"}),
    requires=("metric",),
    durations=frozenset({"window"}),
    evaluate=evaluate_peer,
    promql=promql_peer,
)
COUNT = Kind(
    stale_s=SERIES_STALE_S,
    name="port_count",
    fields=frozenset({"metric", "window"}),
    requires=("metric",),
    durations=frozenset({"window"}),
    evaluate=evaluate_count,
    promql=promql_count,
)
