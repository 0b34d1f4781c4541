"""`fleettool report`'s remediation figures (fleettool/remediation_stats.py), checked by hand.

The recording is the dbe-remap-pending scenario (fixtures/scenarios/): a real XID 48 (double-bit ECC error) and
XID 63 ("Row Remapper: New row marked for remapping, reset gpu to activate.") on gpu-12 GPU 4 at
2026-11-30T00:20:00Z, replayed through the CLI into a real store: one incident, rooted there, action reset-gpu.
A reset episode on it is recorded through the store's API with paged_at = the incident's first_seen and a proven
end at a known time; other episodes are made by hand beside it, so the median, the p90, the rung counts and the
re-failures can each be worked out here.
"""

from __future__ import annotations

import json
from pathlib import Path

from fleettool.store import Store
from fleettool.store.alerts import AlertRecord, put_alert
from fleettool.store.remediations import (
    Remediation,
    log_remediation,
    new_remediation,
    update_remediation,
)
from tests.conftest import SCENARIOS, run_cli

MIN, HOUR = 60.0, 3600.0


def episode(
    store: Store,
    node: str,
    gpu: int | None,
    paged: float | None,
    rungs: list[str],
    *,
    state: str,
    ended: float | None,
    rid: str,
) -> str:
    """An episode as the loop records it: created on its first rung, one 'rung' line per rung tried, then its
    end state."""
    started = (paged or 0.0) + 5 * MIN
    new_remediation(
        store,
        Remediation(node, gpu, rungs[0], "slurm", "test", "page", started=started, paged_at=paged),
        rid,
    )
    for i, r in enumerate(rungs):
        log_remediation(store, rid, started + i, "rung", r, rung=r)
        update_remediation(store, rid, rung=r)
    if state != "running":
        update_remediation(store, rid, state=state, ended=ended)
    return rid


def replayed(tmp_path: Path) -> tuple[Path, float]:
    """The scenario in a store; (the store, its one incident's first_seen)."""
    db = tmp_path / "r.duckdb"
    r = run_cli("replay", str(SCENARIOS / "dbe-remap-pending"), "--db", str(db), "-q")
    assert r.returncode == 0, r.stderr
    incs = json.loads(run_cli("incidents", "--db", str(db), "--json").stdout)
    assert [(i["root"]["node"], i["root"]["gpu"], i["action"]) for i in incs] == [("gpu-12", 4, "reset-gpu")]
    with Store(db, read_only=True) as st:
        (first,) = st.query("SELECT epoch(first_seen) AS t FROM incidents")
    assert first["t"] == 1795996800 + 20 * MIN  # 2026-11-30T00:00:00Z + 20 min: the XID line at 00:20:00Z
    return db, float(first["t"])


def report(db: Path) -> dict:
    r = run_cli("report", "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout)["remediation"])


def test_time_to_service_of_a_replayed_reset_and_its_neighbours_checked_by_hand(tmp_path: Path) -> None:
    db, page = replayed(tmp_path)
    with Store(db) as st:
        # gpu-12 GPU 4: reset, proven 23 min after the page  -> 23 * 60 = 1380 s
        episode(st, "gpu-12", 4, page, ["reset"], state="proven", ended=page + 23 * MIN, rid="rem-a")
        # gpu-31 GPU 1 a day later: the reset refused, a reboot, proven 40 min after its page -> 2400 s
        b = page + 24 * HOUR
        episode(st, "gpu-31", 1, b, ["reset", "reboot"], state="proven", ended=b + 40 * MIN, rid="rem-b")
        # gpu-31 GPU 1 again, paged 3 h after B's return (a re-failure of B), reset, proven in 10 min -> 600 s
        c = b + 40 * MIN + 3 * HOUR
        episode(st, "gpu-31", 1, c, ["reset"], state="proven", ended=c + 10 * MIN, rid="rem-c")
        # gpu-40: every rung, failed (no time to service); gpu-41: a reset still running (open)
        d = page + 2 * HOUR
        episode(
            st,
            "gpu-40",
            None,
            d,
            ["reset", "reboot", "power-cycle", "rma"],
            state="failed",
            ended=d + HOUR,
            rid="rem-d",
        )
        episode(st, "gpu-41", 2, page + 50 * HOUR, ["reset"], state="running", ended=None, rid="rem-e")
    rep = report(db)
    fleet = rep["fleet"]
    # the proven times, sorted: [600, 1380, 2400]; median: the middle one, 1380;
    # p90 (linear): rank 0.9 * (3 - 1) = 1.8, between 1380 and 2400: 1380 + 0.8 * (2400 - 1380) = 2196
    assert fleet["time_to_service_s"] == {"n": 3, "median": 1380.0, "p90": 2196.0}
    assert (fleet["episodes"], fleet["proven"], fleet["failed"], fleet["stopped"], fleet["open"]) == (
        5,
        3,
        1,
        0,
        1,
    )
    # rungs: A reset; B reset+reboot; C reset; D reset+reboot+power-cycle+rma; E reset
    assert fleet["rungs"] == {"reset": 5, "reboot": 2, "power-cycle": 1, "rma": 1}
    # B's return was followed by C on the same GPU 3 h later: one re-failure; A and C had none
    assert fleet["refailures_24h"] == 1 and fleet["refailed"] == {"rem-b": "episode rem-c"}
    nodes = {n["node"]: n for n in rep["nodes"]}
    assert sorted(nodes) == ["gpu-12", "gpu-31", "gpu-40", "gpu-41"]
    # gpu-12 alone: one time, 1380 s for both
    assert nodes["gpu-12"]["time_to_service_s"] == {"n": 1, "median": 1380.0, "p90": 1380.0}
    # gpu-31: [600, 2400]: median (600 + 2400) / 2 = 1500; p90: 600 + 0.9 * 1800 = 2220
    assert nodes["gpu-31"]["time_to_service_s"] == {"n": 2, "median": 1500.0, "p90": 2220.0}
    assert nodes["gpu-31"]["rungs"] == {"reset": 2, "reboot": 1, "power-cycle": 0, "rma": 0}
    assert nodes["gpu-40"]["time_to_service_s"]["n"] == 0 and nodes["gpu-40"]["failed"] == 1
    assert nodes["gpu-41"]["open"] == 1

    table = run_cli("report", "--db", str(db), env={"COLUMNS": "200"})
    assert table.returncode == 0, table.stderr
    assert (
        "remediation: 5 episodes (3 proven, 1 failed, 0 stopped, 1 open); time to service (page to proven "
        "return) median 23m / p90 37m over 3; rungs tried: reset 5, reboot 2, power-cycle 1, rma 1; "
        "re-failures within 24 h of a proven return: 1"
    ) in table.stdout, table.stdout
    row = next(ln.split() for ln in table.stdout.splitlines() if ln.startswith("gpu-31"))
    assert row == ["gpu-31", "2", "2", "0", "0", "25m", "37m", "2", "1", "0", "0", "1"], row


def _alert(aid: str, gpu: int, at: float, action: str = "reset-gpu") -> AlertRecord:
    return AlertRecord(
        aid, "GpuXid", "xid", "critical", "gpu-12", gpu, None, action, "firing", at, at, "XID 48", "", aid
    )


def test_a_new_alert_on_the_same_gpu_within_24_h_of_the_return_is_a_refailure(tmp_path: Path) -> None:
    db, page = replayed(tmp_path)
    end = page + 23 * MIN
    with Store(db) as st:
        episode(st, "gpu-12", 4, page, ["reset"], state="proven", ended=end, rid="rem-a")
        put_alert(st, _alert("other-gpu", 5, end + HOUR))  # GPU 5: not the GPU reset
        put_alert(st, _alert("a-trend", 4, end + HOUR, action="none"))  # nothing taken out: not a fault back
        put_alert(st, _alert("too-late", 4, end + 25 * HOUR))  # past 24 h
    assert report(db)["fleet"]["refailures_24h"] == 0
    with Store(db) as st:
        put_alert(st, _alert("back-again", 4, end + 2 * HOUR))
    fleet = report(db)["fleet"]
    assert fleet["refailures_24h"] == 1 and fleet["refailed"] == {"rem-a": "alert back-again"}


def test_a_store_without_episodes_reports_no_remediation_line(tmp_path: Path) -> None:
    db, _ = replayed(tmp_path)
    rep = report(db)
    assert (
        rep["fleet"]["episodes"] == 0 and rep["nodes"] == [] and rep["fleet"]["time_to_service_s"]["n"] == 0
    )
    out = run_cli("report", "--db", str(db)).stdout
    assert "fleet: " in out and "remediation:" not in out
