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


def _fleet_minutes(t0: float, seconds: int) -> list[Sample]:
    """4 GPUs every 5 s: GPU 2 thermally slowed from 5 min on, GPU 1 takes a double-bit error at 12 min and
    its bank count runs out; GPU 3 dips under its PCIe width for 30 s (shorter than the rule's `for`)."""
    out = []
    for s in range(0, seconds, 5):
        for g in range(4):
            u = f"GPU-{g}"
            hot = g == 2 and s >= 300
            out += [
                Sample(t0 + s, "n", g, u, "clock_event_reasons", float(0x40 if hot else 0x4)),
                Sample(t0 + s, "n", g, u, "ecc_dbe_volatile", 1.0 if g == 1 and s >= 720 else 0.0),
                Sample(t0 + s, "n", g, u, "remap_uncorrectable_rows", 512.0 if g == 1 and s >= 720 else 0.0),
                Sample(t0 + s, "n", g, u, "pcie_link_width", 8.0 if g == 3 and 400 <= s < 430 else 16.0),
                Sample(t0 + s, "n", g, u, "gpu_temp_c", 88.0 if hot else 60.0),
            ]
        out.append(Sample(t0 + s, "n", None, None, "gpu_count", 4.0))
    return out


def test_the_prefilter_skips_only_rules_with_nothing_to_find(tmp_path: Path) -> None:
    import shutil

    t0 = 1_800_000_000.0
    base = tmp_path / "base.duckdb"
    with Store(base) as st:
        st.write_samples(_fleet_minutes(t0, 1500))
    got = {}
    for on in (True, False):
        db = tmp_path / f"prefilter-{on}.duckdb"
        shutil.copy(base, db)
        sched = RuleScheduler(load_rules(), prefilter=on)
        with Store(db) as st:
            for now in range(300, 1501, 60):
                sched.run(st, t0 + now)
            got[on] = st.rows(
                "SELECT rule, gpu, state, epoch(first_seen), epoch(last_seen), summary FROM alerts ORDER BY ALL"
            )
        if on:
            assert sched.skipped > 0
            skipped = sched.skipped
    assert got[True] == got[False]  # the same alerts, to the second
    fired = {(r[0], r[1]) for r in got[True]}
    # (the double-bit error and the exhausted remaps are one memory incident on GPU 1)
    assert {("GpuThermalSlowdown", 2), ("GpuUncorrectableRemapsExhausted", 1)} <= fired
    assert not any(r[1] == 3 for r in got[True])  # 30 s under width is shorter than the rule's `for`
    assert skipped >= 100  # most threshold evaluations on a mostly healthy node found nothing to do


def test_agent_pages_an_injected_xid79_once_while_the_gpu_stays_lost(tmp_path: Path) -> None:
    """The drill of the README (`--source fake --inject xid:79@gpu=3`) on a fast clock: from the XID on, what
    the agent serves on /metrics for GPU 3 is one alert, GpuXid, critical, reboot-node, never renamed when the
    GPU's stopped series join it (2 min later) and never gone while the GPU is lost; the store holds one alert of
    GPU 3 with both findings."""
    import threading

    db = tmp_path / "agent.duckdb"
    src = FakeSource(gpus=4, inject=[parse_injection("xid:79@gpu=3,after=10")])
    col = NvmlCollector(src, "fake-node", interval_s=0.05)
    t_start = time.time()
    clock = lambda: t_start + (time.time() - t_start) * 60  # noqa: E731  (1 s = 1 min: 8 s = 8 min)
    cfg = AgentConfig(db=db, node="fake-node", interval_s=0.05, flush_s=0.5, duration_s=8.0, quiet=True)
    ag = Agent(cfg, [col], clock=clock, scheduler=RuleScheduler(load_rules()))
    th = threading.Thread(target=ag.run)
    th.start()
    served: list[tuple[float, list[tuple[object, ...]]]] = []
    while th.is_alive():  # what /metrics' fleettool_alerts is built from, as the agent goes
        gpu3 = [tuple(a[k] for k in ("rule", "severity", "action")) for a in ag.open_alerts if a["gpu"] == 3]
        served.append((clock() - t_start, gpu3))
        time.sleep(0.02)
    th.join()
    paged = [(t, g) for t, g in served if g]
    assert paged and paged[-1][0] > 370  # still paging past the 370 s where the XID's page went missing
    first = served.index(paged[0])
    assert all(g == [("GpuXid", "critical", "reboot-node")] for _, g in served[first:]), served[first:]
    with Store(db, read_only=True) as st:
        rows = st.query("SELECT rule, state, evidence FROM alerts WHERE gpu = 3")
    assert [(r["rule"], r["state"]) for r in rows] == [("GpuXid", "firing")]
    assert {f["rule"] for f in json.loads(rows[0]["evidence"])["findings"]} == {"GpuXid", "GpuSeriesStopped"}
