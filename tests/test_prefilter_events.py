"""The agent's prefilter for the event, port and trend kinds (engine/prefilter.py `idle`): a due rule of these
kinds whose inputs have no row where its evaluation reads is skipped, and that changes no alert: an XID that
fires then resolves, a NIC line, a port that goes down and comes back, judged with the lever and without it,
every minute and whole (tests/test_rule_levers.py's `_both`)."""

from __future__ import annotations

from pathlib import Path

from fleettool.engine import prefilter
from fleettool.engine.incremental import RuleScheduler, lookback
from fleettool.ingest.report import IngestOptions
from fleettool.ingest.run import ingest
from fleettool.model import Event, Sample
from fleettool.store import Store
from tests.conftest import SCENARIOS
from tests.test_rule_levers import RULES, _both

T0 = 1_800_000_000.0
BY = {r.alert: r for r in RULES}
IDLE_KINDS = {"event", "port_episodes", "port_peer", "port_count", "trend"}
PORTS = [f"port=mlx5_{i}/1" for i in range(4)]


def _gpus(seconds: int, step: int = 30) -> list[Sample]:
    out = []
    for s in range(0, seconds, step):
        for g in range(2):
            out += [
                Sample(T0 + s, "n", g, f"GPU-{g}", "gpu_util_pct", 90.0),
                Sample(T0 + s, "n", g, f"GPU-{g}", "sm_clock_mhz", 1980.0),
            ]
    return out


def _ports(seconds: int, step: int = 30, down: tuple[int, int] = (1200, 1500)) -> list[Sample]:
    """Four ACTIVE ports; mlx5_1 down (state 1) from down[0] to down[1] seconds, then ACTIVE again."""
    out = []
    for s in range(0, seconds, step):
        t = T0 + s
        out.append(Sample(t, "n", None, None, "ib_device_present", 1.0, "dev=mlx5_0"))
        for p in PORTS:
            gone = p == PORTS[1] and down[0] <= s < down[1]
            out += [
                Sample(t, "n", None, None, "ib_port_state", 1.0 if gone else 4.0, p),
                Sample(t, "n", None, None, "ib_port_rate_gbps", 400.0, p),
                Sample(t, "n", None, None, "ib_port_width_lanes", 4.0, p),
                Sample(t, "n", None, None, "ib_port_link_layer", 1.0, p),
            ]
    return out


def test_event_port_and_trend_rules_without_inputs_are_skipped(tmp_path: Path) -> None:
    """GPU samples alone: every event, port and trend rule is idle; each input, where its rule reads, keeps its
    rule judged: a line of its kind (and `what`) in its window or untimed, a held XID 79 before the window (it
    holds while the GPU is gone), a port metric's point."""
    with Store(tmp_path / "q.duckdb") as st:
        st.write_samples(_gpus(1800))
        now = T0 + 1790
        windows = [(r, now - lookback(r), now) for r in RULES]
        idle = prefilter.idle(st, windows)
        assert idle == {r.alert for r in RULES if r.kind in IDLE_KINDS}
        assert {"GpuXid", "GpuFellOffTheBus", "NicLinkDown", "NicPortDown", "NicLost"} <= idle
        assert {"NicPortRateLow", "NicPortCountDropped", "GpuCorrectableRemapTrend"} <= idle
        assert prefilter.idle(st, windows, keep={"GpuXid"}) == idle - {"GpuXid"}  # a finding open: judged

        # an XID 13 long before the window: a plain event life, nothing to read; an XID 79 then holds
        st.write_events([Event(now - 30 * 86400, "n", "xid", "Xid 13", gpu=0, code=13)])
        assert "GpuXid" in prefilter.idle(st, windows)
        st.write_events([Event(now - 30 * 86400, "n", "xid", "Xid 79", gpu=1, code=79)])
        assert "GpuXid" not in prefilter.idle(st, windows)

        st.write_events([Event(None, "n", "fell-off-bus", "fallen off the bus")])  # untimed: always read
        st.write_events([Event(now - 60, "n", "nic", "link down", detail={"what": "link-down"})])
        idle = prefilter.idle(st, windows)
        assert {"GpuFellOffTheBus", "NicLinkDown"}.isdisjoint(idle)
        assert {"NicTxTimeout", "NvswitchSxid", "GpuGspTimeout"} <= idle  # other kinds and `what`s

        # NicPortDown reads its metric from before its window (an episode open at its start)
        st.write_samples(
            [Sample(now - lookback(BY["NicPortDown"]) - 60, "n", None, None, "ib_port_state", 4.0, "p")]
        )
        idle = prefilter.idle(st, windows)
        assert "NicPortDown" not in idle and "NicPortCountDropped" not in idle
        assert {"NicLost", "NicPortRateLow", "GpuCorrectableRemapTrend"} <= idle


def test_the_scheduler_skips_them_on_a_node_without_events(tmp_path: Path) -> None:
    """The agent's first pass over a node of GPU samples alone skips every rule of these kinds, with the
    threshold, counter and peer rules the thresholds' query finds quiet."""
    with Store(tmp_path / "s.duckdb") as st:
        st.write_samples(_gpus(1800))
        now = T0 + 1790
        quiet = prefilter.quiet(st, [(r, now - lookback(r), now) for r in RULES])
        sched = RuleScheduler(RULES)
        sched.run(st, now, final=True)
        assert sched.skipped == len(quiet) + sum(r.kind in IDLE_KINDS for r in RULES)


def test_the_lever_changes_no_alert_for_events_and_ports(tmp_path: Path) -> None:
    """An XID 13 at 10 min fires and resolves an hour later (keep_firing_for); a NIC line; mlx5_1 down from 20
    to 25 min: its port rules fire, then resolve. The same alerts with the lever and
    without, every minute and whole; rules were skipped."""
    base = tmp_path / "base.duckdb"
    seconds = 6000
    with Store(base) as st:
        st.write_samples(_gpus(seconds) + _ports(seconds))
        st.write_events(
            [
                Event(T0 + 600, "n", "xid", "Xid 13: Graphics Exception", gpu=0, uuid="GPU-0", code=13),
                Event(T0 + 1210, "n", "nic", "mlx5_1: link down", detail={"what": "link-down"}),
            ]
        )
    inc, skipped = _both(base, tmp_path, 60.0)
    assert skipped > 0
    whole, _ = _both(base, tmp_path, None)
    # every minute: the XID fired and resolved; the port's incident led by NicPortCountDropped with the NIC line
    assert ("GpuXid", "resolved") in {(str(a[0]), str(a[3])) for a in inc}
    assert any(str(a[0]) == "NicPortCountDropped" and "NicLinkDown" in str(a[6]) for a in inc)
    for alerts in (inc, whole):  # whole (at the end, over each rule's lookback): the port's episode alone
        (port,) = [a for a in alerts if str(a[0]).startswith("Nic")]
        assert port[3] == "resolved"
        assert T0 + 1200 <= float(str(port[4])) <= T0 + 1260  # from its down samples (whole: after `for`)


def test_the_trend_rule_is_judged_alike_on_its_scenario(tmp_path: Path) -> None:
    """row-remap-trend (left out of test_rule_levers' scenarios: a week judged every minute takes minutes),
    whole: its remap trend fires the same with the lever and without."""
    base = tmp_path / "base.duckdb"
    with Store(base) as st:
        ingest(st, SCENARIOS / "row-remap-trend", IngestOptions(quiet=True))
    whole, _ = _both(base, tmp_path, None)
    assert "GpuCorrectableRemapTrend" in {str(a[0]) for a in whole}
