"""Incremental evaluation in the agent: each rule re-evaluated over a trailing window when it is due.

A rule's lookback covers what its state needs: its window, `for` and `keep_firing_for`, plus a margin. How often
a rule runs follows how fast it can change its mind (`cadence`): half its window plus `for`, between 1 and 10
minutes; trend rules (week-long windows over hourly points) every hour. Event rules and instant rules
(thresholds without `for`: a double-bit error, a pending remap) also run at once when the agent flushes for an
event (`run(..., urgent=True)`), which is what puts an XID on /metrics within a second. Each evaluation of a
rule is one SQL query whose planning costs ~6 ms (measured on the dev box, 33 rules: 0.2 s a pass over a small
store), so evaluating every rule every minute cost 0.33 % of a core; this cadence is ~0.1 %.

Alerts are upserted: an open alert of the same node, GPU and incident keeps its id and first_seen across
evaluations. An incident is folded from every rule's latest findings, not only the rules due now: the scheduler
keeps each rule's findings from its last evaluation. (Folding only the due rules' findings made the alert of an
XID 79 and its stopped series flip between the two rules, and lose the other's evidence, as one or the other
came due: the rule on /metrics changed mid-incident, and a finding of a rule judged alone, whose own first_seen
did not reach the open alert, became a second alert for the same GPU, left firing with a stale last_seen.)
A wall clock stepped back makes every rule due (it never waits for the clock to catch up).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fleettool.engine import prefilter
from fleettool.engine.evaluate import Finding, Incident, evaluate_rule, fold, write_alerts
from fleettool.engine.kinds._held import older_sql
from fleettool.engine.kinds._horizon import Horizons
from fleettool.engine.rules import Rule
from fleettool.engine.state import FIRING
from fleettool.store import Store

MARGIN_S = 600.0


def lookback(r: Rule) -> float:
    window = float(r.p("window", 0) or 0)
    return window + r.for_s + r.keep_s + MARGIN_S


def cadence(r: Rule) -> float:
    if r.kind == "trend":
        return 3600.0
    if r.kind == "nccl_localize":
        return 300.0  # one query over the runs table; an hour let a straggler found by a new run wait an hour
    if r.kind == "event":
        if holds(r):  # a lost GPU's line holds until its series come back: watched as often as they are
            return 60.0
        return 300.0  # judged at once on arrival (urgent); the timer only ages keep_firing_for out
    window = float(r.p("window", 0) or 0)
    return min(600.0, max(60.0, (window + r.for_s) / 2))


def holds(r: Rule) -> bool:
    """An event rule that reads lines saying a GPU is gone (kinds/_held.py)."""
    codes = [int(c) for c in r.p("codes") or []] or None
    return r.kind == "event" and older_sql(list(r.p("events") or ["xid"]), codes) is not None


def urgent(r: Rule) -> bool:
    """Judged at once when an event arrives: event rules, threshold rules that fire without `for`, and port
    episodes that count from their first down sample (a port going down: kinds/port_episodes.py)."""
    if r.kind == "port_episodes":
        return r.for_s == 0 and not r.p("down_for")
    return r.kind == "event" or (r.kind == "threshold" and r.for_s == 0)


@dataclass
class RuleScheduler:
    rules: list[Rule]
    last: dict[str, float] = field(default_factory=dict)
    evaluations: int = 0
    # skip the threshold, counter, peer and sql rules found to have nothing to find, and the event, port and
    # trend rules with no row of their inputs in their window (engine/prefilter)
    prefilter: bool = True
    skipped: int = 0
    # each rule's findings at its last evaluation: an incident folds them all, due now or not
    findings: dict[str, list[Finding]] = field(default_factory=dict)
    written: float = -1e18  # when alerts were last written
    seen: dict[str, Horizons] = field(default_factory=dict)  # each rule's last judgement: its nodes' times

    def due(self, now: float, *, urgent_too: bool = False) -> list[Rule]:
        out = []
        for r in self.rules:
            elapsed = now - self.last.get(r.alert, -1e18)
            if elapsed >= cadence(r) or elapsed < 0 or (urgent_too and urgent(r)):
                out.append(r)
        return out

    def event_kinds(self) -> frozenset[str]:
        """The event kinds the event rules read: one arriving makes the agent flush and judge at once."""
        return frozenset(str(k) for r in self.rules if r.kind == "event" for k in (r.p("events") or ["xid"]))

    def instant_metrics(self) -> frozenset[str]:
        """The metrics of the instant rules: a change of one of them makes the agent flush and judge at once."""
        return frozenset(str(r.p("metric")) for r in self.rules if urgent(r) and r.p("metric", None))

    def start(self, r: Rule, now: float) -> float:
        """Where a rule's evaluation starts: its lookback, or, for an alert still firing, its last active point
        less `for`: it must stay in the judgement until it resolves or goes stale, not drop out of the lookback
        and stay firing (series that stopped; an XID on a node whose own time moved on only with its next line,
        hours later); and for a GPU's stopped series still firing, its last sample (a GPU silent for longer than
        the lookback must not drop out of the judgement and leave its alert firing forever with the last_seen
        it had then)."""
        start = now - lookback(r)
        firing = [
            f.inst.last_seen - r.for_s - 1.0 for f in self.findings.get(r.alert, []) if f.state == FIRING
        ]
        if r.kind == "port_episodes":  # its whole episode: what it fired on and the up time that ends it
            firing = [f.inst.first_seen - 1.0 for f in self.findings.get(r.alert, []) if f.state == FIRING]
        if r.kind != "absent":
            start = min([start, *firing])
        if r.kind == "absent":
            held = [
                f.evidence.get("last_sample") for f in self.findings.get(r.alert, []) if f.state == FIRING
            ]
            start = min([start, *(float(t) - 1.0 for t in held if t is not None)])
        return start

    def run(self, store: Store, now: float, *, urgent: bool = False, final: bool = False) -> int:
        """Evaluate the due rules (and, `urgent`, the event and instant rules; `final`, at the agent's stop,
        every rule, so what it leaves in the store is judged up to its last sample) over their lookback ending
        now; write the alerts. Returns alerts written."""
        due = list(self.rules) if final else self.due(now, urgent_too=urgent)
        if not due:
            return 0
        windows = [(r, self.start(r, now), now) for r in due]
        skip: set[str] = set()
        if self.prefilter:
            # a rule with a finding from its last evaluation is judged in full: a skip never ends or drops one
            held = {a for a, fs in self.findings.items() if fs}
            skip = prefilter.quiet(store, windows) | prefilter.idle(store, windows, keep=held)
        self.skipped += len(skip)
        judged_before = dict(self.seen)
        horizons = Horizons(store, now)
        for r, start, end in windows:
            self.findings[r.alert] = (
                [] if r.alert in skip else evaluate_rule(store, r, start, end, horizons=horizons)
            )
            self.last[r.alert] = now
            self.seen[r.alert] = horizons
        self.evaluations += 1
        incidents = fold([f for fs in self.findings.values() for f in fs], now, horizons)
        # an incident whose every finding had resolved by its node's time when its rule last judged was written
        # then, whole; a
        # later window sees only part of it (the GPU's silence, then its XID, drop out of their lookbacks) and
        # must not rewrite it with less. Each finding against its own rule's last judgement: against the last
        # write by any rule, a resolution that happened between two judgements of its rule was never written
        # (a thermal alert stayed firing in the agent while replay resolved it)
        self.written = now
        return write_alerts(store, [i for i in incidents if not _settled(i, judged_before)])


def _settled(inc: Incident, judged: dict[str, Horizons]) -> bool:
    """Every finding of the incident had resolved by the previous judgement of its own rule, as far as its
    node's own time then reached (a node whose records stopped resolves nothing until its next record)."""
    return all(
        f.inst.resolved_at is not None
        and f.rule.alert in judged
        and f.inst.resolved_at <= judged[f.rule.alert].of(f.node)
        for f in inc.findings
    )
