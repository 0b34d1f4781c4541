"""The blast guard (fleettool/remediate/guard.py) on a real DuckDB store: open episodes written with the store's
own new_remediation, the topology with put_topology, and the storm check on incidents folded by fleettool's own
fold from replayed kernel logs (tests/test_incidents.py writes them in the driver's own line format)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleettool.remediate.guard import GuardLimits, check, fleet_nodes, scopes, storm_refusal
from fleettool.store import Store
from fleettool.store.remediations import Remediation, new_remediation, update_remediation
from fleettool.store.topology import put_topology
from tests.test_incidents import job_crash, line, replayed, sacct, write

NOW = 1_796_529_600.0  # 2026-12-06T04:00:00Z


@pytest.fixture
def store() -> Store:
    return Store(":memory:")


def racks(store: Store, n_racks: int, per: int) -> list[list[str]]:
    """n_racks racks r1.. of `per` nodes each (r1-n01 ...), in the topology table."""
    names = [[f"r{r}-n{i:02d}" for i in range(1, per + 1)] for r in range(1, n_racks + 1)]
    put_topology(
        store,
        {n: {"rack": f"r{r + 1}", "nvlink_domain": f"nvl{r + 1}"} for r, ns in enumerate(names) for n in ns},
        "test",
    )
    return names


def start(store: Store, node: str, *, gpu: int | None = 3, rung: str = "reset", at: float = NOW - 600) -> str:
    return new_remediation(
        store, Remediation(node, gpu, rung, "slurm", "alice", "XID 79", started=at, paged_at=at - 60)
    )


def test_a_second_node_of_a_rack_is_refused_naming_the_open_remediation(store: Store) -> None:
    r1, r2, *_ = racks(store, 40, 10)  # 400 nodes: 5 % is 20, so the rack limit is the one met
    rid = start(store, r1[0])
    ref = check(store, r1[1], limits=GuardLimits(), now=NOW)
    assert ref is not None
    assert "rack r1" in ref.reason and "the limit is 1 per rack" in ref.reason, ref.reason
    assert f"{r1[0]} GPU 3 reset since 2026-12-06T03:50:00Z ({rid}, running, 10 min)" in ref.reason
    assert [(e["id"], e["node"], e["rung"], e["since"]) for e in ref.open] == [
        (rid, r1[0], "reset", "2026-12-06T03:50:00Z")
    ]
    assert check(store, r2[0], limits=GuardLimits(), now=NOW) is None  # another rack


def test_the_eleventh_node_of_a_rack_is_refused_with_ten_per_rack(store: Store) -> None:
    rack, *_ = racks(store, 40, 12)  # 480 nodes: 5 % is 24
    limits = GuardLimits(per_rack=10)
    for i, n in enumerate(rack[:10]):
        start(store, n, at=NOW - 600 + i)
        if i < 9:
            assert check(store, rack[i + 1], limits=limits, now=NOW) is None, i
    ref = check(store, rack[10], limits=limits, now=NOW)
    assert ref is not None and "rack r1 already has 10 nodes in remediation" in ref.reason, ref
    assert sorted(e["node"] for e in ref.open) == rack[:10]


def test_the_fleet_limit_is_five_percent_and_at_least_one_node(store: Store) -> None:
    names = racks(store, 40, 1)  # 40 nodes, one per rack: 5 % is 2
    assert fleet_nodes(store) == 40 and GuardLimits().fleet_cap(40) == 2
    start(store, names[0][0])
    assert check(store, names[1][0], limits=GuardLimits(), now=NOW) is None
    start(store, names[1][0])
    ref = check(store, names[2][0], limits=GuardLimits(), now=NOW)
    assert ref is not None
    assert (
        "the fleet already has 2 of its 40 nodes in remediation, the limit is 2 (5 % of the fleet"
        in ref.reason
    )
    assert {e["node"] for e in ref.open} == {names[0][0], names[1][0]}
    # a fleet of 3 still allows one node (5 % of 3 rounds down to 0: at least 1)
    small = Store(":memory:")
    put_topology(small, {f"n{i}": {"rack": f"x{i}"} for i in range(3)}, "test")
    assert GuardLimits().fleet_cap(3) == 1
    assert check(small, "n0", limits=GuardLimits(), now=NOW) is None
    start(small, "n0")
    ref = check(small, "n1", limits=GuardLimits(), now=NOW)
    assert ref is not None and "the limit is 1" in ref.reason


def test_a_node_already_in_remediation_is_refused_naming_its_episode(store: Store) -> None:
    racks(store, 40, 4)
    rid = start(store, "r5-n01", rung="reboot", gpu=None)
    ref = check(store, "r5-n01", limits=GuardLimits(per_rack=4), now=NOW)
    assert ref is not None and ref.reason.startswith("r5-n01 is already in remediation: r5-n01 reboot since")
    assert rid in ref.reason and [e["id"] for e in ref.open] == [rid]


def test_an_ended_episode_frees_its_rack(store: Store) -> None:
    r1, *_ = racks(store, 40, 4)
    rid = start(store, r1[0])
    assert check(store, r1[1], limits=GuardLimits(), now=NOW) is not None
    update_remediation(store, rid, state="proving")  # proving is still open
    assert check(store, r1[1], limits=GuardLimits(), now=NOW) is not None
    update_remediation(store, rid, state="proven", ended=NOW - 10)
    assert check(store, r1[1], limits=GuardLimits(), now=NOW) is None


def test_the_domain_limit_applies_only_when_set(store: Store) -> None:
    put_topology(
        store,
        {f"d-{i:02d}": {"rack": f"rk{i}", "nvlink_domain": "nvl-a"} for i in range(18)}
        | {f"o-{i:03d}": {"rack": "other"} for i in range(100)},
        "test",
    )
    start(store, "d-00")
    assert check(store, "d-01", limits=GuardLimits(), now=NOW) is None
    ref = check(store, "d-01", limits=GuardLimits(per_domain=1), now=NOW)
    assert ref is not None and ref.reason.startswith("NVLink domain nvl-a already has 1 node in remediation")


def test_no_topology_only_the_fleet_limit_applies_and_the_plan_can_say_so(store: Store) -> None:
    for i in range(40):  # known by their GPUs only (the inventory), no rack anywhere
        store.execute("INSERT INTO gpus (node, gpu) VALUES (?, 0)", [f"gpu-{i:02d}"])
    sc = scopes(store, "gpu-17")
    assert sc["rack"] is None and sc["fleet_nodes"] == 40 and sc["caps"]["fleet"] == 2
    assert sc["notes"] == ["no rack known for gpu-17: only the fleet limit applies"]
    start(store, "gpu-01")
    assert check(store, "gpu-17", limits=GuardLimits(), now=NOW) is None  # 1 of 2: no rack to fill
    assert scopes(store, "gpu-17")["open"] == {"rack": 0, "nvlink_domain": 0, "fleet": 1}
    start(store, "gpu-02")
    ref = check(store, "gpu-17", limits=GuardLimits(), now=NOW)
    assert ref is not None and ref.reason.startswith("the fleet already has 2 of its 40 nodes")


def test_scopes_with_a_rack_names_it_and_counts_whats_open_there(store: Store) -> None:
    r1, *_ = racks(store, 3, 4)
    start(store, r1[0])
    sc = scopes(store, r1[1], GuardLimits(per_domain=2))
    assert (sc["rack"], sc["nvlink_domain"], sc["fleet_nodes"]) == ("r1", "nvl1", 12)
    assert sc["open"] == {"rack": 1, "nvlink_domain": 1, "fleet": 1} and sc["notes"] == []
    assert sc["caps"] == {"rack": 1, "nvlink_domain": 2, "fleet": 1}


# --- the storm check, on incidents folded from replayed kernel logs ------------------------------------------


def test_a_job_teardown_storm_never_starts_a_remediation(tmp_path: Path) -> None:
    lines = {
        f"gpu-{n:02d}": [line(10 * k + g, f"gpu-{n:02d}", g, 45) for k in range(5) for g in range(8)]
        for n in range(1, 4)
    }
    job = ("5000", "llm", "gpu-[01-03]", "2026-12-01T01:00:00", "2026-12-01T03:00:30", "CANCELLED by 1000")
    store = replayed(write(tmp_path / "rec", lines, {"sacct.txt": sacct(job)}), tmp_path)
    inc = store.query("SELECT incident_id, scope, key, root_alert FROM incidents")
    assert [(i["scope"], i["key"], i["root_alert"]) for i in inc] == [("job", "5000", None)]
    assert store.scalar("SELECT count(*) FROM alerts WHERE node = 'gpu-02' AND state = 'firing'") == 8
    ref = storm_refusal(store, "gpu-02")
    assert ref is not None
    assert f"incident {inc[0]['incident_id']} (job/5000, 8 of gpu-02's alerts; root: none)" in ref.reason
    assert "a job-teardown storm" in ref.reason, ref.reason
    assert [(i["incident_id"], i["root_alert"], len(i["alerts"])) for i in ref.incidents] == [
        (inc[0]["incident_id"], None, 8)
    ]


def test_a_symptom_of_another_nodes_root_is_refused_and_the_root_node_is_allowed(tmp_path: Path) -> None:
    store = replayed(job_crash(tmp_path / "rec", nodes=4), tmp_path)
    (inc,) = store.query("SELECT incident_id, root_alert, root_node FROM incidents")
    assert inc["root_node"] == "gpu-01"
    assert storm_refusal(store, "gpu-01") is None  # its XID 79 is the root: its own fault
    ref = storm_refusal(store, "gpu-03")
    assert ref is not None
    assert f"root: {inc['root_alert']}): its root is on gpu-01 (alert {inc['root_alert']}, XID 79)" in (
        ref.reason
    ), ref.reason
    assert "remediate gpu-01 first" in ref.reason
    assert ref.incidents[0]["root_node"] == "gpu-01" and len(ref.incidents[0]["alerts"]) == 8


def test_a_nodes_own_fault_is_allowed_and_a_node_without_alerts_is_not_refused(tmp_path: Path) -> None:
    store = replayed(write(tmp_path / "rec", {"gpu-09": [line(0, "gpu-09", 4, 48)]}), tmp_path)
    (inc,) = store.query("SELECT scope, root_node, action FROM incidents")
    assert (inc["scope"], inc["root_node"], inc["action"]) == ("gpu", "gpu-09", "reset-gpu")
    assert storm_refusal(store, "gpu-09") is None
    assert storm_refusal(store, "gpu-77") is None


def test_a_leaf_incident_without_a_root_refuses_its_nodes_and_a_lone_port_is_its_nodes_own(
    tmp_path: Path,
) -> None:
    from tests.test_fabric_incidents import incidents, leaf_fault

    db = tmp_path / "leaf.duckdb"
    got = incidents(leaf_fault(tmp_path), db)
    (leaf,) = [i for i in got if i["scope"] == "leaf"]
    with Store(db, read_only=True) as st:
        ref = storm_refusal(st, "gpu-303")
        assert ref is not None
        assert f"incident {leaf['id']} (leaf/leaf3, " in ref.reason
        assert "a leaf leaf3 incident with no root: its cause is outside gpu-303" in ref.reason, ref.reason
        assert storm_refusal(st, "gpu-101") is None  # its lone port: its own incident, inspect-hardware
