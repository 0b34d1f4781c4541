"""The rule-kind registry: every kind module is registered, every registered kind can be written in a rule
file, and every kind either has a PromQL form or says why it has none."""

from __future__ import annotations

import pkgutil

import pytest

import fleettool.engine.kinds as kinds_pkg
from fleettool.engine.kinds import KINDS, Kind
from fleettool.engine.rules import RuleError, load_rules, parse_rules


def test_every_kind_module_is_registered() -> None:
    modules = {m.name for m in pkgutil.iter_modules(kinds_pkg.__path__) if not m.name.startswith("_")}
    registered = {k.evaluate.__module__.rsplit(".", 1)[1] for k in KINDS.values()}
    assert modules == registered


def test_registry_keys_are_kind_names() -> None:
    assert all(name == k.name for name, k in KINDS.items())
    assert list(KINDS) == [
        "threshold",
        "increase",
        "rate",
        "trend",
        "peer",
        "event",
        "absent",
        "nccl_localize",
        "sql",
        "port_episodes",
        "port_peer",
        "port_count",
    ]


@pytest.mark.parametrize("name", list(KINDS))
def test_kind_has_promql_or_a_reason(name: str) -> None:
    k = KINDS[name]
    assert (k.promql is None) == bool(k.no_promql)


def test_a_kind_must_say_why_it_has_no_promql() -> None:
    with pytest.raises(ValueError, match="reason"):
        Kind(name="x", fields=frozenset(), evaluate=KINDS["sql"].evaluate)


def test_builtin_rules_use_registered_kinds() -> None:
    assert {r.kind for r in load_rules()} <= set(KINDS)


@pytest.mark.parametrize("name", [n for n, k in KINDS.items() if k.requires])
def test_required_fields_are_enforced(name: str) -> None:
    need = KINDS[name].requires[0]
    text = f"groups: [{{name: g, rules: [{{alert: A, kind: {name}, severity: info, category: xid, action: none}}]}}]"
    with pytest.raises(RuleError, match=f"needs a {need}"):
        parse_rules(text, "k.yaml")


def test_durations_are_seconds_per_kind() -> None:
    (r,) = parse_rules(
        "groups: [{name: g, rules: [{alert: A, kind: trend, metric: remap_correctable_rows, window: 1h30m, "
        "horizon: 2w, critical_within: 1d, severity: info, category: row-remap, action: none}]}]",
        "k.yaml",
    )
    assert (r.p("window"), r.p("horizon"), r.p("critical_within")) == (5400.0, 1209600.0, 86400.0)
