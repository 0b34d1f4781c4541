"""What a rule kind is: its fields, its SQL evaluation, its PromQL form, and what its evaluation yields.

A kind sees a rule only through `RuleLike` (the few attributes it reads), so this package imports nothing else
of the engine: engine.rules validates against the registry, engine.evaluate and engine.promql dispatch through it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from fleettool.engine.kinds._promql import Names, PromAlert
from fleettool.model import Action, Category, Severity
from fleettool.store import Store

Entity = tuple[str, int | None, str]  # node, gpu, key
Obs = list[tuple[float, bool, float | None]]  # (event time, condition holds, value), in time order


class RuleLike(Protocol):
    """The part of a rule (engine.rules.Rule) a kind reads."""

    @property
    def alert(self) -> str: ...
    @property
    def keep_s(self) -> float: ...
    @property
    def runbook(self) -> str: ...
    def p(self, key: str, default: Any = None) -> Any: ...


@dataclass
class KindResult:
    obs: dict[Entity, Obs] = field(default_factory=dict)
    extra: dict[Entity, dict[str, Any]] = field(default_factory=dict)  # evidence and per-entity overrides


@dataclass
class Verdict:
    """What one finding says (severity, category, action, incident key, evidence, the words its summary can
    use); the rule's values, which a kind's `refine` hook may change."""

    severity: Severity
    category: Category
    action: Action
    incident: str
    evidence: dict[str, Any]
    summary_kw: dict[str, Any]


Evaluate = Callable[[Store, RuleLike, float, float], KindResult]
# a rule's PromQL form over one name set: one alerting rule (named after the rule), or several (the kind names
# them); a kind raises _promql.NotExpressible, saying why, for a rule it cannot write over that name set
PromQL = PromAlert | list[PromAlert]
# (rule, first_seen, last_seen, the entity's extra, the verdict to adjust)
Refine = Callable[[RuleLike, float, float, dict[str, Any], Verdict], None]


@dataclass(frozen=True)
class Kind:
    """One rule kind. `fields` are the rule fields it understands beyond the common ones; `requires` those a
    rule of this kind must set; `durations` those given as durations ("5m", "1h30m"), stored as seconds.
    `promql` is None when the kind has no PromQL form at all; `no_promql` then says why."""

    name: str
    fields: frozenset[str]
    evaluate: Evaluate
    promql: Callable[[RuleLike, Names], PromQL] | None = None
    no_promql: str = ""
    requires: tuple[str, ...] = ()
    durations: frozenset[str] = frozenset()
    refine: Refine | None = None  # per-finding judgement beyond the rule's own severity/category/action
    needs_boots: bool = False  # its findings need the node's boot times (extra["boots"])
    # a series kind: a firing alert whose entity has no observation for this long goes stale (engine/state.py);
    # None for kinds whose silence is normal (event lines) or is the condition itself (absent)
    stale_s: float | None = None

    def __post_init__(self) -> None:
        if (self.promql is None) == (not self.no_promql):
            raise ValueError(f"kind {self.name}: give either a PromQL form or the reason there is none")
        if not set(self.requires) | set(self.durations) <= self.fields:
            raise ValueError(f"kind {self.name}: requires/durations name fields it does not have")
