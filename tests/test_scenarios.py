"""Every scenario meets its expect.json through `fleettool replay` then `fleettool alerts --json`:
the right category, node, GPU, severity and action; `quiet` means no other warning or critical alert."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fleettool.model import Severity
from tests.conftest import SCENARIOS, run_cli

NAMES = sorted(p.name for p in SCENARIOS.iterdir() if (p / "expect.json").exists())


def matches(alert: dict, exp: dict) -> bool:  # type: ignore[type-arg]
    return (
        alert["node"] == exp["node"]
        and alert["gpu"] == exp["gpu"]
        and alert["category"] in exp["categories"]
        and alert["action"] in exp["actions"]
        and alert["action"] not in exp.get("forbid_actions", [])
        and Severity(alert["severity"]).rank >= Severity(exp["min_severity"]).rank
    )


@pytest.mark.parametrize("name", NAMES)
def test_scenario(name: str, tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    rep = run_cli("replay", str(SCENARIOS / name), "--db", str(db), "-q")
    assert rep.returncode == 0, rep.stderr
    out = run_cli("alerts", "--db", str(db), "--json")
    assert out.returncode == 0, out.stderr
    alerts = json.loads(out.stdout)
    for a in alerts:
        assert set(a) >= {
            "rule",
            "category",
            "severity",
            "node",
            "gpu",
            "action",
            "state",
            "first_seen",
            "last_seen",
            "summary",
            "runbook",
        }
        assert a["first_seen"].endswith("Z") and a["runbook"].startswith("runbooks/")
        assert not re.search(r"\de[+-]\d", a["summary"]), a[
            "summary"
        ]  # durations for people, never 7.4e+07 s
    expect = json.loads((SCENARIOS / name / "expect.json").read_text())
    used: set[int] = set()
    for exp in expect["expect"]:
        hits = [i for i, a in enumerate(alerts) if matches(a, exp)]
        assert hits, f"{name}: no alert matches {exp}; got {alerts}"
        used.update(hits)
    if expect.get("quiet"):
        noisy = [
            a for i, a in enumerate(alerts) if i not in used and a["severity"] in ("warning", "critical")
        ]
        assert noisy == [], f"{name}: unexpected alerts {noisy}"


def test_one_incident_per_fault(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    assert run_cli("replay", str(SCENARIOS / "dbe-remap-pending"), "--db", str(db), "-q").returncode == 0
    from fleettool.store import Store

    with Store(db, read_only=True) as st:
        rows = st.query("SELECT rule, evidence FROM alerts")
    assert len(rows) == 1
    ev = json.loads(rows[0]["evidence"])
    rules = sorted({f["rule"] for f in ev["findings"]})
    assert rules == ["GpuDoubleBitError", "GpuRowRemapPending", "GpuXid"]
    xids = sorted(f["key"] for f in ev["findings"] if f["rule"] == "GpuXid")
    assert xids == ["xid:48", "xid:63"]
    assert any(e["code"] == 48 for f in ev["findings"] for e in f.get("events", []))


@pytest.mark.parametrize("name", NAMES)
def test_rules_two_at_a_time_find_the_same(name: str, tmp_path: Path) -> None:
    """replay evaluates the rules two at a time, each thread on its own cursor: the same incidents, findings
    and order as one at a time."""
    from fleettool.engine.evaluate import evaluate
    from fleettool.engine.rules import load_rules
    from fleettool.ingest.report import IngestOptions
    from fleettool.ingest.run import ingest
    from fleettool.store import Store

    rules = load_rules()
    with Store(tmp_path / "s.duckdb") as s:
        ingest(s, SCENARIOS / name, IngestOptions(quiet=True))
        one = evaluate(s, rules)
        two = evaluate(s, rules, workers=2)
    assert [(i.node, i.gpu, i.key, repr(i.findings)) for i in two] == [
        (i.node, i.gpu, i.key, repr(i.findings)) for i in one
    ]
