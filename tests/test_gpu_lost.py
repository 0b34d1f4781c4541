"""One lost GPU, one page, for as long as it is lost: an XID 79 and the GPU's stopped series are one alert,
named after the XID, firing while the GPU's series stay stopped (past the XID's keep_firing_for and past the
agent's lookback) and resolved when they come back. The same data judged incrementally, as the agent's flushes
do, and as a whole, as replay does, give the same alert."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fleettool.collectors.base import Collected
from fleettool.engine.evaluate import evaluate_rule
from fleettool.engine.incremental import RuleScheduler
from fleettool.engine.rules import load_rules
from fleettool.engine.silences import acknowledge
from fleettool.model import Event, Sample
from fleettool.pipeline import Pipeline
from fleettool.store import Store
from fleettool.store.alerts import list_alerts

T0 = 1_800_000_000.0
STEP = 30  # one flush every 30 s
XID_AT = 60
LINE = "NVRM: Xid (PCI:0000:44:00): 79, pid=<unknown>, name=<unknown>, GPU has fallen off the bus."


def flushes(
    seconds: int, back_at: int | None, boot_at: int | None = None, xid: bool = True
) -> list[tuple[float, Collected]]:
    """4 GPUs every 30 s; GPU 3 takes an XID 79 at 60 s (`xid`) and reports nothing from then until `back_at`."""
    out = []
    for s in range(0, seconds + 1, STEP):
        gone = s >= XID_AT and (back_at is None or s < back_at)
        samples = [
            Sample(T0 + s, "n", g, f"GPU-{g}", m, v)
            for g in range(4)
            if not (g == 3 and gone)
            for m, v in (("gpu_temp_c", 50.0), ("power_w", 300.0))
        ]
        events = []
        if s == XID_AT and xid:
            events.append(Event(T0 + s, "n", "xid", LINE, gpu=3, code=79, source="kmsg:kmsg"))
        if boot_at is not None and s == boot_at:
            events.append(Event(T0 + s, "n", "boot", "Linux version 6.8", source="kmsg:kmsg"))
        out.append((T0 + s, Collected(samples=samples, events=events)))
    return out


def as_agent(db: Path, data: list[tuple[float, Collected]]) -> list[tuple[float, list[dict[str, Any]]]]:
    """The agent's path: each flush written, then the rules due judged (at once for an event); what /metrics
    shows of GPU 3 after each flush."""
    seen = []
    with Store(db) as st:
        pipe = Pipeline(st, scheduler=RuleScheduler(load_rules()))
        for now, c in data:
            pipe.write(c, now)
            pipe.evaluate_due(now, urgent=bool(c.events))
            seen.append((now, [{k: a[k] for k in PAGE} for a in pipe.firing_alerts("n") if a["gpu"] == 3]))
    return seen


def as_replay(db: Path, data: list[tuple[float, Collected]]) -> None:
    with Store(db) as st:
        pipe = Pipeline(st, load_rules())
        for now, c in data:
            pipe.write(c, now)
        pipe.evaluate()


def gpu3(db: Path) -> list[dict[str, Any]]:
    with Store(db, read_only=True) as st:
        rows = st.query(
            "SELECT rule, severity, category, action, state, epoch(first_seen) AS first_seen, "
            "epoch(last_seen) AS last_seen, evidence FROM alerts WHERE gpu = 3"
        )
    for r in rows:
        r["rules"] = sorted({f["rule"] for f in json.loads(r.pop("evidence"))["findings"]})
    return rows


PAGE = {"rule": "GpuXid", "severity": "critical", "category": "gpu-lost", "action": "reboot-node", "gpu": 3}


def test_lost_for_two_hours_then_back_is_one_alert_on_both_paths(tmp_path: Path) -> None:
    back = 2 * 3600  # past the XID's keep_firing_for (1h) and the agent's lookback of the XID rule (70 min)
    data = flushes(back + 900, back)
    seen = as_agent(tmp_path / "agent.duckdb", data)
    for now, firing in seen:
        want = [PAGE] if T0 + XID_AT <= now < T0 + back else []
        assert firing == want, f"at {now - T0:.0f}s /metrics has {firing}"
    as_replay(tmp_path / "replay.duckdb", data)
    agent, replay = gpu3(tmp_path / "agent.duckdb"), gpu3(tmp_path / "replay.duckdb")
    assert len(agent) == 1, agent  # no second alert left behind
    assert agent == replay
    (a,) = agent
    assert a["state"] == "resolved" and a["rule"] == "GpuXid"
    assert a["first_seen"] == T0 + XID_AT and a["last_seen"] == T0 + back  # ends when the series come back


def test_still_lost_is_one_firing_alert_with_both_findings_on_both_paths(tmp_path: Path) -> None:
    data = flushes(25 * 60, None)
    seen = as_agent(tmp_path / "agent.duckdb", data)
    assert all(f == [PAGE] for now, f in seen if now >= T0 + XID_AT)  # never renamed, never a second
    as_replay(tmp_path / "replay.duckdb", data)
    agent, replay = gpu3(tmp_path / "agent.duckdb"), gpu3(tmp_path / "replay.duckdb")
    assert agent == replay and len(agent) == 1
    (a,) = agent
    assert a["state"] == "firing" and a["rules"] == ["GpuSeriesStopped", "GpuXid"]
    assert a["first_seen"] == T0 + XID_AT and a["last_seen"] == data[-1][0]  # last_seen is now, not stale


def test_a_boot_ends_the_xid(tmp_path: Path) -> None:
    """The XID's action (reboot the node) seen: its finding ends at the boot, even with the GPU still gone
    (its stopped series then page on their own)."""
    rule = next(r for r in load_rules() if r.alert == "GpuXid")
    with Store(tmp_path / "s.duckdb") as st:
        for now, c in flushes(3 * 3600, None, boot_at=90 * 60):
            Pipeline(st).write(c, now)
        (f,) = evaluate_rule(st, rule, T0, T0 + 3 * 3600)
    assert f.inst.resolved_at == T0 + 90 * 60 and f.evidence["held"] == "boot"


def test_a_node_that_reports_nothing_after_the_xid_stays_open_at_its_own_end(tmp_path: Path) -> None:
    """A kernel log alone proves no action: the XID 79 stays firing (held, open), judged at the node's own last
    record, however far the judged range (or another node's data) goes on."""
    rule = next(r for r in load_rules() if r.alert == "GpuXid")
    with Store(tmp_path / "s.duckdb") as st:
        Pipeline(st).write(Collected(events=[Event(T0, "n", "xid", LINE, gpu=3, code=79)]), T0)
        Pipeline(st).write(
            Collected(samples=[Sample(T0 + 90 * 86400, "other", 0, "GPU-x", "gpu_temp_c", 40.0)]), T0
        )
        (f,) = evaluate_rule(st, rule, T0, T0 + 90 * 86400)
    assert f.state == "firing" and f.inst.resolved_at is None and f.evidence["held"] == "open"
    assert f.inst.last_seen == T0  # its node's horizon: the line itself


def test_a_person_resolving_it_holds(tmp_path: Path) -> None:
    data = flushes(20 * 60, None)
    db = tmp_path / "agent.duckdb"
    with Store(db) as st:
        pipe = Pipeline(st, scheduler=RuleScheduler(load_rules()))
        for i, (now, c) in enumerate(data):
            pipe.write(c, now)
            pipe.evaluate_due(now, urgent=bool(c.events))
            if i == 20:
                (a,) = [a for a in list_alerts(st, state="firing") if a["gpu"] == 3]
                acknowledge(
                    st,
                    a["alert_id"],
                    now=now,
                    until=now + 86400,
                    who="alice",
                    reason="swapped",
                    kind="resolve",
                )
        assert [a for a in pipe.firing_alerts("n") if a["gpu"] == 3] == []
        assert [a["state"] for a in list_alerts(st) if a["gpu"] == 3] == ["resolved"]


def test_stopped_series_alone_end_when_they_come_back_on_both_paths(tmp_path: Path) -> None:
    """No XID (an exporter that lost the GPU): GpuSeriesStopped alone, silent for longer than the agent's
    lookback of the rule (20 min), then back: one alert, resolved at the return, on both paths."""
    back = 45 * 60
    data = flushes(back + 900, back, xid=False)
    seen = as_agent(tmp_path / "agent.duckdb", data)
    stopped = {**PAGE, "rule": "GpuSeriesStopped"}
    for now, firing in seen:
        # last sample at 30 s, silent for `after` (2m) at 150 s, judged at the rule's next run (every minute)
        want = [stopped] if T0 + 180 <= now < T0 + back else []
        assert firing == want, f"at {now - T0:.0f}s /metrics has {firing}"
    as_replay(tmp_path / "replay.duckdb", data)
    agent, replay = gpu3(tmp_path / "agent.duckdb"), gpu3(tmp_path / "replay.duckdb")
    assert agent == replay and len(agent) == 1, agent
    (a,) = agent
    assert a["state"] == "resolved" and a["rules"] == ["GpuSeriesStopped"]
    assert a["first_seen"] == T0 + XID_AT - STEP + 120 and a["last_seen"] == T0 + back
