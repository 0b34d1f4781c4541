"""An alert's life follows its cause: a hardware fault stays open until the action it asks for is seen (and
records which evidence closed it), on its node's own time; a series alert whose data stop goes stale.

Before: a DBE (XID 48 + XID 154 "Drain and Reset") was firing when its node's log was replayed alone and
resolved when the same log sat in a directory with another node's file that ends months later; two DBEs 10 h
apart on one GPU folded into one alert that ended resolved by itself; a thermal alert whose GPU stopped reporting
stayed firing forever.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from fleettool.agent.as_agent import judge
from fleettool.collectors.base import Collected
from fleettool.engine.evaluate import evaluate_rule
from fleettool.engine.rules import load_rules
from fleettool.model import Event, Sample
from fleettool.pipeline import Pipeline
from fleettool.store import Store

HOST = "gpu-12"
# the shape of the driver's lines (fixtures/scenarios/dbe-remap-pending/kernel-gpu-12.log.gz, syslog ISO times)
DBE = [
    "{t} gpu-12 kernel: NVRM: Xid (PCI:0000:9a:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double "
    "bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fffa8860 partition 7, subpartition 1.",
    "{t} gpu-12 kernel: NVRM: Xid (PCI:0000:9a:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 "
    "(Drain and Reset)",
]
BOOT = "{t} gpu-12 kernel: Linux version 6.8.0-49-generic (buildd@lcy02-amd64-028) #49-Ubuntu SMP"
OTHER = "{t} gpu-99 kernel: NVRM: Xid (PCI:0000:1b:00): 13, pid=77, name=python, Graphics SM Warp Exception"
T = "2026-11-30T{h:02d}:{m:02d}:00+0000"


def _lines(*parts: tuple[str, int, int]) -> str:
    out = []
    for kind, h, m in parts:
        t = T.format(h=h, m=m)
        out += [s.format(t=t) for s in (DBE if kind == "dbe" else [BOOT] if kind == "boot" else [kind])]
    return "\n".join(out) + "\n"


def _replay(d: Path, *extra: str) -> list[dict[str, Any]]:
    db = d.parent / (d.name + ".duckdb")
    run = [sys.executable, "-m", "fleettool"]
    r = subprocess.run([*run, "replay", str(d), "--db", str(db), *extra], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = subprocess.run([*run, "alerts", "--db", str(db), "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return [a for a in json.loads(out.stdout) if a["node"] == HOST]


def _show(a: dict[str, Any]) -> tuple[Any, ...]:
    return (a["rule"], a["severity"], a["state"], a["first_seen"], a["last_seen"])


def test_dbe_alone_and_in_a_directory_are_the_same_open_alert(tmp_path: Path) -> None:
    alone, beside = tmp_path / "alone", tmp_path / "beside"
    for d in (alone, beside):
        d.mkdir()
        (d / "kern.log").write_text(_lines(("dbe", 0, 20)))
    # another node's log that goes on for months (its year: the same file format, a later date)
    (beside / "gpu-99-kern.log").write_text(OTHER.format(t="2027-03-01T00:00:00+0000") + "\n")
    a, b = _replay(alone), _replay(beside)
    assert [_show(x) for x in a] == [_show(x) for x in b], (a, b)
    assert {(x["state"], x["severity"], x["action"]) for x in a} == {("firing", "critical", "reset-gpu")}
    assert {x["category"] for x in a} == {"ecc", "xid"}  # the DBE, and XID 154's "Drain and Reset"


def _dbe_history(tmp_path: Path, name: str, text: str) -> list[dict[str, Any]]:
    d = tmp_path / name
    d.mkdir()
    (d / "kern.log").write_text(text)
    return sorted(_replay(d), key=lambda a: a["first_seen"])


def test_two_dbes_ten_hours_apart_without_a_reboot_are_one_open_alert(tmp_path: Path) -> None:
    got = _dbe_history(tmp_path, "noboot", _lines(("dbe", 0, 20), ("dbe", 10, 20)))
    assert len(got) == 2  # the DBE (memory) and XID 154 (its recovery action), each one alert for both lines
    for a in got:
        assert a["state"] == "firing" and a["first_seen"].startswith("2026-11-30T00:20")
        assert a["last_seen"].startswith("2026-11-30T10:20")


def test_two_dbes_with_a_reboot_between_are_two_alerts_the_first_closed_by_the_boot(tmp_path: Path) -> None:
    got = _dbe_history(tmp_path, "boot", _lines(("dbe", 0, 20), ("boot", 5, 0), ("dbe", 10, 20)))
    assert len(got) == 4  # the DBE and its XID 154, before and after the boot
    for first in got[:2]:
        assert first["state"] == "resolved" and first["last_seen"].startswith("2026-11-30T05:00")
    for second in got[2:]:
        assert second["state"] == "firing" and second["first_seen"].startswith("2026-11-30T10:20")
    with Store(tmp_path / "boot.duckdb") as st:
        evs = [
            json.loads(e)
            for (e,) in st.con.execute("SELECT evidence FROM alerts WHERE state = 'resolved'").fetchall()
        ]
    assert len(evs) == 2
    for ev in evs:
        assert ev["closed_by"] == "boot"
        assert {f.get("held") for f in ev["findings"]} == {"boot"}


T0 = 1_800_000_000.0


def _closing_store(path: Path, closing: list[Sample | Event]) -> Store:
    """A DBE on GPU 2 at T0 (its series go on at 60 s), with `closing` after it."""
    st = Store(path)
    ev = [Event(T0, "n", "xid", "DBE", gpu=2, uuid="GPU-a", code=48)]
    samples = [Sample(T0 + s, "n", 2, "GPU-a", "gpu_temp_c", 50.0) for s in range(-60, 7200, 60)]
    Pipeline(st).write(Collected(samples=samples, events=ev), T0)
    extra = Collected(
        samples=[x for x in closing if isinstance(x, Sample)],
        events=[x for x in closing if isinstance(x, Event)],
    )
    Pipeline(st).write(extra, T0)
    return st


def _held(st: Store) -> tuple[str, str | None, float | None]:
    rule = next(r for r in load_rules() if r.alert == "GpuXid")
    (f,) = [f for f in evaluate_rule(st, rule, T0 - 60, T0 + 7200) if f.key == "xid:48"]
    return f.state, f.evidence.get("held"), f.inst.resolved_at


def test_each_evidence_closes_a_dbe_and_is_recorded(tmp_path: Path) -> None:
    cases: dict[str, list[Sample | Event]] = {
        "open": [],
        "reset": [
            Sample(T0 + 600, "n", 2, "GPU-a", "recovery_action", 4.0),
            Sample(T0 + 1800, "n", 2, "GPU-a", "recovery_action", 0.0),
        ],
        "new-gpu": [Sample(T0 + 3000 + s, "n", 2, "GPU-b", "power_w", 100.0) for s in (0, 60)],
        "boot": [Event(T0 + 2400, "n", "boot", "Linux version 6.8")],
    }
    got = {}
    for name, closing in cases.items():
        with _closing_store(tmp_path / f"{name}.duckdb", closing) as st:
            got[name] = _held(st)
    assert got["open"] == ("firing", "open", None)
    assert got["reset"] == ("resolved", "reset", T0 + 1800)
    assert got["new-gpu"] == ("resolved", "new-gpu", T0 + 3000)
    assert got["boot"] == ("resolved", "boot", T0 + 2400)


def test_a_lifecycle_return_needs_a_passing_burnin(tmp_path: Path) -> None:
    import datetime as dt

    def at(t: float) -> dt.datetime:
        return dt.datetime.fromtimestamp(t, tz=dt.timezone.utc).replace(tzinfo=None)

    with _closing_store(tmp_path / "ret.duckdb", []) as st:
        st.execute(
            "INSERT INTO node_audit (ts, node, from_state, to_state, who, reason, side_effects) "
            "VALUES (?, 'n', 'burn-in', 'healthy', 'me', 'forced', '')",
            [at(T0 + 1200)],
        )
        assert _held(st)[:2] == ("firing", "open")  # no burn-in: no proof
        st.execute(
            "INSERT INTO burnin_results (run_id, ts, node, gpu, test, verdict) VALUES ('r1', ?, 'n', 2, 'gemm', 'PASS')",
            [at(T0 + 900)],
        )
        assert _held(st) == ("resolved", "lifecycle-return", T0 + 1200)


def test_a_series_alert_whose_data_stop_goes_stale_and_the_same_both_ways(tmp_path: Path) -> None:
    """A hot GPU (1 C from its slowdown temperature) stops reporting at 30 min while its node (and the agent's own series) go on: the thermal
    alert is `stale`, "no data since" its last sample, not firing for ever; whole and as the agent."""
    rules = [r for r in load_rules() if r.alert == "GpuTemperatureNearSlowdown"]

    def store(path: Path) -> Store:
        st = Store(path)
        samples = []
        for s in range(0, 3 * 3600, 30):
            samples.append(Sample(T0 + s, "n", None, None, "agent_buffer_rows", 0.0))
            samples.append(Sample(T0 + s, "n", 0, "GPU-0", "temp_margin_c", 30.0))
            if s < 1800:
                samples.append(Sample(T0 + s, "n", 1, "GPU-1", "temp_margin_c", 1.0))
        Pipeline(st).write(Collected(samples=samples), T0)
        return st

    histories = []
    for name in ("whole", "agent"):
        with store(tmp_path / f"{name}.duckdb") as st:
            if name == "whole":
                Pipeline(st, rules).evaluate()
            else:
                judge(st, rules)
            histories.append(
                [
                    (
                        r["rule"],
                        r["gpu"],
                        r["state"],
                        r["last_seen"],
                        json.loads(r["evidence"]).get("stale_since"),
                    )
                    for r in st.query("SELECT * FROM alerts ORDER BY rule")
                ]
            )
    whole, agent = histories
    assert whole and whole == agent
    assert {h[2] for h in whole} == {"stale"} and {h[1] for h in whole} == {1}
    assert all(h[4] == T0 + 1800 - 30 for h in whole)


def test_a_recovery_action_back_to_none_closes_it_and_it_keeps_its_judgement(tmp_path: Path) -> None:
    """XID 154 "Drain and Reset" then "None": one alert, critical / reset-gpu (its holding line's judgement, not
    the closing line's info / none), closed by the reset."""
    rule = next(r for r in load_rules() if r.alert == "GpuXid")
    ev = [
        Event(T0, "n", "xid", "recovery", gpu=2, code=154, detail={"recovery_to": "Drain and Reset"}),
        Event(T0 + 9000, "n", "xid", "recovery", gpu=2, code=154, detail={"recovery_to": "None"}),
    ]
    with Store(tmp_path / "r.duckdb") as st:
        Pipeline(st).write(Collected(events=ev), T0)
        (f,) = evaluate_rule(st, rule, T0 - 1, T0 + 9000)
    assert (f.severity.value, f.action.value, f.state, f.evidence["held"]) == (
        "critical",
        "reset-gpu",
        "resolved",
        "reset",
    )
    assert f.inst.resolved_at == T0 + 9000


def test_a_person_resolving_it_is_what_closed_it_at_once(tmp_path: Path) -> None:
    """`alerts resolve` records `closed_by: person` at once, not only at the agent's next judgement."""
    from fleettool.engine.silences import acknowledge
    from fleettool.store.alerts import list_alerts

    rule = next(r for r in load_rules() if r.alert == "GpuXid")
    with Store(tmp_path / "p.duckdb") as st:
        Pipeline(st, [rule]).write(Collected(events=[Event(T0, "n", "xid", "DBE", gpu=2, code=48)]), T0)
        Pipeline(st, [rule]).evaluate()
        (a,) = list_alerts(st)
        assert (a["state"], a["closed_by"]) == ("firing", None)
        acknowledge(
            st, a["alert_id"], now=T0 + 60, until=T0 + 86400, who="alice", reason="swapped", kind="resolve"
        )
        (a,) = list_alerts(st)
    assert (a["state"], a["closed_by"]) == ("resolved", "person")
