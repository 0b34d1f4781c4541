"""The fabric collector over real sysfs trees (fixtures/infiniband, copied into tmp_path and changed between
ticks): the 1 s and 10 s tiers, what is unknown (never 0) and said once, virtual functions and --fabric-exclude,
a NIC gone, carrier_changes; `fleettool agent --sysfs-root` as a process storing the rows; and a recording of the
collector replaying into the rows the agent stored."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from fleettool.agent.loop import Agent, AgentConfig
from fleettool.collectors.base import Collected
from fleettool.collectors.fabric import FabricCollector
from fleettool.engine.incremental import RuleScheduler
from fleettool.engine.rules import load_rules
from fleettool.ingest.report import IngestOptions
from fleettool.model import Sample
from fleettool.pipeline import replay
from fleettool.recording.writer import RecordingWriter
from fleettool.store import Store, StoreError
from tests.conftest import FIXTURES, ROOT, run_cli
from tests.test_agent_live import Clock

IB = FIXTURES / "infiniband"
NODE = "gpu-21"
H100_PORTS = [f"mlx5_{i}/1" for i in (0, 1, 4, 5, 6, 7, 8, 9)] + ["mlx5_bond_0/1"]
# the documented notices of the healthy H100 tree: its saturated legacy counters (fixtures/infiniband/SOURCES.md)
H100_NOTICES = [
    "fabric: mlx5_1/1 counters/excessive_buffer_overrun_errors saturated at 15: its increments can no longer be seen",
    "fabric: mlx5_1/1 counters/link_downed saturated at 255: its increments can no longer be seen",
    "fabric: mlx5_bond_0/1 counters/excessive_buffer_overrun_errors saturated at 15: its increments can no longer "
    "be seen",
]


class Mono:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def tree(tmp_path: Path, name: str = "sysfs-h100") -> Path:
    root = tmp_path / name
    shutil.copytree(IB / name, root, symlinks=True)
    return root


def port_dir(root: Path, port: str) -> Path:
    dev, num = port.split("/")
    return root / "class" / "infiniband" / dev / "ports" / num


def values(c: Collected, metric: str) -> dict[str, float]:
    return {s.sub: s.value for s in c.samples if s.metric == metric}


def msgs(c: Collected) -> list[str]:
    return sorted(e.message for e in c.events)


def test_a_healthy_h100_tree_reads_every_port_and_says_only_its_saturated_counters(tmp_path: Path) -> None:
    mono = Mono()
    c = FabricCollector(NODE, tree(tmp_path), mono=mono)
    assert c.start() and c.reason is None
    first = c.collect(1000.0)
    assert values(first, "ib_port_state") == {f"port={p}": 4.0 for p in H100_PORTS}
    assert values(first, "ib_port_phys_state") == {f"port={p}": 5.0 for p in H100_PORTS}
    rates = values(first, "ib_port_rate_gbps")
    assert rates.pop("port=mlx5_bond_0/1") == 200.0 and set(rates.values()) == {400.0}
    assert values(first, "ib_port_link_layer")["port=mlx5_bond_0/1"] == 2.0
    assert values(first, "ib_port_width_lanes")["port=mlx5_0/1"] == 4.0
    assert values(first, "ib_device_present") == {f"device={p.split('/')[0]}": 1.0 for p in H100_PORTS}
    # the counters of the two full devices: a saturated one is no sample (unknown, not 255 and not 0)
    assert values(first, "ib_link_downed_total") == {"port=mlx5_bond_0/1": 0.0}
    assert "port=mlx5_1/1" in values(first, "ib_symbol_error_total")
    assert values(first, "ib_excessive_buffer_overrun_errors_total") == {}
    assert msgs(first) == H100_NOTICES
    assert all(e.kind == "agent" and e.source == "fabric" and e.detail["file"] for e in first.events)
    assert all(s.gpu is None and s.node == NODE for s in first.samples)

    # 1 s later: the state tier only, and nothing said again
    mono.t += 1.0
    second = c.collect(1001.0)
    assert not second.events
    assert {s.metric for s in second.samples} == {
        "ib_port_state",
        "ib_port_phys_state",
        "ib_port_rate_gbps",
        "ib_port_width_lanes",
        "ib_port_link_layer",
        "ib_device_present",
    }
    # 10 s after the first: the counters again, still without a second notice
    mono.t += 9.0
    third = c.collect(1010.0)
    assert "port=mlx5_1/1" in values(third, "ib_symbol_error_total") and not third.events


def test_a_port_going_down_is_read_on_the_next_tick_and_counters_every_10s(tmp_path: Path) -> None:
    mono, root = Mono(), tree(tmp_path)
    c = FabricCollector(NODE, root, mono=mono)
    assert c.start()
    c.collect(1000.0)
    (port_dir(root, "mlx5_4/1") / "state").write_text("1: DOWN\n")
    (port_dir(root, "mlx5_4/1") / "phys_state").write_text("3: Disabled\n")
    (port_dir(root, "mlx5_1/1") / "counters" / "symbol_error").write_text("7\n")
    mono.t += 1.0
    got = c.collect(1001.0)
    assert values(got, "ib_port_state")["port=mlx5_4/1"] == 1.0
    assert values(got, "ib_port_phys_state")["port=mlx5_4/1"] == 3.0
    assert values(got, "ib_port_state")["port=mlx5_0/1"] == 4.0
    assert values(got, "ib_symbol_error_total") == {}  # the counter tier is not due
    mono.t += 8.5
    assert values(c.collect(1009.5), "ib_symbol_error_total") == {}
    mono.t += 0.5
    assert values(c.collect(1010.0), "ib_symbol_error_total") == {
        "port=mlx5_1/1": 7.0,
        "port=mlx5_bond_0/1": 0.0,
    }


def test_a_saturated_counter_is_said_once_a_reset_is_said_and_it_counts_again(tmp_path: Path) -> None:
    mono, root = Mono(), tree(tmp_path)
    c = FabricCollector(NODE, root, mono=mono, counters_every_s=1.0)
    assert c.start()
    c.collect(1000.0)
    mono.t += 1.0
    assert not c.collect(1001.0).events  # still saturated: not said again
    link_downed = port_dir(root, "mlx5_1/1") / "counters" / "link_downed"
    link_downed.write_text("2\n")  # reset by an operator (perfquery -R), then 2 new link downs
    mono.t += 1.0
    got = c.collect(1002.0)
    assert values(got, "ib_link_downed_total")["port=mlx5_1/1"] == 2.0
    assert msgs(got) == [
        "fabric: mlx5_1/1 counters/link_downed dropped from 255 to 2: the port's counters were reset"
    ]
    link_downed.write_text("255\n")
    mono.t += 1.0
    again = c.collect(1003.0)
    assert "port=mlx5_1/1" not in values(again, "ib_link_downed_total")
    assert msgs(again) == [H100_NOTICES[1]]


def test_the_no_pma_tree_gives_unknown_counters_never_0_said_once(tmp_path: Path) -> None:
    mono = Mono()
    c = FabricCollector(NODE, tree(tmp_path, "sysfs-node_exporter"), mono=mono)
    assert c.start()
    got = c.collect(1000.0)
    assert values(got, "ib_port_state") == {"port=i40iw0/1": 4.0, "port=mlx4_0/1": 4.0, "port=mlx4_0/2": 4.0}
    # i40iw0's counters all read `N/A (no PMA)`: no sample of any counter of it, not a 0
    counters = [s for s in got.samples if s.metric.endswith("_total") and s.sub == "port=i40iw0/1"]
    assert counters == []
    assert values(got, "ib_link_downed_total") == {"port=mlx4_0/1": 0.0, "port=mlx4_0/2": 0.0}
    (na,) = [e for e in got.events if "i40iw0/1" in e.message]
    assert "unreadable (N/A (no PMA)): unknown, not 0" in na.message
    assert "counters/symbol_error" in na.message and len(na.detail["files"]) == 13  # type: ignore[arg-type]
    # mlx4_0's port_xmit_wait is at 2^32-1: saturated, said; nothing else is
    assert msgs(got) == sorted(
        [
            na.message,
            "fabric: mlx4_0/1 counters/port_xmit_wait saturated at 4294967295: its increments can no longer be seen",
        ]
    )
    mono.t += 10.0
    assert not c.collect(1010.0).events


def test_the_omnipath_tree_reads_its_port_and_says_nothing(tmp_path: Path) -> None:
    c = FabricCollector(NODE, tree(tmp_path, "sysfs-omnipath"), mono=Mono())
    assert c.start()
    got = c.collect(1000.0)
    assert values(got, "ib_port_state") == {"port=hfi1_0/1": 4.0}
    assert values(got, "ib_port_rate_gbps") == {"port=hfi1_0/1": 100.0}
    assert values(got, "ib_link_downed_total") == {"port=hfi1_0/1": 0.0} and not got.events


def _einval_target() -> str:
    """A real file whose read fails with EINVAL on this kernel (no LSM: /proc/self/attr/current)."""
    for path in ("/proc/self/attr/current", "/proc/self/attr/prev", "/proc/self/attr/exec"):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.read(fd, 64)
        except OSError as e:
            if e.errno == 22:
                return path
        finally:
            os.close(fd)
    pytest.skip(
        "no file on this host fails to read with EINVAL (a Linux Security Module serves /proc/*/attr)"
    )


def test_a_counter_failing_with_einval_is_said_once_and_never_read_again(tmp_path: Path) -> None:
    mono, root = Mono(), tree(tmp_path)
    target = _einval_target()
    f = port_dir(root, "mlx5_1/1") / "hw_counters" / "rnr_nak_retry_err"
    f.unlink()
    f.symlink_to(target)  # reads as the CX-7's restricted ACCESS_REG counters do: EINVAL
    c = FabricCollector(NODE, root, mono=mono, counters_every_s=1.0)
    assert c.start()
    got = c.collect(1000.0)
    (ev,) = [e for e in got.events if "EINVAL" in e.message]
    assert ev.message.startswith(
        "fabric: mlx5_1/1 hw_counters/rnr_nak_retry_err failed with invalid argument"
    )
    assert "not read again until the agent restarts" in ev.message and "node_exporter #3434" in ev.message
    assert ev.detail["file"] == str(f)
    assert "port=mlx5_1/1" not in values(got, "ib_rnr_nak_retry_err_total")
    # the file now reads fine: it is still not read (no sample), and nothing more is said
    f.unlink()
    f.write_text("3\n")
    mono.t += 1.0
    later = c.collect(1001.0)
    assert "port=mlx5_1/1" not in values(later, "ib_rnr_nak_retry_err_total") and not later.events
    # a new collector (the agent restarted) reads it
    fresh = FabricCollector(NODE, root, mono=mono)
    assert fresh.start()
    assert values(fresh.collect(1002.0), "ib_rnr_nak_retry_err_total")["port=mlx5_1/1"] == 3.0


def test_virtual_functions_and_excluded_ports_are_named_once_and_not_read(tmp_path: Path) -> None:
    mono, root = Mono(), tree(tmp_path)
    vf = root / "class" / "infiniband" / "mlx5_10"
    shutil.copytree(root / "class" / "infiniband" / "mlx5_0", vf)
    (vf / "device").mkdir()
    (vf / "device" / "physfn").symlink_to("../../mlx5_0")  # an SR-IOV VF links to its PF
    (port_dir(root, "mlx5_10/1") / "state").write_text("1: DOWN\n")
    c = FabricCollector(NODE, root, exclude=["mlx5_bond_*", "mlx5_9/1"], mono=mono)
    assert c.start()
    got = c.collect(1000.0)
    ports = set(values(got, "ib_port_state"))
    assert ports == {f"port={p}" for p in H100_PORTS if p not in ("mlx5_bond_0/1", "mlx5_9/1")}
    skipped = [m for m in msgs(got) if "not watched" in m]
    assert skipped == [
        "fabric: mlx5_10 not watched: virtual function "
        f"({root}/class/infiniband/mlx5_10/device/physfn exists): its physical function is watched",
        "fabric: mlx5_9/1 not watched: skipped by configuration (--fabric-exclude mlx5_9/1)",
        "fabric: mlx5_bond_0 not watched: skipped by configuration (--fabric-exclude mlx5_bond_*)",
    ]
    assert msgs(got) == sorted([*skipped, *H100_NOTICES[:2]])  # the bond's own notice is not given: excluded
    mono.t += 1.0
    assert not c.collect(1001.0).events


def test_a_nic_gone_from_sysfs_reads_absent_and_back_present(tmp_path: Path) -> None:
    mono, root = Mono(), tree(tmp_path)
    c = FabricCollector(NODE, root, mono=mono)
    assert c.start()
    c.collect(1000.0)
    dev = root / "class" / "infiniband" / "mlx5_9"
    dev.rename(tmp_path / "mlx5_9.away")
    mono.t += 1.0
    got = c.collect(1001.0)
    assert values(got, "ib_device_present")["device=mlx5_9"] == 0.0
    assert "port=mlx5_9/1" not in values(got, "ib_port_state") and not got.events
    (tmp_path / "mlx5_9.away").rename(dev)
    mono.t += 1.0
    assert values(c.collect(1002.0), "ib_device_present")["device=mlx5_9"] == 1.0


def test_carrier_changes_of_the_netdevs_under_each_device_every_10s(tmp_path: Path) -> None:
    mono, root = Mono(), tree(tmp_path)
    net = root / "class" / "infiniband" / "mlx5_0" / "device" / "net" / "ibp24s0"
    net.mkdir(parents=True)
    (net / "carrier_changes").write_text("2\n")
    bad = root / "class" / "infiniband" / "mlx5_4" / "device" / "net" / "ibp41s0"
    bad.mkdir(parents=True)  # no carrier_changes file
    c = FabricCollector(NODE, root, mono=mono)
    assert c.start()
    got = c.collect(1000.0)
    assert values(got, "net_carrier_changes_total") == {"netdev=ibp24s0": 2.0}
    (unreadable,) = [e for e in got.events if "carrier_changes" in e.message]
    assert (
        unreadable.message == "fabric: netdev ibp41s0 carrier_changes unreadable: No such file or directory"
    )
    (net / "carrier_changes").write_text("4\n")
    mono.t += 1.0
    assert values(c.collect(1001.0), "net_carrier_changes_total") == {}
    mono.t += 9.0
    later = c.collect(1010.0)
    assert values(later, "net_carrier_changes_total") == {"netdev=ibp24s0": 4.0} and not later.events


def _pcie_and_gids(root: Path) -> None:
    """mlx5_4's PCIe link (x16 of x16) and a GID table on the RoCE bond (link-local, then 10.0.0.1 as RoCE v1
    and v2, then an empty entry), in the kernel's layout: the saved tree has neither."""
    dev = root / "class" / "infiniband" / "mlx5_4" / "device"
    dev.mkdir(parents=True)
    (dev / "current_link_width").write_text("16\n")
    (dev / "max_link_width").write_text("16\n")
    port = port_dir(root, "mlx5_bond_0/1")
    (port / "gids").mkdir()
    (port / "gid_attrs" / "types").mkdir(parents=True)
    table = [
        ("fe80:0000:0000:0000:a288:c2ff:fe3b:5a10", "RoCE v2"),
        ("0000:0000:0000:0000:0000:ffff:0a00:0001", "IB/RoCE v1"),
        ("0000:0000:0000:0000:0000:ffff:0a00:0001", "RoCE v2"),
        ("0000:0000:0000:0000:0000:0000:0000:0000", None),
    ]
    for i, (gid, kind) in enumerate(table):
        (port / "gids" / str(i)).write_text(gid + "\n")
        if kind:
            (port / "gid_attrs" / "types" / str(i)).write_text(kind + "\n")


def test_pcie_width_and_roce_gids_are_read_in_the_10s_tier(tmp_path: Path) -> None:
    mono, root = Mono(), tree(tmp_path)
    _pcie_and_gids(root)
    c = FabricCollector(NODE, root, mono=mono)
    assert c.start()
    first = c.collect(1000.0)
    assert values(first, "nic_pcie_width_lanes") == {"device=mlx5_4": 16.0}
    assert values(first, "nic_pcie_width_max_lanes") == {"device=mlx5_4": 16.0}
    assert values(first, "ib_port_roce_v2_gids") == {"port=mlx5_bond_0/1": 1.0}  # IB ports have none
    # the HCA retrains at x8 and the address goes: not read on a state tick, read on the next counter tick
    (root / "class" / "infiniband" / "mlx5_4" / "device" / "current_link_width").write_text("8\n")
    zero = "0000:0000:0000:0000:0000:0000:0000:0000\n"
    (port_dir(root, "mlx5_bond_0/1") / "gids" / "2").write_text(zero)
    mono.t += 1.0
    state = c.collect(1001.0)
    assert not {s.metric for s in state.samples} & {"nic_pcie_width_lanes", "ib_port_roce_v2_gids"}
    mono.t += 9.0
    later = c.collect(1010.0)
    assert values(later, "nic_pcie_width_lanes") == {"device=mlx5_4": 8.0}
    assert values(later, "ib_port_roce_v2_gids") == {"port=mlx5_bond_0/1": 0.0} and not later.events


def test_pcie_width_and_gids_of_excluded_devices_are_not_read(tmp_path: Path) -> None:
    root = tree(tmp_path)
    _pcie_and_gids(root)
    c = FabricCollector(NODE, root, ["mlx5_4", "mlx5_bond_*"], mono=Mono())
    assert c.start()
    got = c.collect(1000.0)
    assert {s.metric for s in got.samples} & {"nic_pcie_width_lanes", "ib_port_roce_v2_gids"} == set()


def test_no_infiniband_class_is_not_available_and_looked_at_again_every_60s(tmp_path: Path) -> None:
    mono = Mono()
    c = FabricCollector(NODE, tmp_path, mono=mono)
    assert not c.start()
    assert c.reason is not None and "class/infiniband: no such directory" in c.reason
    assert c.collect(1000.0) == Collected()
    shutil.copytree(IB / "sysfs-h100" / "class", tmp_path / "class")
    mono.t += 30.0
    assert c.collect(1030.0) == Collected() and c.reason is not None
    mono.t += 30.0
    got = c.collect(1060.0)
    assert c.reason is None and len(values(got, "ib_port_state")) == 9
    assert f"fabric: {tmp_path}/class/infiniband is there now" in msgs(got)


# -- as deployed: the agent process ------------------------------------------------------------------------
FAKE = ("--source", "fake", "--gpus", "1", "--kmsg", "off", "--dcgm-exporter", "off", "-q")


def _rows(db: Path, where: str = "metric LIKE 'ib_%' OR metric LIKE 'net_%'") -> list[tuple[object, ...]]:
    with Store(db, read_only=True) as s:
        rows = s.query(
            f"SELECT epoch(ts), node, gpu, metric, sub, value FROM samples WHERE {where} ORDER BY ALL"
        )
    return [tuple(r.values()) for r in rows]


def _events(db: Path) -> list[tuple[object, ...]]:
    with Store(db, read_only=True) as s:
        rows = s.query(
            "SELECT ts, node, kind, message, source FROM events WHERE source = 'fabric' ORDER BY ALL"
        )
    return [tuple(r.values()) for r in rows]


def _stored(db: Path) -> bool:
    """The agent has flushed port states into `db` (False while there is no store or it is being written)."""
    try:
        with Store(db, read_only=True, wait_s=0.1) as s:
            return bool(s.scalar("SELECT count(*) FROM samples WHERE metric = 'ib_port_state'"))
    except (StoreError, duckdb.Error, OSError):
        return False


def test_the_agent_process_stores_the_ports_and_a_port_going_down(tmp_path: Path) -> None:
    root, db = tree(tmp_path), tmp_path / "a.duckdb"
    cmd = [sys.executable, "-m", "fleettool", "agent", "--db", str(db), "--node", NODE, *FAKE]
    cmd += ["--sysfs-root", str(root), "--flush", "1s", "--duration", "6s"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not _stored(db) and time.monotonic() < deadline:  # its first flush: the ports read ACTIVE
        time.sleep(0.2)
    (port_dir(root, "mlx5_6/1") / "state").write_text("1: DOWN\n")
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    rows = _rows(db, "metric = 'ib_port_state'")
    assert {r[4] for r in rows} == {f"port={x}" for x in H100_PORTS}
    down = [r for r in rows if r[4] == "port=mlx5_6/1"]
    assert down[0][5] == 4.0 and down[-1][5] == 1.0  # ACTIVE, then DOWN as written
    assert all(r[2] is None for r in rows)
    assert sorted(str(e[3]) for e in _events(db)) == H100_NOTICES  # nothing else said
    with Store(db, read_only=True) as s:
        assert s.scalar("SELECT count(*) FROM samples WHERE metric = 'ib_link_downed_total'") >= 1
        avail = s.query(
            "SELECT DISTINCT value FROM samples WHERE metric = 'agent_collector_available' AND sub = 'collector=fabric'"
        )
    assert [r["value"] for r in avail] == [1.0]


def test_the_agent_on_healthy_trees_finds_nothing(tmp_path: Path) -> None:
    for name in ("sysfs-h100", "sysfs-node_exporter", "sysfs-omnipath"):
        root, db = tree(tmp_path, name), tmp_path / f"{name}.duckdb"
        r = run_cli(
            "agent", "--db", str(db), *FAKE, "--sysfs-root", str(root), "--duration", "2s", "--flush", "1s"
        )
        assert r.returncode == 0, r.stderr
        with Store(db, read_only=True) as s:
            assert s.scalar("SELECT count(*) FROM alerts") == 0, s.query("SELECT rule, summary FROM alerts")
            assert s.scalar("SELECT count(*) FROM samples WHERE metric = 'ib_port_state'") > 0


def test_a_sysfs_root_that_is_not_there_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    r = run_cli(
        "agent", "--db", str(tmp_path / "a.duckdb"), *FAKE, "--sysfs-root", str(missing), "--duration", "1s"
    )
    assert r.returncode == 3 and r.stderr.strip().splitlines() == [
        f"fleettool: {missing}: no such directory (--sysfs-root)"
    ]
    # off with its collector: not looked at
    r = run_cli(
        "agent",
        "--db",
        str(tmp_path / "b.duckdb"),
        *FAKE,
        "--sysfs-root",
        str(missing),
        "--no-collector",
        "fabric",
        "--duration",
        "1s",
    )
    assert r.returncode == 0, r.stderr


# -- recording and replay -----------------------------------------------------------------------------------
def test_a_recording_of_the_collector_replays_into_the_rows_the_agent_stored(tmp_path: Path) -> None:
    root = tree(tmp_path)
    clk = Clock(1_800_000_000.0)
    live, rec = tmp_path / "live.duckdb", tmp_path / "rec"
    writer = RecordingWriter(rec, NODE)
    c = FabricCollector(NODE, root, mono=clk.mono, counters_every_s=2.0)
    ag = Agent(
        AgentConfig(db=live, node=NODE, quiet=True),
        [c],
        sink=writer.add,
        scheduler=RuleScheduler(load_rules(None)),
        clock=clk.now,
        mono=clk.mono,
    )
    net = root / "class" / "infiniband" / "mlx5_0" / "device" / "net" / "ibp24s0"
    net.mkdir(parents=True)
    (net / "carrier_changes").write_text("1\n")
    ag.start()
    for i in range(6):
        if i == 2:
            (port_dir(root, "mlx5_5/1") / "state").write_text("1: DOWN\n")
            (port_dir(root, "mlx5_1/1") / "counters" / "symbol_error").write_text("40\n")
            (net / "carrier_changes").write_text("3\n")
        if i == 4:
            (root / "class" / "infiniband" / "mlx5_7").rename(tmp_path / "gone")
        ag.tick()
        assert ag.flush()
        clk.tick(1.0)
    writer.write()
    assert ag.runners["fabric"].collector is c
    with Store(tmp_path / "replay.duckdb") as store:
        res = replay(store, rec, IngestOptions(quiet=True), load_rules(None))
    assert not any(r.issues for r in res.reports), [r.issues for r in res.reports]
    stored = _rows(live)
    assert len({r[3] for r in stored}) > 20 and ("ib_device_present" in {r[3] for r in stored})
    assert _rows(tmp_path / "replay.duckdb") == stored
    assert _events(tmp_path / "replay.duckdb") == _events(live) and len(_events(live)) == 3
    assert (1_800_000_002.0, NODE, None, "ib_port_state", "port=mlx5_5/1", 1.0) in stored
    assert (1_800_000_004.0, NODE, None, "ib_device_present", "device=mlx5_7", 0.0) in stored


def test_record_writes_the_fabric_series_and_replay_reads_them(tmp_path: Path) -> None:
    root, rec = tree(tmp_path), tmp_path / "rec"
    r = run_cli(
        "record",
        "--out",
        str(rec),
        "--node",
        NODE,
        "--source",
        "fake",
        "--collector",
        "fabric",
        "--no-collector",
        "nvml",
        "--sysfs-root",
        str(root),
        "--fabric-exclude",
        "mlx5_bond_*",
        "--duration",
        "2s",
    )
    assert r.returncode == 0, r.stderr
    db = tmp_path / "r.duckdb"
    r = run_cli("replay", str(rec), "--db", str(db))
    assert r.returncode == 0, r.stderr
    ports = {str(x[4]) for x in _rows(db, "metric = 'ib_port_state'")}
    assert ports == {f"port={p}" for p in H100_PORTS if p != "mlx5_bond_0/1"}
    said = [str(e[3]) for e in _events(db)]
    assert "fabric: mlx5_bond_0 not watched: skipped by configuration (--fabric-exclude mlx5_bond_*)" in said


def test_record_writes_the_pcie_width_and_gids_and_replay_reads_them(tmp_path: Path) -> None:
    root, rec = tree(tmp_path), tmp_path / "rec"
    _pcie_and_gids(root)
    args = ["--node", NODE, "--source", "fake", "--collector", "fabric", "--no-collector", "nvml"]
    r = run_cli("record", "--out", str(rec), *args, "--sysfs-root", str(root), "--duration", "2s")
    assert r.returncode == 0, r.stderr
    db = tmp_path / "r.duckdb"
    r = run_cli("replay", str(rec), "--db", str(db))
    assert r.returncode == 0, r.stderr
    rows = {
        (x[3], x[4], x[5]) for x in _rows(db, "metric LIKE 'nic_pcie_%' OR metric = 'ib_port_roce_v2_gids'")
    }
    assert rows == {
        ("nic_pcie_width_lanes", "device=mlx5_4", 16.0),
        ("nic_pcie_width_max_lanes", "device=mlx5_4", 16.0),
        ("ib_port_roce_v2_gids", "port=mlx5_bond_0/1", 1.0),
    }


def test_the_collector_imports_as_installed_outside_the_checkout(tmp_path: Path) -> None:
    """As the DaemonSet runs it (installed, cwd not the checkout): the helpers it calls import through the
    package (fleettool.collectors), not the checkout's top-level `collectors`."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = "import fleettool.collectors.fabric, fleettool.collectors.fabric_pcie, fleettool.collectors.fabric_gids"
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_samples_are_the_shared_mapping() -> None:
    """The collector's samples are fabric_samples' (one mapping for live and replay): a port's state sample."""
    c = FabricCollector(NODE, IB / "sysfs-h100", mono=Mono())
    assert c.start()
    s = next(x for x in c.collect(5.0).samples if x.metric == "ib_port_state")
    assert s == Sample(5.0, NODE, None, None, "ib_port_state", 4.0, "port=mlx5_0/1")
