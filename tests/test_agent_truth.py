"""The agent tells the truth about itself: a collector that keeps failing is one event when it starts and one
when it recovers (with the count), its health gauge down meanwhile; a lost GPU's series leave /metrics; every
schedule (health, rules, export, retention, the NVML tiers) survives a clock stepped back an hour or forward
30 days. Real DuckDB, the fake GPU source, the agent's own clocks stepped by the test."""

from __future__ import annotations

from pathlib import Path

from fleettool.agent.loop import Agent, AgentConfig
from fleettool.collectors.base import Collected
from fleettool.collectors.nvml import NvmlCollector
from fleettool.model import Sample
from fleettool.sources.fake import FakeSource, parse_injection
from fleettool.store import Store
from tests.conftest import ROOT
from tests.test_agent_live import Clock

NODE = "truth-node"
T0 = 1_800_000_000.0


class Flaky:
    """A collector whose collections raise while `failing` is set (a scrape target down, a parser bug)."""

    id = "flaky"

    def __init__(self) -> None:
        self.reason: str | None = None
        self.failing = False

    def start(self) -> bool:
        return True

    def inflight(self) -> str | None:
        return None

    def collect(self, now: float) -> Collected:
        if self.failing:
            raise RuntimeError("target refused the connection")
        return Collected(samples=[Sample(now, NODE, None, None, "flaky_value", 1.0)])

    def close(self) -> None:
        pass


def test_a_collector_that_keeps_failing_is_one_event_then_one_on_recovery(tmp_path: Path) -> None:
    db = tmp_path / "a.duckdb"
    clk = Clock(T0)
    flaky = Flaky()
    ag = Agent(AgentConfig(db=db, node=NODE, quiet=True), [flaky], clock=clk.now, mono=clk.mono)
    ag.start()
    for k in range(1000):
        flaky.failing = 1 <= k <= 900
        ag.tick()
        clk.tick()
    assert ag.flush()
    with Store(db, read_only=True) as st:
        evs = st.rows("SELECT epoch(ts), message FROM events WHERE source = 'flaky' ORDER BY ts")
        up = st.rows(
            "SELECT epoch(ts), value FROM samples WHERE metric = 'agent_collector_up' "
            "AND sub = 'collector=flaky' ORDER BY ts"
        )
    assert evs == [
        (T0 + 1, "collector flaky failed: RuntimeError: target refused the connection"),
        (T0 + 901, "collector flaky recovered after 900 failed collections"),
    ]
    # the health gauge goes down at the first failure and up at the recovery (and is repeated every 10 s)
    assert (T0 + 1, 0.0) in up and (T0 + 901, 1.0) in up
    assert all(v == 0.0 for t, v in up if T0 + 1 <= t <= T0 + 900)


def _metrics_text(ag: Agent) -> str:
    from prometheus_client import CollectorRegistry, generate_latest

    from fleettool.export.metrics_server import AgentMetrics

    reg = CollectorRegistry()
    reg.register(AgentMetrics(NODE, lambda: ag.latest, lambda: ag.event_counts, gpus=lambda: ag.gpus))
    return generate_latest(reg).decode()


def _gpu_temps(text: str) -> dict[str, str]:
    """/metrics' GPU temperature lines by their gpu label."""
    out = {}
    for line in text.splitlines():
        if line.startswith("fleettool_gpu_temp_celsius{"):
            gpu = line.split('gpu="', 1)[1].split('"', 1)[0]
            out[gpu] = line
    return out


def test_a_lost_gpu_leaves_metrics_and_comes_back_when_it_answers() -> None:
    clk = Clock(T0)
    src = FakeSource(gpus=2, inject=[parse_injection("lost@gpu=1,after=5,for=60")], clock=T0)
    ag = Agent(
        AgentConfig(db=None, node=NODE, quiet=True), [NvmlCollector(src, NODE)], clock=clk.now, mono=clk.mono
    )
    ag.start()
    seen: list[set[str]] = []
    for _ in range(80):
        ag.tick()
        seen.append(set(_gpu_temps(_metrics_text(ag))))
        clk.tick()
    assert seen[4] == {"0", "1"}
    # lost at 5 s: its last temperature stays at most GPU_STALE_S (30 s), then the series is gone
    assert all(s == {"0", "1"} for s in seen[5:35]) and all(s == {"0"} for s in seen[36:65])
    assert all(s == {"0", "1"} for s in seen[65:])  # it answers again at 65 s: its series is back
    assert ag.gpu_stale_s == 30.0


def test_every_schedule_survives_a_step_back_of_an_hour_and_forward_of_30_days(tmp_path: Path) -> None:
    """Health (every 10 s), rules (their cadence), fleet export and retention (hourly) and the NVML tiers are
    each due again within their period after the wall clock is stepped back 1 h, forward 30 d, and back."""
    from fleettool.engine.incremental import RuleScheduler
    from fleettool.engine.rules import load_rules

    db = tmp_path / "a.duckdb"
    clk = Clock(T0)
    sched = RuleScheduler(load_rules())
    cfg = AgentConfig(db=db, node=NODE, quiet=True, export_to=str(tmp_path / "fleet"))  # type: ignore[call-arg]
    nvml = NvmlCollector(FakeSource(gpus=1, clock=T0), NODE)
    ag = Agent(cfg, [nvml], clock=clk.now, mono=clk.mono, scheduler=sched)
    ag.start()

    def run(seconds: int) -> None:
        for _ in range(seconds):
            ag.tick()
            clk.tick()
        assert ag.flush()

    run(5)
    for step in (-3600.0, 30 * 86400.0, -30 * 86400.0):
        clk.wall += step
        stepped = clk.now()
        run(11)
        # the hourly jobs ran at the flush after the step (not an hour, or 30 days, later)
        assert stepped <= ag._last_retention <= stepped + 11 and stepped <= ag._last_export <= stepped + 11
        assert max(sched.last.values()) >= stepped  # the rules judged after the step
        with Store(db, read_only=True) as st:
            health = st.rows(
                "SELECT epoch(ts) FROM samples WHERE metric = 'agent_buffer_rows' AND epoch(ts) >= ? ORDER BY ts",
                [stepped],
            )
            temps = st.scalar(
                "SELECT count(*) FROM samples WHERE metric = 'gpu_temp_c' AND epoch(ts) BETWEEN ? AND ?",
                [stepped, stepped + 10],
            )
            medium = st.scalar(
                "SELECT count(*) FROM samples WHERE metric = 'ecc_mode' AND epoch(ts) BETWEEN ? AND ?",
                [stepped, stepped + 10],
            )
        assert [h[0] for h in health][:2] == [stepped, stepped + 10]  # health: at the step, then 10 s on
        assert temps == 11 and medium >= 1  # the NVML tiers: every gauge, and the 10 s tier


def test_a_nic_gone_takes_its_ports_off_metrics_its_presence_stays_at_0(tmp_path: Path) -> None:
    """The fabric collector stops reading mlx5_4's port when the device leaves sysfs: its ib_port_state (4, ACTIVE)
    must not stay on /metrics for ever (it did: only GPU series went stale); ib_device_present says 0."""
    import shutil

    from collectors.fabric import FabricCollector

    root = tmp_path / "sys"
    shutil.copytree(ROOT / "fixtures" / "infiniband" / "sysfs-h100", root, symlinks=True)
    clk = Clock(T0)
    fab = FabricCollector(NODE, root, mono=clk.mono)
    ag = Agent(AgentConfig(db=None, node=NODE, quiet=True), [fab], clock=clk.now, mono=clk.mono)
    ag.start()

    def port_lines() -> list[str]:
        text = _metrics_text(ag)
        return [ln for ln in text.splitlines() if "mlx5_4" in ln and not ln.startswith("#")]

    for _ in range(5):
        ag.tick()
        clk.tick()
    assert any(ln.startswith("fleettool_ib_port_state") for ln in port_lines())
    shutil.rmtree(root / "class" / "infiniband" / "mlx5_4")
    for _ in range(40):
        ag.tick()
        clk.tick()
    lines = port_lines()
    assert not [ln for ln in lines if ln.startswith("fleettool_ib_port")], lines
    assert [ln.rsplit(" ", 1)[1] for ln in lines if ln.startswith("fleettool_ib_device_present")] == ["0.0"]
    # the other ports stay
    others = [ln for ln in _metrics_text(ag).splitlines() if ln.startswith("fleettool_ib_port_state{")]
    assert len(others) == 8 and not [ln for ln in others if "mlx5_4" in ln], others
