"""The agent's rule levers (issue 33) change no alert: the prefilter for the increase, rate and peer kinds
(engine/prefilter.py) skips only rules with nothing to find. Each check judges the same store with the lever and
without it, over the built-in rules, incrementally (the agent's scheduler every minute) and whole (every rule at
once over the whole recording, as at the agent's stop), and compares the alerts to the second."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from fleettool.engine import prefilter
from fleettool.engine.evaluate import data_range
from fleettool.engine.incremental import RuleScheduler, lookback
from fleettool.engine.rules import RuleError, load_rules, parse_rules
from fleettool.ingest.report import IngestOptions
from fleettool.ingest.run import ingest
from fleettool.model import Sample
from fleettool.store import Store
from tests.conftest import SCENARIOS

RULES = load_rules()
T0 = 1_800_000_000.0
Alerts = list[tuple[object, ...]]


def _alerts(st: Store) -> Alerts:
    return st.rows(
        "SELECT rule, node, gpu, state, epoch(first_seen), epoch(last_seen), summary FROM alerts ORDER BY ALL"
    )


def _judge(db: Path, on: bool, step: float | None) -> tuple[Alerts, RuleScheduler]:
    """The store judged by the agent's scheduler every `step` seconds over its data, or whole (None)."""
    sched = RuleScheduler(RULES, prefilter=on)
    with Store(db) as st:
        rng = data_range(st)
        assert rng is not None
        if step is None:
            sched.run(st, rng[1], final=True)
        else:
            t = rng[0] + 60.0
            while t < rng[1] + step:
                sched.run(st, min(t, rng[1]))
                t += step
        return _alerts(st), sched


def _both(base: Path, tmp: Path, step: float | None) -> tuple[Alerts, int]:
    got: dict[bool, Alerts] = {}
    skipped = 0
    for on in (True, False):
        db = tmp / f"lever-{on}-{step}.duckdb"
        shutil.copy(base, db)
        got[on], sched = _judge(db, on, step)
        if on:
            skipped = sched.skipped
    assert got[True] == got[False], "the prefilter changed the alerts"
    return got[True], skipped


def _node(seconds: int) -> list[Sample]:
    """8 loaded GPUs every 10 s. GPU 3's PCIe link drops to x8 at 5 min; GPU 6's SM clock falls to 70 % of its
    peers at 8 min; GPU 5's NVLink CRC counter climbs 40,000 a minute from 10 min; GPU 1's double-bit count
    resets (5 -> 0) at 12 min; GPU 2 has 16 NVLinks up instead of 18 from 10 min; every other counter stays put."""
    out = []
    for s in range(0, seconds, 10):
        t = T0 + s
        for g in range(8):
            u = f"GPU-{g}"
            crc = 40_000.0 * max(0, s - 600) / 60 if g == 5 else 7.0
            out += [
                Sample(t, "n", g, u, "pcie_link_width", 8.0 if g == 3 and s >= 300 else 16.0),
                Sample(t, "n", g, u, "pcie_link_gen", 5.0),
                Sample(t, "n", g, u, "gpu_util_pct", 95.0),
                Sample(t, "n", g, u, "sm_clock_mhz", 1400.0 if g == 6 and s >= 480 else 1980.0 - g),
                Sample(t, "n", g, u, "tensor_active_ratio", 0.6),
                Sample(t, "n", g, u, "ecc_sbe_volatile", 12.0),
                Sample(
                    t, "n", g, u, "ecc_dbe_aggregate", 0.0 if g == 1 and s >= 720 else float(5 * (g == 1))
                ),
                Sample(t, "n", g, u, "pcie_replay_total", 3.0),
                Sample(t, "n", g, u, "nvlink_crc_flit_errors_total", crc, "link=0"),
                Sample(t, "n", g, u, "nvlink_crc_data_errors_total", 0.0, "link=0"),
                Sample(t, "n", g, u, "nvlink_recovery_errors_total", 0.0, "link=0"),
                Sample(t, "n", g, u, "nvlink_links_active", 16.0 if g == 2 and s >= 600 else 18.0),
            ]
    return out


def test_counter_and_peer_rules_with_nothing_to_find_are_skipped(tmp_path: Path) -> None:
    """A healthy node: every due increase, rate and peer rule is found quiet by one query per family; a counter
    that moved, a GPU under its peers' width, or a load metric reaching its floor keep theirs evaluated."""
    with Store(tmp_path / "q.duckdb") as st:
        st.write_samples(_node(240))
        now = T0 + 230
        due = [r for r in RULES if r.kind in ("increase", "rate", "peer")]
        quiet = prefilter.quiet(st, [(r, now - lookback(r), now) for r in due])
        for name in ("GpuSingleBitErrorRate", "NvlinkCrcErrorRate", "PcieReplayRate", "PcieLinkBelowPeers"):
            assert name in quiet
        assert "GpuClockBelowPeers" in quiet  # loaded, but 1973..1980 MHz: no GPU 25 % under the others
        st.write_samples(_node(900)[len(_node(240)) :])
        now = T0 + 890
        quiet = prefilter.quiet(st, [(r, now - lookback(r), now) for r in due])
        # moved or spread: judged in full
        assert {
            "NvlinkCrcErrorRate",
            "GpuNewDoubleBitError",
            "PcieLinkBelowPeers",
            "GpuClockBelowPeers",
        }.isdisjoint(quiet)
        assert {"GpuSingleBitErrorRate", "PcieReplayRate", "GpuSlowerThanPeers"} <= quiet


def test_a_sql_rule_is_skipped_only_without_a_point_of_its_metric(tmp_path: Path) -> None:
    """NvlinkLinksFewer reads 7 days of its metric before its window (a scan of every sample's metric: ~170 ms
    on a 7-day store); its rows are that metric's points in the window, so with none there it is skipped."""
    rules = {r.alert: r for r in RULES}
    fewer = rules["NvlinkLinksFewer"]
    assert prefilter.eligible(fewer) and not prefilter.eligible(rules["GpuDcgmDiagFailed"])
    now = T0 + 890
    with Store(tmp_path / "s.duckdb") as st:
        st.write_samples([x for x in _node(900) if x.metric != "nvlink_links_active" or x.ts < now - 1500])
        assert fewer.alert in prefilter.quiet(st, [(fewer, now - lookback(fewer), now)])
        st.write_samples([Sample(now - 5, "n", 0, "GPU-0", "nvlink_links_active", 18.0)])
        assert fewer.alert not in prefilter.quiet(st, [(fewer, now - lookback(fewer), now)])


def test_a_rule_a_zero_increase_meets_is_never_skipped() -> None:
    rules = {r.alert: r for r in RULES}
    inc = rules["GpuSingleBitErrorRate"]
    assert prefilter.counter_eligible(inc)
    low = dataclasses.replace(inc, params={**inc.params, "op": "<", "value": 5})  # an increase of 0 fires it
    assert not prefilter.counter_eligible(low)


def test_the_lever_changes_no_alert_on_a_node_with_faults(tmp_path: Path) -> None:
    base = tmp_path / "base.duckdb"
    with Store(base) as st:
        st.write_samples(_node(1800))
    inc, skipped = _both(base, tmp_path, 60.0)
    fired = {(str(a[0]), a[2]) for a in inc}
    assert {("PcieLinkBelowPeers", 3), ("GpuClockBelowPeers", 6), ("NvlinkCrcErrorRate", 5)} <= fired
    assert ("NvlinkLinksFewer", 2) in fired
    assert skipped > 0
    whole, _ = _both(base, tmp_path, None)
    assert {(str(a[0]), a[2]) for a in whole} == fired


@pytest.mark.parametrize(
    "name",
    sorted(
        p.name for p in SCENARIOS.iterdir() if (p / "expect.json").exists() and p.name != "row-remap-trend"
    ),
)
def test_the_lever_changes_no_alert_on_the_recorded_scenarios(name: str, tmp_path: Path) -> None:
    base = tmp_path / "base.duckdb"
    with Store(base) as st:
        ingest(st, SCENARIOS / name, IngestOptions(quiet=True))
    _both(base, tmp_path, 60.0)
    _both(base, tmp_path, None)


def test_a_sql_rule_names_a_metric_that_exists() -> None:
    doc = """
groups:
- name: t
  rules:
  - alert: Fewer
    kind: sql
    needs_metric: nvlink_links_actve
    query: "SELECT node, gpu, ts, true AS active, value FROM samples WHERE ts BETWEEN $start AND $end"
    severity: warning
    category: nvlink
    action: inspect-hardware
"""
    with pytest.raises(RuleError, match="unknown metric 'nvlink_links_actve' in needs_metric"):
        parse_rules(doc, "t.yaml")
    assert parse_rules(doc.replace("actve", "active"), "t.yaml")[0].p("needs_metric") == "nvlink_links_active"
