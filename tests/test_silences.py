"""Silences and acknowledgements: stored, matched, expiring; shown in `fleettool alerts`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleettool.engine.silences import acknowledge, add_silence, annotate, expire_silence
from fleettool.store import Store
from tests.conftest import SCENARIOS, run_cli


def _alert(st: Store) -> dict:  # type: ignore[type-arg]
    st.con.execute(
        "INSERT INTO alerts VALUES ('a1', 'GpuXid', 'xid', 'critical', 'gpu-1', 3, NULL, 'reset-gpu', 'firing', "
        "'2026-01-01', '2026-01-01', 's', 'runbooks/gpu-xid.md', '{}')"
    )
    return st.query("SELECT alert_id, rule, category, node, gpu FROM alerts")[0]


def test_silence_matches_and_expires() -> None:
    with Store() as st:
        a = _alert(st)
        sid = add_silence(st, now=100.0, until=200.0, who="bob", reason="maint", node="gpu-1")
        assert annotate(st, [a], 150.0)[0]["silenced"] is True
        assert annotate(st, [a], 250.0)[0]["silenced"] is False  # expired
        add_silence(st, now=100.0, until=300.0, who="bob", reason="other gpu", node="gpu-1", gpu=4)
        assert annotate(st, [a], 250.0)[0]["silenced"] is False  # matchers must all match
        assert expire_silence(st, sid, 120.0) and annotate(st, [a], 130.0)[0]["silenced"] is False
        with pytest.raises(ValueError, match="matcher"):
            add_silence(st, now=1.0, until=2.0, who="x", reason="")
        with pytest.raises(ValueError, match="future"):
            add_silence(st, now=5.0, until=2.0, who="x", reason="", node="n")


def test_ack_and_resolve() -> None:
    with Store() as st:
        a = _alert(st)
        acknowledge(st, "a1", now=100.0, until=200.0, who="alice", reason="on it")
        got = annotate(st, [a], 150.0)[0]
        assert got["acknowledged"] is True and got["ack_by"] == "alice"
        assert annotate(st, [a], 201.0)[0]["acknowledged"] is False
        acknowledge(st, "a1", now=300.0, until=1e10, who="alice", reason="replaced", kind="resolve")
        assert st.scalar("SELECT state FROM alerts WHERE alert_id = 'a1'") == "resolved"
        with pytest.raises(KeyError):
            acknowledge(st, "nope", now=1.0, until=2.0, who="x", reason="")


def test_cli_round_trip(tmp_path: Path) -> None:
    db = tmp_path / "a.duckdb"
    assert run_cli("replay", str(SCENARIOS / "gpu-fell-off-bus"), "--db", str(db), "-q").returncode == 0
    alerts = json.loads(run_cli("alerts", "--db", str(db), "--json").stdout)
    assert len(alerts) == 1 and alerts[0]["silenced"] is False and alerts[0]["acknowledged"] is False
    aid = alerts[0]["alert_id"]
    assert run_cli("alerts", "ack", aid, "--db", str(db), "--by", "alice", "--for", "1h").returncode == 0
    r = run_cli("silence", "add", "--db", str(db), "--node", "gpu-21", "--for", "2h", "-m", "reboot")
    assert r.returncode == 0 and len(r.stdout.strip()) == 12
    got = json.loads(run_cli("alerts", "--db", str(db), "--json").stdout)[0]
    assert got["silenced"] is True and got["acknowledged"] is True and got["ack_by"] == "alice"
    assert json.loads(run_cli("alerts", "--db", str(db), "--json", "--hide-silenced").stdout) == []
    assert run_cli("alerts", "ack", "nope", "--db", str(db)).returncode == 3
    assert run_cli("silence", "add", "--db", str(db)).returncode == 2  # no matcher


def test_an_alert_id_prefix_acks_and_resolves_as_git_takes_one(tmp_path: Path) -> None:
    """`alerts ack`/`resolve` take a unique prefix of the id (4+ characters, any case), as git takes an
    abbreviated commit; an ambiguous prefix names its candidates and changes nothing."""
    db = tmp_path / "p.duckdb"
    ids = ("3f2a9c0d1e2b4a5c", "3f2a11110000aaaa", "b0b0b0b0b0b0b0b0")
    with Store(db) as st:
        for aid in ids:
            st.con.execute(
                "INSERT INTO alerts VALUES (?, 'GpuXid', 'xid', 'critical', 'gpu-1', 3, NULL, 'reset-gpu', "
                "'firing', '2026-01-01', '2026-01-01', 's', 'runbooks/gpu-xid.md', '{}')",
                [aid],
            )
    ok = run_cli("alerts", "ack", "3F2A9", "--db", str(db), "--by", "alice")
    assert ok.returncode == 0 and ok.stderr.strip() == "ack 3f2a9c0d1e2b4a5c by alice", ok.stderr
    amb = run_cli("alerts", "resolve", "3f2a", "--db", str(db))
    assert amb.returncode == 3 and amb.stderr.splitlines() == [
        f"fleettool: alert id prefix '3f2a' is ambiguous in {db}: it starts 3f2a11110000aaaa, 3f2a9c0d1e2b4a5c "
        "(type more of it)"
    ]
    short = run_cli("alerts", "resolve", "b0b", "--db", str(db))
    assert short.returncode == 3 and "at least 4 characters" in short.stderr
    assert run_cli("alerts", "resolve", "b0b0b", "--db", str(db)).returncode == 0
    assert run_cli("alerts", "ack", "c0ffee", "--db", str(db)).returncode == 3
    with Store(db, read_only=True) as st:
        acks = st.rows("SELECT alert_id, kind, who FROM alert_acks ORDER BY alert_id")
        states = dict(st.rows("SELECT alert_id, state FROM alerts"))
    assert [tuple(a) for a in acks] == [
        ("3f2a9c0d1e2b4a5c", "ack", "alice"),
        ("b0b0b0b0b0b0b0b0", "resolve", acks[1][2]),
    ]
    assert states == {ids[0]: "firing", ids[1]: "firing", ids[2]: "resolved"}
