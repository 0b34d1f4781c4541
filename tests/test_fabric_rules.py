"""The port rules (rules/fabric.yaml, kinds/port_episodes.py) over samples as collectors/fabric_samples makes
them, judged whole and as the agent judges them."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleettool.engine.evaluate import evaluate, write_alerts
from fleettool.engine.incremental import RuleScheduler, urgent
from fleettool.engine.rules import Rule, load_rules
from fleettool.ingest.report import IngestOptions
from fleettool.ingest.run import ingest
from fleettool.model import Event, Sample
from fleettool.recording.writer import RecordingWriter
from fleettool.store import Store
from tests import ib_faults
from tests.test_both_ways import both_ways

RULES = {r.alert: r for r in load_rules()}
T0 = 1_796_000_000.0
PORT = "port=mlx5_0/1"


def states(values: list[float], *, sub: str = PORT, node: str = "ib-1", step: float = 1.0) -> list[Sample]:
    return [Sample(T0 + i * step, node, None, None, "ib_port_state", v, sub) for i, v in enumerate(values)]


def judged(samples: list[Sample], *names: str, events: list[Event] | None = None) -> list[dict[str, object]]:
    with Store(":memory:") as store:
        store.write_samples(samples)
        if events:
            store.write_events(events)
        store.begin()
        write_alerts(store, evaluate(store, [RULES[n] for n in names]))
        store.commit()
        return store.query(
            "SELECT rule, node, state, first_seen, last_seen, evidence FROM alerts ORDER BY first_seen"
        )


def test_a_port_that_was_active_going_down_fires_at_its_first_down_sample() -> None:
    got = judged(states([4.0] * 30 + [1.0] * 30), "NicPortDown")
    assert [(a["rule"], a["state"]) for a in got] == [("NicPortDown", "firing")]
    assert got[0]["first_seen"].timestamp() == T0 + 30  # type: ignore[union-attr]


def test_ports_that_never_reached_active_do_not_count() -> None:
    training = states([1.0] * 20 + [2.0] * 20 + [4.0] * 20, sub="port=mlx5_1/1")  # trains, then ACTIVE
    by_design = states([1.0] * 60, sub="port=mlx5_2/1")
    assert judged(training + by_design, "NicPortDown") == []


def test_a_boot_resets_what_was_active() -> None:
    """Up before a reboot, then training (down) after it: no port down at runtime."""
    before = states([4.0] * 10)
    after = [
        Sample(T0 + 600 + i, "ib-1", None, None, "ib_port_state", 1.0 if i < 20 else 4.0, PORT)
        for i in range(40)
    ]
    boot = Event(T0 + 300, "ib-1", "boot", "Linux version 6.8", source="kmsg")
    assert judged(before + after, "NicPortDown", events=[boot]) == []
    assert [a["rule"] for a in judged(before + after, "NicPortDown")] == ["NicPortDown"]  # no boot: a fault


def test_port_down_ends_only_after_ten_minutes_active_and_says_so() -> None:
    import json

    got = judged(states([4.0] * 10 + [1.0] * 30 + [4.0] * 599, step=1.0), "NicPortDown")
    assert [a["state"] for a in got] == ["firing"]  # 599 s ACTIVE: not yet proven
    got = judged(states([4.0] * 10 + [1.0] * 30 + [4.0] * 700), "NicPortDown")
    assert [a["state"] for a in got] == ["resolved"]
    ev = json.loads(str(got[0]["evidence"]))
    assert ev["closed_by"] == "up 10m" and ev["findings"][0]["held"] == "up 10m"


def test_port_down_never_ends_on_missing_samples() -> None:
    """ACTIVE once, then the port's series stop while the node goes on reporting: stale, not resolved."""
    port = states([4.0] * 10 + [1.0] * 10 + [4.0])
    other = states([4.0] * 4000, sub="port=mlx5_3/1")
    got = judged(port + other, "NicPortDown")
    assert [a["state"] for a in got] == ["stale"]


def test_port_down_is_an_instant_rule() -> None:
    r = RULES["NicPortDown"]
    assert urgent(r) and "ib_port_state" in RuleScheduler([r]).instant_metrics()


def _both(samples: list[Sample], rules: list[Rule], *, gap: bool = False) -> None:
    with Store(":memory:") as store:
        store.write_samples(samples)
        both_ways(store, rules, gap=gap)


def test_port_down_both_ways_with_a_restart() -> None:
    s = states([4.0] * 600 + [1.0] * 400 + [4.0] * 1500 + [1.0] * 100 + [4.0] * 200, step=1.0)
    _both(s, [RULES["NicPortDown"]])
    _both(s, [RULES["NicPortDown"]], gap=True)


def test_a_recording_keeps_the_port_of_each_series(tmp_path: Path) -> None:
    """fleettool's own OpenMetrics names with a `port` label replay as the port's sub-series."""

    class C:
        def __init__(self, samples: list[Sample]) -> None:
            self.samples, self.events, self.gpus = samples, [], []

    w = RecordingWriter(tmp_path / "rec", "ib-1")
    w.add(C(states([4.0] * 5) + [Sample(T0, "ib-1", None, None, "ib_device_present", 1.0, "device=mlx5_0")]))
    w.write()
    with Store(tmp_path / "s.duckdb") as store:
        ingest(store, tmp_path / "rec", IngestOptions(quiet=True))
        subs = {(r["metric"], r["sub"]) for r in store.query("SELECT DISTINCT metric, sub FROM samples")}
    assert subs == {("ib_port_state", PORT), ("ib_device_present", "device=mlx5_0")}


def counters(metric: str, values: list[float], *, step: float = 10.0) -> list[Sample]:
    return [Sample(T0 + i * step, "ib-1", None, None, metric, v, PORT) for i, v in enumerate(values)]


def test_a_counter_reset_is_no_increment_but_a_step_after_it_is() -> None:
    reset = counters("ib_link_downed_total", [5.0] * 10 + [2.0] * 10)  # a boot: the counter restarts at 2
    assert judged(reset, "NicCounterLinkDowned") == []
    after = counters("ib_link_downed_total", [5.0] * 10 + [2.0] * 10 + [3.0] * 10)
    assert [a["rule"] for a in judged(after, "NicCounterLinkDowned")] == ["NicCounterLinkDowned"]


def test_the_counter_rules_export_without_counting_resets() -> None:
    from fleettool.engine.promql import promql_of

    expr = promql_of(RULES["NicCounterLinkDowned"])[0].expr
    assert "increase(" not in expr and "clamp_min(" in expr and "offset 10s" in expr


def test_flapping_ends_after_twelve_hours_up_and_not_before() -> None:
    flaps: list[float] = []
    for _ in range(3):
        flaps += [4.0] * 6 + [1.0] * 3  # 30 s down (10 s apart), then ACTIVE
    up_11h = [4.0] * (11 * 360)
    got = judged(states(flaps + up_11h, step=10.0), "NicPortFlapping")
    assert [a["state"] for a in got] == ["firing"]
    got = judged(states(flaps + up_11h + [4.0] * 400, step=10.0), "NicPortFlapping")
    assert [a["state"] for a in got] == ["resolved"]


def test_a_short_blip_is_no_flap() -> None:
    blips: list[float] = []
    for _ in range(5):
        blips += [4.0] * 6 + [1.0] * 2  # 20 s down: under 25 s
    assert judged(states(blips + [4.0] * 10, step=10.0), "NicPortFlapping") == []


def test_flap_and_drop_both_ways_with_a_restart() -> None:
    s: list[float] = []
    for _ in range(4):
        s += [4.0] * 60 + [1.0] * 4
    s += [4.0] * 200 + [1.0] * 40 + [4.0] * 200  # a 400 s drop
    rules = [RULES["NicPortFlapping"], RULES["NicPortDropped"], RULES["NicPortDown"]]
    _both(states(s, step=10.0), rules)
    _both(states(s, step=10.0), rules, gap=True)


# --- faults written into copies of the real trees (fixtures/ib-faults/, tests/ib_faults.py) ---

FABRIC = [r for r in load_rules() if r.source.endswith("fabric.yaml")]
ALL = load_rules()


def _ingested(name: str, tmp_path: Path) -> Store:
    store = Store(tmp_path / f"{name}.duckdb")
    ingest(store, ib_faults.FAULTS / name, IngestOptions(quiet=True))
    return store


@pytest.mark.parametrize("name", ib_faults.names())
def test_each_fault_is_found_in_replay_and_nothing_else(name: str, tmp_path: Path) -> None:
    """The recording of each fault (replayed as `fleettool replay fixtures/ib-faults/NAME` reads it) gives the
    findings its spec expects, of the fabric rules, and no other rule fires on it; the healthy trees none."""
    spec = ib_faults.load(name)
    with _ingested(name, tmp_path) as store:
        found = {f.rule.alert for inc in evaluate(store, ALL) for f in inc.findings}
        for inc in evaluate(store, FABRIC):
            assert inc.key == "nic" and inc.node == spec.node and inc.gpu is None
            for f in inc.findings:
                assert f.category.value == "nic" and spec.node in f.summary
                assert f.key in f.summary or f.rule.alert == "NicPortCountDropped"
    assert found == set(spec.expect["rules"])


@pytest.mark.parametrize("name", ib_faults.names())
def test_the_recording_is_what_the_spec_makes(name: str, tmp_path: Path) -> None:
    """The committed recording is the spec read through read_ib_sysfs + fabric_samples now (regenerate with
    `python -m tests.ib_faults` after changing a spec or the mapping)."""
    ib_faults.write_recording(ib_faults.load(name), tmp_path / "rec", tmp_path / "work")
    q = "SELECT epoch(ts) AS t, node, gpu, metric, sub, value FROM samples ORDER BY ALL"
    with _ingested(name, tmp_path) as committed, Store(tmp_path / "new.duckdb") as fresh:
        ingest(fresh, tmp_path / "rec", IngestOptions(quiet=True))
        assert committed.query(q) == fresh.query(q)


@pytest.mark.parametrize("name", [n for n in ib_faults.names() if not n.startswith("healthy")])
def test_each_fault_both_ways_and_across_a_restart(name: str, tmp_path: Path) -> None:
    for gap in (False, True):
        with Store(":memory:") as store:
            ingest(store, ib_faults.FAULTS / name, IngestOptions(quiet=True))
            both_ways(store, FABRIC, gap=gap)


def test_saturated_counters_of_the_real_tree_are_never_samples(tmp_path: Path) -> None:
    """mlx5_1's link_downed=255 and excessive_buffer_overrun_errors=15 (saturated) have no sample at all, so
    NicCounterLinkDowned / NicCounterBufferOverrun can never fire on them, whatever happens to the link."""
    with _ingested("healthy-h100", tmp_path) as store:
        subs = {
            r["sub"]
            for r in store.query("SELECT DISTINCT sub FROM samples WHERE metric = 'ib_link_downed_total'")
        }
        over = {
            r["sub"]
            for r in store.query(
                "SELECT DISTINCT sub FROM samples WHERE metric = 'ib_excessive_buffer_overrun_errors_total'"
            )
        }
    assert "port=mlx5_1/1" not in subs and "port=mlx5_bond_0/1" in subs  # the bond's link_downed reads 0
    assert over == set()  # 15 on both ports that have counters


def test_the_live_tree_at_an_offset_has_the_fault_written_in(tmp_path: Path) -> None:
    """write_tree: what a collector over --sysfs-root sees before and after a change."""
    from fleettool.formats.ib_sysfs import read_ib_sysfs

    spec = ib_faults.load("port-down")
    before = read_ib_sysfs(ib_faults.write_tree(spec, tmp_path / "sys", 299))
    after = read_ib_sysfs(ib_faults.write_tree(spec, tmp_path / "sys", 300))
    state = {p.key: p.state for p in before.ports}
    assert state["mlx5_4/1"] == 4 and {p.key: p.state for p in after.ports}["mlx5_4/1"] == 1
    lost = ib_faults.load("nic-lost")
    assert "mlx5_8" not in {
        p.device for p in read_ib_sysfs(ib_faults.write_tree(lost, tmp_path / "l", 300)).ports
    }


def test_pcie_width_reads_lanes_and_unknown_is_no_sample(tmp_path: Path) -> None:
    from collectors.fabric_pcie import pcie_samples

    dev = tmp_path / "class" / "infiniband"
    (dev / "mlx5_0" / "device").mkdir(parents=True)
    (dev / "mlx5_0" / "device" / "current_link_width").write_text("8\n")
    (dev / "mlx5_0" / "device" / "max_link_width").write_text("x16\n")
    (dev / "mlx5_1" / "device").mkdir(parents=True)
    (dev / "mlx5_1" / "device" / "current_link_width").write_text("0\n")  # link down: no width
    got = {
        (s.metric, s.sub, s.value) for s in pcie_samples(tmp_path, ["mlx5_0", "mlx5_1", "mlx5_9"], "n", T0)
    }
    assert got == {
        ("nic_pcie_width_lanes", "device=mlx5_0", 8.0),
        ("nic_pcie_width_max_lanes", "device=mlx5_0", 16.0),
    }


def test_roce_gids_count_routable_v2_entries_of_ethernet_ports_only(tmp_path: Path) -> None:
    from collectors.fabric_gids import gid_samples
    from fleettool.formats.ib_sysfs import IbPort

    port = tmp_path / "class" / "infiniband" / "mlx5_bond_0" / "ports" / "1"
    (port / "gids").mkdir(parents=True)
    (port / "gid_attrs" / "types").mkdir(parents=True)
    table = {
        "0": ("fe80:0000:0000:0000:a288:c2ff:fe3b:5a10", "RoCE v2"),  # link-local: not routable
        "1": ("0000:0000:0000:0000:0000:ffff:0a00:0001", "IB/RoCE v1"),
        "2": ("0000:0000:0000:0000:0000:ffff:0a00:0001", "RoCE v2"),
        "3": ("0000:0000:0000:0000:0000:0000:0000:0000", None),  # empty: its type is not read
    }
    for i, (gid, kind) in table.items():
        (port / "gids" / i).write_text(gid + "\n")
        if kind:
            (port / "gid_attrs" / "types" / i).write_text(kind + "\n")
    roce = IbPort("mlx5_bond_0", 1, link_layer="Ethernet")
    ib = IbPort("mlx5_0", 1, link_layer="InfiniBand")
    gone = IbPort("mlx5_bond_1", 1, link_layer="Ethernet")  # no table to list: unknown, no sample
    got = [(s.metric, s.sub, s.value) for s in gid_samples(tmp_path, [roce, ib, gone], "n", T0)]
    assert got == [("ib_port_roce_v2_gids", "port=mlx5_bond_0/1", 1.0)]


def test_fewer_ports_counts_from_the_boot() -> None:
    """Three ports ACTIVE, a reboot, then one port down by design: no loss. Without the boot: a loss."""

    def node(values: dict[str, list[float]], t0: float) -> list[Sample]:
        return [
            Sample(t0 + i * 10, "ib-1", None, None, "ib_port_state", v, f"port=mlx5_{p}/1")
            for p, vs in values.items()
            for i, v in enumerate(vs)
        ]

    before = node({"0": [4.0] * 30, "1": [4.0] * 30, "2": [4.0] * 30}, T0)
    after = node({"0": [4.0] * 60, "1": [4.0] * 60, "2": [1.0] * 60}, T0 + 900)
    boot = Event(T0 + 600, "ib-1", "boot", "Linux version 6.8", source="kmsg")
    assert judged(before + after, "NicPortCountDropped", events=[boot]) == []
    assert [a["rule"] for a in judged(before + after, "NicPortCountDropped")] == ["NicPortCountDropped"]
