"""One query that tells which of the agent's due threshold rules have nothing to find.

A threshold rule's evaluation run-length encodes only the entities where its condition held at least once in
the rule's window (kinds/_sql._RLE's `hot`); with none, it yields no observations and so no finding. On a
healthy node that is every threshold rule at nearly every evaluation, and each such evaluation still cost its
planning (~2.5 ms on the dev box, ~4-5 ms with its scan; 11 threshold rules are due every minute). So the
agent first asks, for all the due simple threshold rules at once, whether the condition held at any point of
each one's window, over the same points (kinds/_sql.src: raw samples and rollups), and skips the rules for
which it did not: the same alerts, one query instead of one each.

Simple: a metric against a value (`op`/`value`) or a bitmask (`bitmask_any`); a rule against another metric
(`than_metric`, an as-of join) is always evaluated in full.
"""

from __future__ import annotations

from collections.abc import Sequence

from fleettool.engine.kinds._sql import cmp, read, rollup_column, ts_param
from fleettool.engine.rules import Rule
from fleettool.store import Store


def eligible(r: Rule) -> bool:
    return r.kind == "threshold" and r.p("than_metric", None) is None


def _cond(r: Rule) -> str:
    if r.p("bitmask_any", None) is not None:
        return f"((value::BIGINT & {int(r.p('bitmask_any'))}) <> 0)"
    return cmp("value", r.p("op", ">"), repr(float(r.p("value", 0.0))))


def quiet(store: Store, windows: Sequence[tuple[Rule, float, float]]) -> set[str]:
    """The alert names of the rules (each with its window start, end) whose condition held at no point.
    One scan of the rules' metrics over the widest window, one conditional aggregate per rule."""
    rules = [(r, a, b) for r, a, b in windows if eligible(r)]
    if not rules:
        return set()
    params: dict[str, object] = {
        "lo": ts_param(min(a for _, a, _ in rules)),
        "hi": ts_param(max(b for *_, b in rules)),
    }
    metrics = sorted({str(r.p("metric")) for r, _, _ in rules})
    names = ", ".join("'" + m.replace("'", "''") + "'" for m in metrics)
    aggs = []
    for i, (r, a, b) in enumerate(rules):
        m = str(r.p("metric")).replace("'", "''")
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
