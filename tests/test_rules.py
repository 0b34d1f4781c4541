"""The rule set as data: lint, the rule unit tests, the YAML schema errors, and the Prometheus export checked
and unit-tested by the real promtool on the same test files."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fleettool.engine.promql import export_prometheus
from fleettool.engine.rules import RuleError, kebab, load_rules, parse_rules
from fleettool.engine.ruletest import builtin_test_files, expand_values, run_test_file
from tests.conftest import ROOT, run_cli

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None and not os.environ.get("CI"), reason="promtool not installed (Debian package prometheus)"
)


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
                            {"series": 'fleettool_pcie_link_width{hostname="n", gpu="0"}', "values": "16x20"},
                            {
                                "series": 'fleettool_pcie_link_width_max{hostname="n", gpu="0"}',
                                "values": "16x20",
                            },
                        ],
                        "alert_rule_test": [
                            {
                                "eval_time": "10m",
                                "alertname": "PcieLinkWidthDegraded",
                                "exp_alerts": [{"exp_labels": {"hostname": "n", "gpu": "0"}}],
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


def _promtool_tests(exported: set[str], out_dir: Path) -> list[Path]:
    """Our rule test files, minus what only fleettool can evaluate (events, NCCL runs, recorded files)."""
    written = []
    for src in builtin_test_files():
        doc = yaml.safe_load(src.read_text())
        cases = []
        for case in doc["tests"]:
            if any(case.get(k) for k in ("input_events", "input_nccl_runs", "input_files")):
                continue
            ats = [a for a in case.get("alert_rule_test") or [] if a["alertname"] in exported]
            if not ats or not case.get("input_series"):
                continue
            cases.append({**case, "alert_rule_test": ats})
        if cases:
            p = out_dir / src.name
            p.write_text(
                yaml.safe_dump({"rule_files": ["exported.yml"], "evaluation_interval": "1m", "tests": cases})
            )
            written.append(p)
    return written


@needs_promtool
def test_export_passes_real_promtool_check_and_test(tmp_path: Path) -> None:
    assert PROMTOOL is not None, "promtool is required in CI (.ci/run installs the Debian package prometheus)"
    text, skipped = export_prometheus(load_rules())
    assert "GpuThermalSlowdown" in text and "NcclSlowNode" in skipped
    (tmp_path / "exported.yml").write_text(text)
    chk = subprocess.run(
        [PROMTOOL, "check", "rules", str(tmp_path / "exported.yml")], capture_output=True, text=True
    )
    assert chk.returncode == 0, chk.stdout + chk.stderr
    exported = {r["alert"] for g in yaml.safe_load(text)["groups"] for r in g["rules"]}
    # promtool compares annotations too; the expressions, labels and timing are what the shared tests check
    bare = yaml.safe_load(text)
    for g in bare["groups"]:
        for r in g["rules"]:
            r.pop("annotations", None)
    (tmp_path / "exported.yml").write_text(yaml.safe_dump(bare))
    files = _promtool_tests(exported, tmp_path)
    assert len(files) >= 5
    res = subprocess.run(
        [PROMTOOL, "test", "rules", *map(str, files)], capture_output=True, text=True, cwd=tmp_path
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
