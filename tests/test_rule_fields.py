"""Rules mean what they say: a field the engine declares, it implements; one it does not, `rules check` refuses.

- `sub: "link=3"` on a threshold or increase rule judges that one sub-series (it fired on every link), in the
  store's SQL and in the exported PromQL alike.
- `where`, `min_value_of` (threshold) and `mode` (absent) were accepted and ignored: now refused by name.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleettool.collectors.base import Collected
from fleettool.engine.kinds import KINDS
from fleettool.engine.kinds._promql import FLEETTOOL
from fleettool.engine.rules import RuleError, parse_rules
from fleettool.model import Sample
from fleettool.pipeline import Pipeline
from fleettool.store import Store
from tests.conftest import run_cli

RULE = """
groups:
- name: t
  rules:
  - alert: NvlinkThreeDown
    kind: threshold
    metric: nvlink_link_up
    op: "<"
    value: 1
    sub: "link=3"
    severity: warning
    category: nvlink
    action: inspect-hardware
  - alert: NvlinkThreeCrc
    kind: increase
    metric: nvlink_crc_flit_errors_total
    window: 5m
    op: ">"
    value: 10
    sub: "link=3"
    severity: warning
    category: nvlink
    action: inspect-hardware
"""


def _samples(t0: float) -> list[Sample]:
    out = []
    for i in range(20):
        t = t0 + 15 * i
        out.append(Sample(t, "gpu-1", 0, None, "nvlink_link_up", 0.0, "link=0"))  # link 0 down: not asked
        out.append(Sample(t, "gpu-1", 0, None, "nvlink_link_up", 1.0 if i < 10 else 0.0, "link=3"))
        out.append(Sample(t, "gpu-1", 0, None, "nvlink_crc_flit_errors_total", 100.0 * i, "link=0"))
        out.append(Sample(t, "gpu-1", 0, None, "nvlink_crc_flit_errors_total", 0.0, "link=3"))
    return out


def test_sub_judges_the_one_sub_series_it_names(tmp_path: Path) -> None:
    rules = parse_rules(RULE, "t.yaml")
    with Store(tmp_path / "s.duckdb") as st:
        p = Pipeline(st, rules)
        p.write(Collected(samples=_samples(time.time() - 3600)), time.time())
        incidents = p.evaluate()
    keys = sorted((i.primary.rule.alert, i.primary.key) for i in incidents)
    # link 3 went down (fires); link 0 was down all along and its CRC counter climbed: neither is asked about
    assert keys == [("NvlinkThreeDown", "link=3")], keys


def test_sub_is_a_label_matcher_in_the_exported_rule() -> None:
    down, crc = parse_rules(RULE, "t.yaml")
    expr = KINDS["threshold"].promql(down, FLEETTOOL).expr  # type: ignore[union-attr,misc]
    assert 'link="3"' in expr, expr
    expr = KINDS["increase"].promql(crc, FLEETTOOL).expr  # type: ignore[union-attr,misc]
    assert 'link="3"}[5m]' in expr, expr


@pytest.mark.parametrize(
    ("kind", "field", "value"),
    [
        ("threshold", "where", "gpu=0"),
        ("threshold", "min_value_of", "gpu_temp_c"),
        ("absent", "mode", "node"),
    ],
)
def test_a_field_the_engine_ignores_is_refused(tmp_path: Path, kind: str, field: str, value: str) -> None:
    metric = "gpu_temp_c"
    text = (
        f"groups:\n- name: t\n  rules:\n  - alert: X\n    kind: {kind}\n    metric: {metric}\n"
        f"    {field}: {value}\n    severity: info\n    category: thermal\n    action: none\n"
    )
    with pytest.raises(RuleError, match=rf"unknown field\(s\) \['{field}'\]"):
        parse_rules(text, "t.yaml")
    f = tmp_path / "r.yaml"
    f.write_text(text)
    r = run_cli("rules", "check", "--rules", str(f))
    assert r.returncode != 0 and field in (r.stdout + r.stderr)


def test_a_sub_that_is_not_label_equals_value_is_refused() -> None:
    with pytest.raises(RuleError, match="label=value"):
        parse_rules(RULE.replace('"link=3"', '"3"', 1), "t.yaml")
