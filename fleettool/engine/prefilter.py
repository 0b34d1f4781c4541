"""One query that tells which of the agent's due threshold rules have nothing to find.

A threshold rule's evaluation run-length encodes only the entities where its condition held at least once in
the rule's window (kinds/_sql._RLE's `hot`); with none, it yields no observations and so no finding. On a
healthy node that is every threshold rule at nearly every evaluation, and each such evaluation still cost its
planning (~2.5 ms on the dev box, ~4-5 ms with its scan; 11 threshold rules are due every minute). So the
agent first asks, for all the due simple threshold rules at once, whether the condition held at any point of
each one's window, over the same points (kinds/_sql.src: raw samples and rollups), and skips the rules for
which it did not: the same alerts, one query instead of one each.

Simple: a metric against a value (`op`/`value`) or a bitmask (`bitmask_any`); a rule against another metric
(`than_metric`, an as-of join) is always evaluated in full. A sql rule that names its metric (`needs_metric`: its
rows are that metric's points in its window) is asked in the same query whether it has any point there.

The counter and peer kinds (issue 33) are asked alike, one query per family, each rule with a condition that
must hold somewhere for the kind's evaluation to find anything (so a skip never changes a finding):
- increase and rate: a series whose points (raw and rollups) all hold one finite value has every step 0, so
  every windowed increase and rate is 0; a rule for which `0 op value` is false finds nothing unless some
  series of its metric moved in its window;
- peer: a GPU's smoothed value and its peers' median both lie between the lowest and highest point of the
  metric on its node (the fleet, for scope fleet) in the window, so `below_fraction` f can hold only where
  lowest < highest x (1 - f), and `above_fraction` f only where highest > lowest x (1 + f) (or lowest <= 0);
  with `when_metric`, only where some point of it reached `when_min`. A relative slack of 1e-9 covers the
  rounding of the averages.

The event, port and trend kinds find nothing without a row of their inputs where their evaluation reads
(`idle`, one query, agent only): an event rule the events of its kinds (codes, `what`) timed in its window or
untimed, and for a rule that holds a GPU-gone or reset line (kinds/_held.py) any such line before its window
too; port_episodes its metric from `history_s` before its window; port_peer, port_count and trend their metric
in the window. A rule with a finding still open is never asked (the scheduler passes them in `keep`).
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Sequence

from fleettool.engine.kinds._held import older_sql
from fleettool.engine.kinds._sql import cmp, read, rollup_column, ts_param
from fleettool.engine.kinds.port_episodes import history_s
from fleettool.engine.rules import Rule
from fleettool.store import Store


def eligible(r: Rule) -> bool:
    """Asked in the thresholds' query: a simple threshold, or a sql rule that names the metric its rows are."""
    if r.kind == "sql":
        return r.p("needs_metric", None) is not None
    return r.kind == "threshold" and r.p("than_metric", None) is None


def _metric(r: Rule) -> str:
    return str(r.p("needs_metric") if r.kind == "sql" else r.p("metric"))


_OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq}
_OPS |= {"=": operator.eq, "!=": operator.ne, "<>": operator.ne}
LANE_GEN = ("pcie_link_width", "pcie_link_gen")  # what kinds/increase.py divides a per-lane rate by


def _zero_fires(r: Rule) -> bool:
    """Whether an increase (or rate) of 0 meets the rule's condition: such a rule is never skipped."""
    op, v = str(r.p("op", ">")), float(r.p("value", 0.0))
    test = _OPS.get(op)
    return True if test is None else test(0.0, v)


def _fraction_ok(f: object) -> bool:
    return f is None or 1e-6 <= float(f) < 1.0  # type: ignore[arg-type]


def counter_eligible(r: Rule) -> bool:
    return r.kind in ("increase", "rate") and not _zero_fires(r)


def peer_eligible(r: Rule) -> bool:
    below, above = r.p("below_fraction", None), r.p("above_fraction", None)
    return (
        r.kind == "peer"
        and _fraction_ok(below)
        and (above is None or float(above) >= 1e-6)
        and str(r.p("scope", "node")) in ("node", "fleet")
    )


def _lit(s: object) -> str:
    return "'" + str(s).replace("'", "''") + "'"


def _cond(r: Rule) -> str:
    if r.kind == "sql":  # any point of its metric in its window
        return "true"
    if r.p("bitmask_any", None) is not None:
        return f"((value::BIGINT & {int(r.p('bitmask_any'))}) <> 0)"
    return cmp("value", r.p("op", ">"), repr(float(r.p("value", 0.0))))


def quiet(store: Store, windows: Sequence[tuple[Rule, float, float]]) -> set[str]:
    """The alert names of the due rules that have nothing to find: thresholds, counters and peers (above)."""
    return _quiet_thresholds(store, windows) | _quiet_counters(store, windows) | _quiet_peers(store, windows)


def _points(metrics: Sequence[str], i: int) -> str:
    """Every point of these metrics in rule i's window [$s{i}, $e{i}]: raw samples and 1-minute rollups (as
    kinds/_sql.src reads them). Each rule gets its own scan of its own window (a query over the widest window
    with a filter per rule tested every rule against every row: 0.8 s at the agent's start-up)."""
    rollup = " UNION ALL ".join(
        f"SELECT node, gpu, sub, minute AS ts, {rollup_column(m)} AS value FROM samples_1m "
        f"WHERE metric = {_lit(m)} AND minute BETWEEN $s{i} AND $e{i}"
        for m in metrics
    )
    names = ", ".join(_lit(m) for m in metrics)
    return (
        f"SELECT node, gpu, sub, ts, value FROM samples WHERE metric IN ({names}) "
        f"AND ts BETWEEN $s{i} AND $e{i} UNION ALL {rollup}"
    )


def _ask(store: Store, rules: Sequence[tuple[Rule, float, float]], branch: list[str]) -> set[str]:
    """One query of the rules' branches (each one row: its index and whether it may find something)."""
    params: dict[str, object] = {}
    for i, (_, a, b) in enumerate(rules):
        params[f"s{i}"], params[f"e{i}"] = ts_param(a), ts_param(b)
    may = {int(x["i"]): bool(x["m"]) for x in read(store, " UNION ALL ".join(branch), params)}
    return {r.alert for i, (r, _, _) in enumerate(rules) if not may[i]}


def _quiet_counters(store: Store, windows: Sequence[tuple[Rule, float, float]]) -> set[str]:
    """The increase and rate rules none of whose series moved in their window (one query, grouped by series)."""
    rules = [(r, a, b) for r, a, b in windows if counter_eligible(r)]
    if not rules:
        return set()
    branch = []
    for i, (r, _, _) in enumerate(rules):
        only = "" if r.p("sub", None) is None else f" WHERE sub = {_lit(r.p('sub'))}"
        moved = "hi > lo OR NOT isfinite(hi) OR NOT isfinite(lo)"
        if r.p(
            "per_lane_gen", None
        ):  # 0 over a NaN width or generation is NaN, which DuckDB holds the greatest
            moved += (
                f" OR (SELECT coalesce(bool_or(NOT isfinite(value)), false) FROM ({_points(LANE_GEN, i)}))"
            )
        branch.append(
            f"SELECT {i} AS i, coalesce(bool_or({moved}), false) AS m FROM (SELECT min(value) AS lo, "
            f"max(value) AS hi FROM ({_points([str(r.p('metric'))], i)}){only} GROUP BY node, gpu, sub)"
        )
    return _ask(store, rules, branch)


def _spread(r: Rule, lo: str, hi: str) -> str:
    """SQL: whether the peer rule can hold between points as low as `lo` and as high as `hi`."""
    conds = []
    if r.p("below_fraction", None) is not None:
        f = float(r.p("below_fraction"))
        conds.append(f"({hi} > 0 AND ({lo} <= 0 OR {lo} < {hi} * {1 - f!r} * (1 + 1e-9)))")
    if r.p("above_fraction", None) is not None:
        f = float(r.p("above_fraction"))
        conds.append(f"({hi} > 0 AND ({lo} <= 0 OR {hi} > {lo} * {1 + f!r} * (1 - 1e-9)))")
    if not conds:
        return "false"  # neither fraction: the rule's condition is `false`
    finite = f"NOT isfinite({lo}) OR NOT isfinite({hi})"
    return f"({finite} OR {' OR '.join(conds)})"


def _quiet_peers(store: Store, windows: Sequence[tuple[Rule, float, float]]) -> set[str]:
    """The peer rules whose metric's spread on any node (or the fleet) could not make a GPU an outlier, or whose
    load metric never reached its floor, in their window (one query, grouped by node)."""
    rules = [(r, a, b) for r, a, b in windows if peer_eligible(r)]
    if not rules:
        return set()
    branch = []
    for i, (r, _, _) in enumerate(rules):
        if str(r.p("scope", "node")) == "fleet":  # one group of peers at most as wide as the fleet
            agg = f"coalesce({_spread(r, 'min(lo)', 'max(hi)')}, false)"
        else:
            agg = f"coalesce(bool_or({_spread(r, 'lo', 'hi')}), false)"
        load = "true"
        if r.p("when_metric", None) and float(r.p("when_min", 0)) > 0:
            w = float(r.p("when_min"))
            load = (
                f"(SELECT coalesce(max(value) >= {w!r} OR NOT isfinite(max(value)), false) "
                f"FROM ({_points([str(r.p('when_metric'))], i)}))"
            )
        branch.append(
            f"SELECT {i} AS i, {agg} AND {load} AS m FROM (SELECT min(value) AS lo, max(value) AS hi "
            f"FROM ({_points([str(r.p('metric'))], i)}) WHERE gpu IS NOT NULL GROUP BY node)"
        )
    return _ask(store, rules, branch)


def _quiet_thresholds(store: Store, windows: Sequence[tuple[Rule, float, float]]) -> set[str]:
    """The alert names of the rules (each with its window start, end) whose condition held at no point.
    One scan of the rules' metrics over the widest window, one conditional aggregate per rule."""
    rules = [(r, a, b) for r, a, b in windows if eligible(r)]
    if not rules:
        return set()
    params: dict[str, object] = {
        "lo": ts_param(min(a for _, a, _ in rules)),
        "hi": ts_param(max(b for *_, b in rules)),
    }
    metrics = sorted({_metric(r) for r, _, _ in rules})
    names = ", ".join("'" + m.replace("'", "''") + "'" for m in metrics)
    aggs = []
    for i, (r, a, b) in enumerate(rules):
        m = _metric(r).replace("'", "''")
        params[f"s{i}"], params[f"e{i}"] = ts_param(a), ts_param(b)
        aggs.append(f"bool_or(metric = '{m}' AND ts BETWEEN $s{i} AND $e{i} AND {_cond(r)}) AS h{i}")
    rollup = " UNION ALL ".join(
        f"SELECT minute AS ts, metric, {rollup_column(m)} AS value FROM samples_1m WHERE metric = "
        f"'{m.replace(chr(39), chr(39) * 2)}' AND minute BETWEEN $lo AND $hi"
        for m in metrics
    )
    sql = (
        f"SELECT {', '.join(aggs)} FROM (SELECT ts, metric, value FROM samples WHERE metric IN ({names}) "
        f"AND ts BETWEEN $lo AND $hi UNION ALL {rollup})"
    )
    row = read(store, sql, params)[0]
    return {r.alert for i, (r, _, _) in enumerate(rules) if not row[f"h{i}"]}


# the kinds whose every finding comes from points of the rule's `metric` (kinds/_sql.src: raw samples and rollups)
METRIC_KINDS = frozenset(
    {"threshold", "increase", "rate", "peer", "trend", "port_episodes", "port_peer", "port_count"}
)


def inputs_of(r: Rule) -> frozenset[tuple[str, str]] | None:
    """What the rule's evaluation finds nothing without, whatever its window: one of these present ("events", a
    kind: an event rule's kinds; ("metric", name): the one metric all of a rule's findings come from, a sql
    rule's `needs_metric`); None when that is not known (the sql kind without needs_metric, absent,
    nccl_localize)."""
    if r.kind == "event":
        return frozenset(("events", str(k)) for k in (r.p("events") or ["xid"]))
    m = r.p("needs_metric", None) if r.kind == "sql" else r.p("metric", None)
    if m is None or (r.kind != "sql" and r.kind not in METRIC_KINDS):
        return None
    return frozenset({("metric", str(m))})


def without_inputs(store: Store, rules: Sequence[Rule]) -> set[str]:
    """The alert names of the rules whose inputs have no row at all in the store (no point of their metric, raw
    or rolled up; no event of their kinds, timed or not): they find nothing over any window. Two small queries
    (the distinct metrics and event kinds present) in place of a full evaluation each: replay's whole-history
    pass over a recording of GPU samples alone skips the event, port and NVLink rules."""
    need = {r.alert: inputs_of(r) for r in rules}
    if not any(need.values()):
        return set()
    present = {
        ("metric", str(x["v"]))
        for x in read(
            store, "SELECT DISTINCT metric AS v FROM samples UNION SELECT DISTINCT metric FROM samples_1m", {}
        )
    }
    present |= {("events", str(x["v"])) for x in read(store, "SELECT DISTINCT kind AS v FROM events", {})}
    return {a for a, n in need.items() if n is not None and not (n & present)}


# the kinds `idle` asks: their evaluation finds nothing when their inputs have no row where it reads (above)
INPUT_KINDS = frozenset({"event", "port_episodes", "port_peer", "port_count", "trend"})


def _event_rows(r: Rule, i: int) -> str:
    """SQL: whether an event rule has a line to read in rule i's window (kinds/event.py's WHERE), or, when it
    holds lines (kinds/_held.py), a held line before it."""
    kinds = [str(k) for k in (r.p("events") or ["xid"])]
    codes = [int(c) for c in r.p("codes") or []] or None
    where = f"kind IN ({', '.join(map(_lit, kinds))})"
    if codes:
        where += f" AND code IN ({', '.join(map(str, codes))})"
    if r.p("what", None):
        where += f" AND json_extract_string(detail, '$.what') IN ({', '.join(map(_lit, r.p('what')))})"
    timed = f"(ts IS NULL OR ts BETWEEN $s{i} AND $e{i})"
    older = older_sql(kinds, codes)
    if older is not None:
        timed = f"({timed} OR ({older.replace('$start', f'$s{i}')}))"
    return f"EXISTS (SELECT 1 FROM events WHERE {where} AND {timed})"


def _metric_rows(m: str, i: int) -> str:
    """SQL: whether the metric has a point (raw or rolled up) in rule i's window."""
    return (
        f"EXISTS (SELECT 1 FROM samples WHERE metric = {_lit(m)} AND ts BETWEEN $s{i} AND $e{i}) OR EXISTS "
        f"(SELECT 1 FROM samples_1m WHERE metric = {_lit(m)} AND minute BETWEEN $s{i} AND $e{i})"
    )


def idle(store: Store, windows: Sequence[tuple[Rule, float, float]], keep: Collection[str] = ()) -> set[str]:
    """The alert names of the due event, port and trend rules with no row of their inputs where their
    evaluation reads (above): one query. The rules named in `keep` (a finding open) are never skipped."""
    rules: list[tuple[Rule, float, float]] = []
    for r, a, b in windows:
        if (
            r.kind not in INPUT_KINDS
            or r.alert in keep
            or (r.kind != "event" and r.p("metric", None) is None)
        ):
            continue
        rules.append((r, a - history_s(r) if r.kind == "port_episodes" else a, b))
    if not rules:
        return set()
    branch = [
        f"SELECT {i} AS i, "
        f"({_event_rows(r, i) if r.kind == 'event' else _metric_rows(str(r.p('metric')), i)}) AS m"
        for i, (r, _, _) in enumerate(rules)
    ]
    return _ask(store, rules, branch)
