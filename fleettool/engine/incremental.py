"""Incremental evaluation in the agent: each rule re-evaluated over a trailing window when it is due.

A rule's lookback covers what its state needs: its window, `for` and `keep_firing_for`, plus a margin. Fast
rules run every minute; trend rules (week-long windows over hourly points) every hour. Alerts are upserted:
an open alert of the same node, GPU and incident keeps its id and first_seen across evaluations.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fleettool.engine.evaluate import evaluate_rule, fold, write_alerts
from fleettool.engine.rules import Rule
from fleettool.store import Store

MARGIN_S = 600.0


def lookback(r: Rule) -> float:
    window = float(r.p("window", 0) or 0)
    return window + r.for_s + r.keep_s + MARGIN_S


def cadence(r: Rule) -> float:
    return 3600.0 if r.kind in ("trend", "nccl_localize") else 60.0


@dataclass
class RuleScheduler:
    rules: list[Rule]
    last: dict[str, float] = field(default_factory=dict)
    evaluations: int = 0

    def due(self, now: float) -> list[Rule]:
        return [r for r in self.rules if now - self.last.get(r.alert, -1e18) >= cadence(r)]

    def run(self, store: Store, now: float) -> int:
        """Evaluate the due rules over their lookback ending now; write the alerts. Returns alerts written."""
        due = self.due(now)
        if not due:
            return 0
        findings = []
        for r in due:
            findings.extend(evaluate_rule(store, r, now - lookback(r), now))
            self.last[r.alert] = now
        self.evaluations += 1
        return write_alerts(store, fold(findings, now))
