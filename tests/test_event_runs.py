"""An XID storm is judged from its runs, not from one Python object per line (issue 28, item 7).

The event kind folds an entity of many lines into runs in SQL (fleettool/engine/kinds/_event_runs.py). The
findings must be the ones the line-by-line judgement gives: the same instances (first seen, last seen, resolved
at), the same evidence (the last 20 lines, the count), the same escalation of repeats, whole and through a
trailing window with its history. Before the change the kind's result held every line of the window as a dict
(a 2-day storm of 170 k lines: 452 MiB peak in replay; bench/xid_storm_memory.py).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from fleettool.collectors.base import Collected
from fleettool.engine.evaluate import evaluate_rule
from fleettool.engine.kinds import _event_runs
from fleettool.engine.kinds.event import evaluate as event_evaluate
from fleettool.engine.rules import Rule, load_rules
from fleettool.model import Event, Sample
from fleettool.pipeline import Pipeline
from fleettool.store import Store

T0 = 1_800_000_000.0
H = 3600.0
PCI = "0000:44:00"


def _line(code: int, i: int) -> str:
    if code == 13:  # an SM exception on one GPC/TPC: its repeats escalate
        return f"NVRM: Xid (PCI:{PCI}): 13, pid={1000 + i}, name=python3, Graphics SM Warp Exception on (GPC 3, TPC 1, SM 0): Out Of Range Address"
    return f"NVRM: Xid (PCI:{PCI}): {code}, pid={1000 + i}, name=python3, Ch {i % 256:08x}"


def _storm_times(rng: random.Random) -> list[float]:
    """Line times that probe every edge of the folding: dense storms, ties, sub-second neighbours, gaps of
    exactly keep_firing_for (1 h) from `off` and within a microsecond of it, sparse lines."""
    out: list[float] = []
    t = T0
    for _ in range(6):  # storms of 150-250 lines, ~1 a minute, microsecond times
        n = rng.randrange(150, 250)
        for _ in range(n):
            t += rng.choice([0.0, 0.4, 0.999999, 1.0, rng.uniform(1, 120)])
            out.append(round(t, 6))
        t += rng.choice([H + 1.0, H + 0.999999, H + 1.000001, H + 0.5, 2 * H, 5 * H])
    t += 1.0
    for _ in range(30):  # then sparse lines, each its own run or just within one
        t += rng.choice([H + 0.5, H + 1.0, H + 1.5, 20 * 60.0])
        out.append(round(t, 6))
    return out


def _store(path: Path, code: int, seed: int, boots: list[float] = ()) -> Store:  # type: ignore[assignment]
    rng = random.Random(seed)
    events = [
        Event(ts, "n", "xid", _line(code, i), gpu=2, pci_bus_id=PCI, code=code)
        for i, ts in enumerate(_storm_times(rng))
    ]
    events += [Event(b, "n", "boot", "boot") for b in boots]
    st = Store(path)
    Pipeline(st).write(Collected(events=events), T0)
    return st


def _rule() -> Rule:
    return next(r for r in load_rules() if r.alert == "GpuXid")


def _findings(st: Store, start: float, end: float) -> list[dict[str, Any]]:
    return [f.as_dict() for f in evaluate_rule(st, _rule(), start, end)]


@pytest.mark.parametrize(
    ("code", "boots"),
    [(45, []), (13, []), (48, [T0 + 5 * H, T0 + 9 * H]), (31, [T0 + 30 * H])],
)
@pytest.mark.parametrize("seed", [1, 2])
def test_folded_storm_gives_the_line_by_line_findings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, boots: list[float], seed: int
) -> None:
    with _store(tmp_path / "s.duckdb", code, seed, boots) as st:
        end = st.scalar("SELECT epoch(max(ts)) FROM events") + 2 * H
        # whole; trailing windows as the agent judges (history before them); one ending mid-data
        windows = [(T0 - 1, end), (T0 + 10 * H, end), (T0 + 3 * H, T0 + 14 * H)]
        folded = [_findings(st, a, b) for a, b in windows]
        monkeypatch.setattr(_event_runs, "SMALL", 10**9)  # every entity line by line, as before the change
        by_line = [_findings(st, a, b) for a, b in windows]
    assert [len(f) for f in folded] == [len(f) for f in by_line]
    # the storms and the sparse lines gave many findings; a DBE (48) is a held fault, never folded: one open
    # finding per boot epoch (kinds/_held.py), line by line on both sides
    assert sum(len(f) for f in folded) > (2 if code == 48 else 10)
    for fs, ls in zip(folded, by_line, strict=True):
        for f, g in zip(fs, ls, strict=True):
            assert f == g
    if code == 13:  # app-pattern: bursts escalate; the fold must have kept the bursts it needs
        assert any("escalated" in f for fs in folded for f in fs)
    if code == 48:  # hardware: seen after two reboots
        assert any("3 boots" in str(f.get("escalated")) for fs in folded for f in fs)


def test_a_storm_is_held_as_runs_not_lines(tmp_path: Path) -> None:
    """5,000 lines of XID 45 in one storm: the kind keeps 20 lines and three observations, not 5,000."""
    events = [
        Event(T0 + 7.0 * i, "n", "xid", _line(45, i), gpu=2, pci_bus_id=PCI, code=45) for i in range(5000)
    ]
    with Store(tmp_path / "s.duckdb") as st:
        # the node's own time goes on past the storm (the agent's own series): keep_firing_for runs out
        beat = Sample(T0 + 7.0 * 5000 + 2 * H, "n", None, None, "agent_buffer_rows", 0.0)
        Pipeline(st).write(Collected(events=events, samples=[beat]), T0)
        res = event_evaluate(st, _rule(), T0, T0 + 7.0 * 5000 + 2 * H)
        (ent,) = res.obs
        assert len(res.extra[ent]["events"]) == 20
        assert len(res.obs[ent]) == 3
        (f,) = evaluate_rule(st, _rule(), T0, T0 + 7.0 * 5000 + 2 * H)
    assert f.evidence["event_count"] == 5000
    assert [e["ts"] for e in f.evidence["events"]] == [T0 + 7.0 * i for i in range(4980, 5000)]
    assert (f.inst.first_seen, f.inst.last_seen, f.inst.resolved_at) == (
        T0,
        T0 + 7.0 * 4999,
        T0 + 7.0 * 4999 + 1 + H,
    )
