"""A site's own rules beside the built-in set: `--rules DIR` adds to it (a name it has is refused), and
`--no-builtin-rules` replaces it; `rules check --rules DIR` judges the folder on its own runbooks and tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fleettool.engine.rules import RuleError, load_rules
from tests.conftest import FIXTURES, SCENARIOS, run_cli

SITE = FIXTURES / "site-rules"
BUILTIN = {r.alert for r in load_rules()}


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A copy of the site fixture (rules/, rules/tests/, runbooks/), to break on purpose."""
    shutil.copytree(SITE, tmp_path / "site")
    return tmp_path / "site" / "rules"


def test_rules_adds_to_the_built_in_set() -> None:
    r = run_cli("rules", "list", "--rules", str(SITE / "rules"), "--json")
    assert r.returncode == 0, r.stderr
    names = {d["alert"] for d in json.loads(r.stdout)}
    assert names == BUILTIN | {"SiteHotInlet"}


def test_no_builtin_rules_replaces_it() -> None:
    r = run_cli("rules", "list", "--rules", str(SITE / "rules"), "--no-builtin-rules", "--json")
    assert r.returncode == 0, r.stderr
    assert [d["alert"] for d in json.loads(r.stdout)] == ["SiteHotInlet"]


def test_no_builtin_rules_alone_is_a_usage_error() -> None:
    r = run_cli("rules", "list", "--no-builtin-rules")
    assert r.returncode == 2 and "--no-builtin-rules needs --rules" in r.stderr, r.stderr


def test_a_site_rule_named_as_a_built_in_one_is_refused(site: Path) -> None:
    f = site / "site.yaml"
    f.write_text(f.read_text().replace("SiteHotInlet", "GpuThermalSlowdown"))
    with pytest.raises(RuleError, match="is also a built-in rule \\(rules/thermal.yaml\\)"):
        load_rules([site], builtin=True)
    r = run_cli("rules", "check", "--rules", str(site))
    assert r.returncode == 3, r.stderr
    assert r.stderr.splitlines() == [
        f"fleettool: {f}: rule 'GpuThermalSlowdown' is also a built-in rule (rules/thermal.yaml): rename it, "
        "or replace the built-in set with --no-builtin-rules"
    ]
    assert load_rules([site], builtin=False)[0].alert == "GpuThermalSlowdown"  # alone, it is a site's choice


def test_rules_check_judges_a_site_folder_on_its_own_runbooks_and_tests() -> None:
    for extra in ((), ("--no-builtin-rules",)):
        r = run_cli("rules", "check", "--rules", str(SITE / "rules"), *extra, "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        d = json.loads(r.stdout)
        assert d["problems"] == [] and d["rules"] == len(BUILTIN) * (not extra) + 1


def test_rules_check_names_what_a_site_folder_lacks(site: Path) -> None:
    (site.parent / "runbooks" / "site-hot-inlet.md").rename(site.parent / "runbooks" / "site-cold-aisle.md")
    shutil.rmtree(site / "tests")
    r = run_cli("rules", "check", "--rules", str(site), "--json")
    assert r.returncode == 1
    books = site.parent / "runbooks"
    assert json.loads(r.stdout)["problems"] == [
        f"{site}/site.yaml: rule SiteHotInlet: no runbook {books}/site-hot-inlet.md",
        f"{books}/site-cold-aisle.md: no rule named after it",
        f"{site / 'tests'}: no rule tests (*.test.yaml): 1 rules not covered",
        f"{site}/site.yaml: rule SiteHotInlet: no test where it fires",
        f"{site}/site.yaml: rule SiteHotInlet: no must-not-fire test (empty exp_alerts)",
    ]


def test_replay_judges_with_both_sets(tmp_path: Path) -> None:
    """The thermal scenario under the built-in rules plus a site's: both kinds of alert, one run."""
    r = run_cli(
        "replay",
        str(SCENARIOS / "thermal-throttle"),
        "--db",
        str(tmp_path / "t.duckdb"),
        "--rules",
        str(SITE / "rules"),
        "--json",
        "-q",
    )
    assert r.returncode == 0, r.stderr
    r = run_cli("alerts", "--db", str(tmp_path / "t.duckdb"), "--json")
    rules = {a["rule"] for a in json.loads(r.stdout)}
    assert "SiteHotInlet" in rules and "GpuThermalSlowdown" in rules, rules
