"""Findings and incidents: a *finding* is one rule's alert instance on one entity (what promtool would call an
alert); an *incident* is what an on-call engineer gets paged for: every finding of one GPU (or node) with the same
incident key whose times overlap (`fold`), with the worst severity, the strongest action, and every finding as
evidence. Its state: firing while any finding fires, else stale while any finding's data stopped, else resolved,
with what closed it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from fleettool.engine.kinds._horizon import Horizons, horizon_of
from fleettool.engine.rules import Rule
from fleettool.engine.state import FIRING, RESOLVED, STALE, Instance
from fleettool.model import Action, Category, Severity


@dataclass
class Finding:
    rule: Rule
    node: str
    gpu: int | None
    key: str
    inst: Instance
    severity: Severity
    category: Category
    action: Action
    incident: str
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return self.inst.state

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule.alert,
            "key": self.key,
            "state": self.inst.state,
            "severity": self.severity.value,
            "category": self.category.value,
            "action": self.action.value,
            "first_seen": self.inst.first_seen,
            "fired_at": self.inst.fired_at,
            "last_seen": self.inst.last_seen,
            "resolved_at": self.inst.resolved_at,
            "stale_since": self.inst.stale_since,
            "value": self.inst.value,
            "summary": self.summary,
            **self.evidence,
        }


@dataclass
class Incident:
    node: str
    gpu: int | None
    key: str
    findings: list[Finding]

    @property
    def primary(self) -> Finding:
        """The finding the alert is named after: the worst; among equals, a line that says the GPU is gone
        (held until it is back, kinds/_held.py), the first of them, since it is the cause and pages first (its
        stopped series join later and must not rename the alert on /metrics mid-incident); then priority."""

        def rank(f: Finding) -> tuple[int, int, float, int, int]:
            held = (
                "held" in f.evidence and f.category == Category.GPU_LOST
            )  # a lost GPU's line, not its series
            return (
                f.severity.rank,
                held,
                -f.inst.first_seen if held else 0.0,
                f.rule.priority,
                f.action.rank,
            )

        return max(self.findings, key=rank)

    @property
    def severity(self) -> Severity:
        return max((f.severity for f in self.findings), key=lambda s: s.rank)

    @property
    def action(self) -> Action:
        return max((f.action for f in self.findings), key=lambda a: a.rank)

    @property
    def first_seen(self) -> float:
        return min(f.inst.fired_at or f.inst.first_seen for f in self.findings)

    @property
    def last_seen(self) -> float:
        return max(f.inst.last_seen for f in self.findings)

    @property
    def state(self) -> str:
        """Firing while any finding fires; else stale while any finding's data stopped; else resolved."""
        states = {f.state for f in self.findings}
        return FIRING if FIRING in states else STALE if STALE in states else RESOLVED

    @property
    def closed_by(self) -> str | None:
        """What ended a resolved incident: the evidence of its held faults' closing (kinds/_held.py: boot,
        reset, new-gpu, lifecycle-return, returned), else 'cleared' (its conditions cleared for
        keep_firing_for); None while open."""
        if self.state != RESOLVED:
            return None
        how = sorted({str(f.evidence["held"]) for f in self.findings if f.evidence.get("held")})
        return ",".join(how) or "cleared"

    @property
    def alert_id(self) -> str:
        h = hashlib.sha256(f"{self.node}|{self.gpu}|{self.key}|{self.first_seen:.0f}".encode()).hexdigest()
        return h[:16]

    def summary(self) -> str:
        """The primary finding's summary; the same rule's other entities (ports, links) named after it, and the
        other rules in parentheses: `gpu-17 port=mlx5_2/1: went down ...; also port=mlx5_7/1, port=mlx5_8/1`."""
        p = self.primary
        others = sorted({f.rule.alert for f in self.findings} - {p.rule.alert})
        keys = sorted({f.key for f in self.findings if f.rule.alert == p.rule.alert and f.key} - {p.key})
        also = f"; also {', '.join(keys[:4])}" + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")
        return p.summary + (also if keys else "") + (f" (with {', '.join(others)})" if others else "")


def _end_of(f: Finding, horizon: float) -> float:
    if f.inst.resolved_at is not None:
        return f.inst.resolved_at
    if f.inst.stale_since is not None:
        return f.inst.stale_since
    return horizon


def fold(findings: list[Finding], horizon: float, horizons: Horizons | None = None) -> list[Incident]:
    """One incident per fault: findings of the same (node, gpu, incident key) whose times overlap (an open
    finding lasts to its node's horizon)."""
    by: dict[tuple[str, int | None, str], list[Finding]] = {}
    for f in findings:
        by.setdefault((f.node, f.gpu, f.incident), []).append(f)
    out: list[Incident] = []
    for (node, gpu, key), fs in by.items():
        fs.sort(key=lambda f: f.inst.first_seen)
        cur: list[Finding] = []
        cur_end = -1e300
        for f in fs:
            if cur and f.inst.first_seen > cur_end:
                out.append(Incident(node, gpu, key, cur))
                cur = []
            cur.append(f)
            cur_end = max(cur_end, _end_of(f, horizon_of(horizons, node, horizon)))
        if cur:
            out.append(Incident(node, gpu, key, cur))
    # node-level findings of a key join a GPU incident of the same node and key when there is exactly one
    return out
