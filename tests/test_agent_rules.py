"""The agent evaluates the rules incrementally: a fault injected into the fake source becomes an alert in the
agent's own database while it runs, and the alert keeps its id across evaluations."""

from __future__ import annotations

import json
import time
from pathlib import Path

from fleettool.agent.loop import Agent, AgentConfig
from fleettool.collectors.nvml import NvmlCollector
from fleettool.engine.incremental import RuleScheduler, cadence, lookback
from fleettool.engine.rules import load_rules
from fleettool.model import Sample
from fleettool.sources.fake import FakeSource, parse_injection
from fleettool.store import Store
from tests.conftest import run_cli


def test_scheduler_cadence_and_lookback() -> None:
    rules = {r.alert: r for r in load_rules()}
    assert cadence(rules["GpuThermalSlowdown"]) == 60 and cadence(rules["GpuCorrectableRemapTrend"]) == 3600
    assert lookback(rules["GpuCorrectableRemapTrend"]) >= 7 * 86400
    sched = RuleScheduler([rules["GpuThermalSlowdown"], rules["GpuCorrectableRemapTrend"]])
    assert len(sched.due(1000.0)) == 2
    sched.last = {"GpuThermalSlowdown": 990.0, "GpuCorrectableRemapTrend": 990.0}
    assert [r.alert for r in sched.due(1060.0)] == ["GpuThermalSlowdown"]


def test_incremental_alert_keeps_its_id(tmp_path: Path) -> None:
    rules = [r for r in load_rules() if r.alert == "GpuRowRemapPending"]
    sched = RuleScheduler(rules)
    t0 = 1_800_000_000.0
    with Store(tmp_path / "a.duckdb") as st:
        st.write_samples([Sample(t0 + i * 30, "n", 1, None, "remap_pending", 1.0) for i in range(10)])
        assert sched.run(st, t0 + 300) == 1
        first = st.query("SELECT alert_id, first_seen FROM alerts")
        st.write_samples([Sample(t0 + 300 + i * 30, "n", 1, None, "remap_pending", 1.0) for i in range(10)])
        sched.last.clear()
        sched.run(st, t0 + 600)
        again = st.query("SELECT alert_id, first_seen, state FROM alerts")
    assert len(again) == 1 and again[0]["alert_id"] == first[0]["alert_id"]
    assert again[0]["first_seen"] == first[0]["first_seen"] and again[0]["state"] == "firing"


def test_agent_raises_an_alert_for_an_injected_thermal_fault(tmp_path: Path) -> None:
    db = tmp_path / "agent.duckdb"
    src = FakeSource(gpus=4, inject=[parse_injection("thermal@gpu=2")])
    col = NvmlCollector(src, "fake-node", interval_s=0.05)
    rules = [r for r in load_rules() if r.alert == "GpuThermalSlowdown"]
    # event time runs fast: 1 wall second = 1 minute of agent clock, so `for: 2m` passes in seconds
    t_start = time.time()
    clock = lambda: t_start + (time.time() - t_start) * 60  # noqa: E731
    cfg = AgentConfig(db=db, node="fake-node", interval_s=0.05, flush_s=0.5, duration_s=6.0, quiet=True)
    ag = Agent(cfg, [col], clock=clock, scheduler=RuleScheduler(rules))
    ag.run()
    out = json.loads(run_cli("alerts", "--db", str(db), "--json").stdout)
    assert [(a["rule"], a["node"], a["gpu"], a["category"]) for a in out] == [
        ("GpuThermalSlowdown", "fake-node", 2, "thermal")
    ]
