"""Evaluate rules over the store in event time, fold findings into incidents, write the alerts table.

A *finding* is one rule's alert instance on one entity (what promtool would call an alert). An *incident* is
what an on-call engineer gets paged for: every finding of one GPU (or node) with the same incident key whose
times overlap becomes one alert, with the worst severity, the strongest action, and every finding, event and
run as evidence (so an XID 48, the DBE counter and the pending remap of one GPU are one alert, not three).
"""

from __future__ import annotations

import datetime as dt
import math
import time
from typing import Any

from fleettool.engine.incident import Finding, Incident, fold
from fleettool.engine.kinds import KINDS, Entity, KindResult, Verdict
from fleettool.engine.kinds._horizon import Horizons, horizon_of
from fleettool.engine.rules import Rule
from fleettool.engine.state import PENDING, RESOLVED, STALE, Instance, run_observations
from fleettool.incidents.refresh import refresh_incidents
from fleettool.model import Severity
from fleettool.store import Store
from fleettool.store.alerts import AlertRecord, open_alert_of_incident, put_alert
from fleettool.store.gpu_history import gpu_uuid_at
from fleettool.store.silences import active_acks


def _fmt_ts(t: float | None) -> str:
    if t is None:
        return "?"
    return dt.datetime.fromtimestamp(t, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def _fmt_dur(s: float) -> str:
    s = abs(s)
    if s >= 2 * 86400:
        return f"{s / 86400:.0f}d"
    if s >= 2 * 3600:
        return f"{s / 3600:.1f}h"
    if s >= 120:
        return f"{s / 60:.0f}m"
    return f"{s:.0f}s"


class _SafeDict(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def render(template: str, **kw: Any) -> str:
    try:
        return template.format_map(_SafeDict(kw))
    except (ValueError, IndexError):
        return template


def data_range(store: Store) -> tuple[float, float] | None:
    """The first and last event time of anything the rules read, in unix seconds; None for an empty store."""
    row = store.query(
        """SELECT min(t0) AS t0, max(t1) AS t1 FROM (
             SELECT min(ts) AS t0, max(ts) AS t1 FROM samples
             UNION ALL SELECT min(minute), max(minute) FROM samples_1m
             UNION ALL SELECT min(ts), max(ts) FROM events
             UNION ALL SELECT min(ts), max(ts) FROM nccl_runs
             UNION ALL SELECT min(ts), max(ts) FROM burnin_results)"""
    )[0]
    if row["t0"] is None:
        return None
    conv = [x.replace(tzinfo=dt.timezone.utc).timestamp() for x in (row["t0"], row["t1"])]
    return conv[0], conv[1]


def evaluate_rule(
    store: Store,
    rule: Rule,
    start: float,
    end: float,
    boots: dict[str, list[float]] | None = None,
    horizons: Horizons | None = None,
) -> list[Finding]:
    """One rule's findings over [start, end], each entity judged at its node's horizon (kinds/_horizon.py;
    read here when not given)."""
    kind = KINDS[rule.kind]
    res: KindResult = kind.evaluate(store, rule, start, end)
    if kind.needs_boots and boots is None:
        boots = _boots(store)
    if horizons is None:
        horizons = Horizons(store, end)
    out: list[Finding] = []
    for ent, obs in res.obs.items():
        extra = res.extra.get(ent, {})
        # a kind may end an entity's finding without keep_firing_for (a lost GPU proven back: kinds/_held.py)
        now = horizon_of(horizons, ent[0], end)
        keep = float(extra.get("keep_s", rule.keep_s))
        insts = run_observations(obs, rule.for_s, keep, now, kind.stale_s, extra.get("gaps", set()))
        if boots is not None:
            extra = {**extra, "boots": boots.get(ent[0], [])}
        for inst in insts:
            if inst.state == PENDING:
                continue  # never fired: not an alert (yet)
            out.extend(_findings(rule, ent, inst, extra))
    return out


def _findings(rule: Rule, ent: Entity, inst: Instance, extra: dict[str, Any]) -> list[Finding]:
    node, gpu, key = ent
    evidence: dict[str, Any] = {
        k: v
        for k, v in extra.items()
        if k not in ("severity", "events", "peak", "keep_s", "held_ends", "gaps")
    }
    if "held_ends" in extra:  # a held fault (kinds/_held.py): what closed this instance, or open
        evidence["held"] = extra["held_ends"].get(inst.resolved_at, "open")
    if extra.get("peak") is not None:
        evidence["peak"] = extra["peak"]
    summary_kw: dict[str, Any] = {
        "node": node,
        "gpu": "-" if gpu is None else gpu,
        "key": key,
        "value": _num(inst.value),
        "peak": _num(extra.get("peak")),
        "since": _fmt_ts(inst.first_seen),
        "duration": _fmt_dur(inst.last_seen - inst.first_seen),
        "value_hex": hex(int(inst.value)) if isinstance(inst.value, (int, float)) else "?",
    }
    if isinstance(inst.value, (int, float)) and math.isfinite(inst.value):  # a value in seconds, for people
        summary_kw["value_dur"] = _fmt_dur(float(inst.value))
    if "time_to_exhaustion_s" in extra and extra["time_to_exhaustion_s"] is not None:
        summary_kw["exhaustion"] = _fmt_dur(float(extra["time_to_exhaustion_s"]))
    v = Verdict(
        severity=Severity(extra["severity"]) if "severity" in extra else rule.severity,
        category=rule.category,
        action=rule.action,
        incident=rule.incident_key,
        evidence=evidence,
        summary_kw=summary_kw,
    )
    refine = KINDS[rule.kind].refine
    if refine is not None:  # the kind's own judgement of the finding (an XID by the catalog)
        refine(rule, inst.first_seen, inst.last_seen, extra, v)
    summary = render(rule.summary, **v.summary_kw) if rule.summary else rule.alert
    if summary.startswith("GPU - on "):  # neither the index nor the PCI id is known
        summary = "A GPU on " + summary[len("GPU - on ") :]
    if inst.state == STALE and inst.stale_since is not None:
        summary += f" (stale: no data since {_fmt_ts(inst.stale_since)})"
    return [
        Finding(rule, node, gpu, key, inst, v.severity, v.category, v.action, v.incident, summary, evidence)
    ]


def _num(v: Any) -> str:
    if v is None:
        return "?"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def evaluate(
    store: Store,
    rules: list[Rule],
    start: float | None = None,
    end: float | None = None,
    *,
    workers: int = 1,
    prefilter: bool = True,
) -> list[Incident]:
    """The rules over [start, end] (default: the store's data range), folded into incidents. `workers` > 1
    runs the rules that many at a time, each thread on its own cursor of the store's database (DuckDB drops
    the GIL while a query runs): the findings are the same, in rule order. Only for a store whose data is
    committed and in the database itself (a cursor sees neither an open transaction's writes nor the
    connection's temporary tables): replay's, after its ingest. `prefilter`: the rules that can find nothing
    are not evaluated (skipped() below): the same incidents."""
    rng = data_range(store)
    if rng is None:
        return []
    s = rng[0] if start is None else start
    e = rng[1] if end is None else end
    if prefilter:
        skip = skipped(store, rules, s, e)
        rules = [r for r in rules if r.alert not in skip]
    boots = _boots(store)
    horizons = Horizons(store, e).preload()
    if workers > 1 and len(rules) > 1:
        per_rule = _evaluate_threads(store, rules, s, e, boots, horizons, min(workers, len(rules)))
    else:
        per_rule = [evaluate_rule(store, r, s, e, boots, horizons) for r in rules]
    return fold([f for fs in per_rule for f in fs], e, horizons)


def skipped(store: Store, rules: list[Rule], start: float, end: float) -> set[str]:
    """The alert names of the rules that find nothing over [start, end]: those whose metric or event kinds
    have no row at all in the store (two queries), then, of the rest, the thresholds, counters and peers the
    agent's prefilter finds quiet over the same window (engine/prefilter.py: three queries)."""
    from fleettool.engine import prefilter

    none = prefilter.without_inputs(store, rules)
    return none | prefilter.quiet(store, [(r, start, end) for r in rules if r.alert not in none])


def _evaluate_threads(
    store: Store,
    rules: list[Rule],
    start: float,
    end: float,
    boots: dict[str, list[float]],
    horizons: Horizons,
    n: int,
) -> list[list[Finding]]:
    import copy
    from concurrent.futures import ThreadPoolExecutor

    views = []
    for _ in range(n):
        v = copy.copy(store)  # the same Store, its queries on a cursor of the same database
        v.con = store.con.cursor()
        views.append(v)

    def part(w: int) -> list[tuple[int, list[Finding]]]:
        return [
            (i, evaluate_rule(views[w], rules[i], start, end, boots, horizons))
            for i in range(w, len(rules), n)
        ]

    try:
        with ThreadPoolExecutor(n, thread_name_prefix="fleettool-rules") as ex:
            done = dict(x for got in ex.map(part, range(n)) for x in got)
    finally:
        for v in views:
            v.con.close()
    return [done[i] for i in range(len(rules))]


def _boots(store: Store) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for row in store.query("SELECT node, ts FROM events WHERE kind = 'boot' AND ts IS NOT NULL"):
        out.setdefault(row["node"], []).append(row["ts"].replace(tzinfo=dt.timezone.utc).timestamp())
    return out


def write_alerts(store: Store, incidents: list[Incident]) -> int:
    """Upsert incidents into the alerts table. An open alert of the same node, GPU and incident key that the
    new incident overlaps keeps its id and first_seen (incremental evaluation in the agent), and stays resolved
    when a person resolved it (`alerts resolve`): the next evaluation must not page it again."""
    n = 0
    by_hand = (
        {k for k, a in active_acks(store, time.time()).items() if a["kind"] == "resolve"}
        if incidents
        else set()
    )
    for inc in incidents:
        p = inc.primary
        existing = open_alert_of_incident(store, inc.node, inc.gpu, inc.key, inc.first_seen - 1)
        by_person = bool(existing and existing[0] in by_hand)
        state = RESOLVED if by_person else inc.state
        closed = "person" if by_person else inc.closed_by
        stale = [f.inst.stale_since for f in inc.findings if f.inst.stale_since is not None]
        put_alert(
            store,
            AlertRecord(
                alert_id=existing[0] if existing else inc.alert_id,
                rule=p.rule.alert,
                category=p.category.value,
                severity=inc.severity.value,
                node=inc.node,
                gpu=inc.gpu,
                uuid=None if inc.gpu is None else gpu_uuid_at(store, inc.node, inc.gpu, inc.first_seen),
                action=inc.action.value,
                state=state,
                first_seen=min(inc.first_seen, existing[1]) if existing else inc.first_seen,
                last_seen=inc.last_seen,
                summary=inc.summary(),
                runbook=p.rule.runbook,
                incident=inc.key,
                evidence={
                    "findings": [f.as_dict() for f in inc.findings],
                    "series": sorted(
                        {(f.rule.p("metric"), f.rule.alert) for f in inc.findings if f.rule.p("metric")}
                    ),
                    "window": [inc.first_seen - 600, inc.last_seen + 600],
                    # what ended it (resolved), or since when its series are silent (stale)
                    **({"closed_by": closed} if closed else {}),
                    **({"stale_since": max(stale)} if state == STALE and stale else {}),
                },
            ),
        )
        n += 1
    if n:
        refresh_incidents(store)  # the incidents above them, from every alert as it now stands
    return n
