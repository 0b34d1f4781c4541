"""The rule set as data: lint, the rule unit tests, the YAML schema errors. The same test files run under the
real promtool against the exported Prometheus rules in tests/test_promtool_rules.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fleettool.engine.rules import RuleError, kebab, load_rules, parse_rules
from fleettool.engine.ruletest import builtin_test_files, expand_values, run_test_file
from tests.conftest import ROOT, run_cli


def test_rules_check_passes() -> None:
    r = run_cli("rules", "check")
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("path", builtin_test_files(), ids=lambda p: p.name)
def test_rule_unit_tests(path: Path) -> None:
    results = run_test_file(path)
    assert results
    bad = [f"{r.alertname}@{r.eval_time:g}: {r.message}" for r in results if not r.ok]
    assert bad == []


def test_rules_test_cli_fails_on_a_wrong_expectation(tmp_path: Path) -> None:
    t = tmp_path / "wrong.test.yaml"
    t.write_text(
        yaml.safe_dump(
            {
                "rule_files": [str(ROOT / "rules" / "pcie.yaml")],
                "tests": [
                    {
                        "interval": "1m",
                        "input_series": [
                            {"series": 'fleettool_pcie_link_width{Hostname="n", gpu="0"}', "values": "16x20"},
                            {
                                "series": 'fleettool_pcie_link_width_max{Hostname="n", gpu="0"}',
                                "values": "16x20",
                            },
                        ],
                        "alert_rule_test": [
                            {
                                "eval_time": "10m",
                                "alertname": "PcieLinkWidthDegraded",
                                "exp_alerts": [{"exp_labels": {"Hostname": "n", "gpu": "0"}}],
                            }
                        ],
                    }
                ],
            }
        )
    )
    r = run_cli("rules", "test", str(t))
    assert r.returncode == 1 and "FAIL" in r.stdout


def test_expanding_notation() -> None:
    assert expand_values("1x3") == [1, 1, 1, 1]
    assert expand_values("0+10x3 _ 7 _x2") == [0, 10, 20, 30, None, 7, None, None]
    assert expand_values("5-1x2") == [5, 4, 3]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "groups: [{name: g, rules: [{alert: A, kind: nope, severity: info, category: xid, action: none}]}]",
            "unknown kind 'nope'",
        ),
        (
            "groups: [{name: g, rules: [{alert: A, kind: threshold, metric: bogus, severity: info, category: xid, action: none}]}]",
            "unknown metric 'bogus'",
        ),
        (
            "groups: [{name: g, rules: [{alert: A, kind: threshold, metric: power_w, severity: loud, category: xid, action: none}]}]",
            "'loud' is not a valid Severity",
        ),
        (
            "groups: [{name: g, rules: [{alert: A, kind: threshold, metric: power_w, frobnicate: 1, severity: info, category: xid, action: none}]}]",
            "unknown field(s) ['frobnicate']",
        ),
        (
            "groups: [{name: g, rules: [{alert: A, kind: threshold, metric: power_w, for: soon, severity: info, category: xid, action: none}]}]",
            "bad duration",
        ),
        ("groups:\n  - name: g\n    rules: [\n", "bad.yaml:"),
    ],
)
def test_schema_errors_name_the_file_and_rule(text: str, needle: str) -> None:
    with pytest.raises(RuleError) as e:
        parse_rules(text, "bad.yaml")
    assert needle in str(e.value) and "bad.yaml" in str(e.value)


def test_duplicate_names_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text((ROOT / "rules" / "pcie.yaml").read_text())
    (tmp_path / "b.yaml").write_text((ROOT / "rules" / "pcie.yaml").read_text())
    with pytest.raises(RuleError, match="also defined in"):
        load_rules([tmp_path])


def test_runbook_link_derived_from_the_name() -> None:
    assert kebab("GpuThermalSlowdown") == "gpu-thermal-slowdown"
    assert kebab("NvlinkCrcErrorRate") == "nvlink-crc-error-rate"
    for r in load_rules():
        assert r.runbook == f"runbooks/{kebab(r.alert)}.md"
        assert (ROOT / r.runbook).exists()


def test_every_runbook_has_the_sections() -> None:
    for p in sorted((ROOT / "runbooks").glob("*.md")):
        text = p.read_text()
        assert text.startswith("---\nalert: "), p
        for section in ("Meaning", "Impact", "Diagnosis", "Mitigation", "Escalation"):
            assert f"\n## {section}\n" in text, (p.name, section)
