"""Repeats are judged with their history, the same live and in replay.

XID 13 (an application's SM exception) on one GPU at t, t+3 h and t+6 h: the catalog policy escalates the third
burst within 24 h to warning / inspect-hardware. Before: the agent (a 70-minute lookback) gave three info alerts
and never escalated; replay gave one warning alert spanning 6 h (keep_firing_for never ran out between sparse
lines, and the escalation counted lines after the finding too). Now both give three alerts, the third escalated.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from fleettool.agent.as_agent import judge
from fleettool.collectors.base import Collected
from fleettool.engine.rules import load_rules
from fleettool.model import Event
from fleettool.pipeline import Pipeline
from fleettool.store import Store

T0 = 1_800_000_000.0
H = 3600.0
LINE = "NVRM: Xid (PCI:0000:44:00): 13, pid=4242, name=python, Graphics SM Warp Exception on (GPC 1, TPC 2)"


def _store(path: Path) -> Store:
    st = Store(path)
    events = [
        Event(T0 + k * 3 * H, "n", "xid", LINE, gpu=2, pci_bus_id="0000:44:00", code=13) for k in range(3)
    ]
    Pipeline(st).write(Collected(events=events), T0)
    return st


def _alerts(st: Store) -> list[tuple[float, str, str, str]]:
    rows = st.query(
        "SELECT first_seen, severity, action, state FROM alerts WHERE rule = 'GpuXid' ORDER BY first_seen"
    )
    return [
        (r["first_seen"].replace(tzinfo=dt.timezone.utc).timestamp(), r["severity"], r["action"], r["state"])
        for r in rows
    ]


def test_three_bursts_in_a_day_escalate_the_third_both_ways(tmp_path: Path) -> None:
    rules = [r for r in load_rules() if r.alert == "GpuXid"]
    with _store(tmp_path / "whole.duckdb") as st:
        Pipeline(st, rules).evaluate()
        whole = _alerts(st)
    with _store(tmp_path / "agent.duckdb") as st:
        judge(st, rules)
        live = _alerts(st)
    assert [a[1:3] for a in whole] == [
        ("info", "check-workload"),
        ("info", "check-workload"),
        ("warning", "inspect-hardware"),
    ], whole
    assert [round(a[0] - T0) for a in whole] == [0, int(3 * H), int(6 * H)]
    assert live == whole
