"""InfiniBand port readers over real captures: gpud's H100 sysfs tree, node_exporter's sysfs fixture
(i40iw0 `N/A (no PMA)`, mlx4 port_xmit_wait at 2**32-1), and gpud's ibstat/ibstatus outputs
(fixtures/infiniband/SOURCES.md)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from fleettool.formats.ib_sysfs import Counter, counter_delta, delta, read_ib_sysfs, snapshot
from fleettool.formats.ibstat import parse_ib_status_text, parse_ibstat, parse_ibstatus

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "infiniband"
H100 = FIX / "sysfs-h100"
NODE_EXPORTER = FIX / "sysfs-node_exporter"
IBSTAT = FIX / "ibstat"


def test_h100_tree_reads_eight_active_ndr_ports_and_a_roce_bond() -> None:
    r = read_ib_sysfs(H100)
    assert r.issues == [] and r.skipped == {}
    ib = [p for p in r.ports if p.link_layer == "InfiniBand"]
    assert [p.device for p in ib] == [f"mlx5_{i}" for i in (0, 1, 4, 5, 6, 7, 8, 9)]
    for p in ib:
        assert (p.port, p.state, p.state_name, p.phys_state, p.phys_state_name) == (
            1,
            4,
            "ACTIVE",
            5,
            "LinkUp",
        )
        assert p.rate_gbps == 400.0 and p.rate_text == "400 Gb/sec (4X NDR)"
        assert p.issues == []
    (bond,) = [p for p in r.ports if p.link_layer != "InfiniBand"]
    assert (bond.device, bond.link_layer, bond.rate_gbps, bond.state_name) == (
        "mlx5_bond_0",
        "Ethernet",
        200.0,
        "ACTIVE",
    )


def test_counters_are_integers_and_saturated_legacy_counters_are_flagged() -> None:
    ports = {p.device: p for p in read_ib_sysfs(H100).ports}
    mlx5_1 = ports["mlx5_1"]
    assert len(mlx5_1.counters) == 21 and len(mlx5_1.hw_counters) == 26
    assert mlx5_1.counters["link_downed"] == Counter(255, None, True, 8)
    # 2.3e14 bytes: a 64-bit (PortCountersExtended) value, not at any maximum.
    assert mlx5_1.counters["port_xmit_data"] == Counter(230442669431839, None, False, None)
    assert mlx5_1.counters["port_rcv_errors"] == Counter(14, None, False, 16)
    # 4-bit ExcessiveBufferOverrunErrors stuck at 15 on every port of this host.
    assert mlx5_1.counters["excessive_buffer_overrun_errors"].saturated
    assert mlx5_1.hw_counters["rx_write_requests"] == Counter(3809045607, None, False, None)
    assert not ports["mlx5_bond_0"].counters["link_downed"].saturated


def test_no_pma_is_none_with_its_reason_and_32bit_xmit_wait_is_saturated() -> None:
    ports = {p.key: p for p in read_ib_sysfs(NODE_EXPORTER).ports}
    assert sorted(ports) == ["i40iw0/1", "mlx4_0/1", "mlx4_0/2"]
    i40 = ports["i40iw0/1"]
    assert len(i40.counters) == 17
    for c in i40.counters.values():
        assert c.value is None and c.reason == "N/A (no PMA)" and not c.saturated
    assert i40.rate_gbps == 10.0 and i40.state_name == "ACTIVE"
    wait = ports["mlx4_0/1"].counters["port_xmit_wait"]
    assert wait == Counter(4294967295, None, True, 32)
    assert ports["mlx4_0/1"].rate_gbps == 40.0


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    shutil.copytree(H100, root)
    return root


def test_virtual_function_is_skipped_with_why(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    dev = root / "class" / "infiniband" / "mlx5_4" / "device"
    dev.mkdir()
    os.symlink("../0000:18:00.0", dev / "physfn")  # dangling, as a bare copy of sysfs leaves it
    r = read_ib_sysfs(root)
    assert "mlx5_4" not in {p.device for p in r.ports} and len(r.ports) == 8
    assert "virtual function" in r.skipped["mlx5_4"] and "physfn" in r.skipped["mlx5_4"]


def test_unreadable_counters_are_none_never_zero(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    counters = root / "class" / "infiniband" / "mlx5_1" / "ports" / "1" / "counters"
    (counters / "symbol_error").write_text("")
    (counters / "port_rcv_errors").write_text("garbage\n")
    (counters / "VL15_dropped").unlink()
    os.symlink("gone", counters / "VL15_dropped")  # a read that fails with an OSError
    p = {p.device: p for p in read_ib_sysfs(root).ports}["mlx5_1"]
    assert p.counters["symbol_error"] == Counter(None, "empty", False, 16)
    assert p.counters["port_rcv_errors"].value is None
    assert "not an integer" in (p.counters["port_rcv_errors"].reason or "")
    assert p.counters["VL15_dropped"] == Counter(None, "No such file or directory", False, 16)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a mode-000 file")
def test_permission_denied_is_a_reason(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    f = root / "class" / "infiniband" / "mlx5_1" / "ports" / "1" / "counters" / "link_downed"
    f.chmod(0)
    p = {p.device: p for p in read_ib_sysfs(root).ports}["mlx5_1"]
    assert p.counters["link_downed"] == Counter(None, "permission denied", False, 8)


def test_missing_tree_is_an_issue_not_a_crash(tmp_path: Path) -> None:
    r = read_ib_sysfs(tmp_path)
    assert r.ports == [] and len(r.issues) == 1 and "class/infiniband" in r.issues[0]


def test_delta_counts_resets_and_refuses_saturated(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    before = snapshot(read_ib_sysfs(root), "boot-a")
    counters = root / "class" / "infiniband" / "mlx5_bond_0" / "ports" / "1" / "counters"
    (counters / "port_rcv_errors").write_text("3\n")  # was larger: reset
    xmit = int((counters / "port_xmit_packets").read_text())
    (counters / "port_xmit_packets").write_text(f"{xmit + 1000}\n")
    after = snapshot(read_ib_sysfs(root), "boot-a")
    d = delta(before, after)
    prev_rcv = before.values["mlx5_bond_0/1"]["counters/port_rcv_errors"].value
    assert prev_rcv is not None and prev_rcv > 3
    assert d["mlx5_bond_0/1"]["counters/port_rcv_errors"].value == 3
    assert d["mlx5_bond_0/1"]["counters/port_rcv_errors"].reset
    assert d["mlx5_bond_0/1"]["counters/port_xmit_packets"].value == 1000
    assert d["mlx5_bond_0/1"]["counters/link_downed"].value == 0
    sat = d["mlx5_1/1"]["counters/link_downed"]
    assert sat.value is None and "saturated" in (sat.reason or "")
    # Another boot: every counter counts from 0, so the delta is the current value.
    other = delta(before, snapshot(read_ib_sysfs(root), "boot-b"))
    assert other["mlx5_bond_0/1"]["counters/port_xmit_packets"].value == xmit + 1000
    assert other["mlx5_bond_0/1"]["counters/port_xmit_packets"].reset
    assert delta(None, after)["mlx5_bond_0/1"]["counters/port_xmit_packets"].value is None


def test_counter_delta_edges() -> None:
    assert counter_delta(Counter(5), Counter(None, "N/A (no PMA)")).reason == "unreadable: N/A (no PMA)"
    assert counter_delta(Counter(200, width=8), Counter(255, None, True, 8)).value is None
    assert counter_delta(Counter(7), Counter(9)).value == 2


def test_ibstat_all_active() -> None:
    ports, issues = parse_ibstat((IBSTAT / "ibstat.47.0.h100.all.active.0").read_text())
    assert issues == [] and len(ports) == 12
    assert all(p.state == 4 and p.phys_state == 5 for p in ports)
    # This host's 12 ports are all RoCE: 8 at 400 Gb/s, 4 at 100.
    assert {p.link_layer for p in ports} == {"Ethernet"}
    assert sorted(p.rate_gbps for p in ports) == [100.0] * 4 + [400.0] * 8


def test_ibstat_some_down() -> None:
    ports, issues = parse_ibstat((IBSTAT / "ibstat.47.0.h100.some.down.0").read_text())
    assert issues == [] and len(ports) == 12
    down = {p.device: (p.state_name, p.phys_state_name, p.link_layer) for p in ports if p.state != 4}
    assert down == {d: ("DOWN", "Disabled", "Ethernet") for d in ("mlx5_2", "mlx5_7", "mlx5_8")}
    polling, _ = parse_ibstat((IBSTAT / "ibstat.47.0.h100.some.down.with.polling.1").read_text())
    assert [p.phys_state for p in polling if p.phys_state_name == "Polling"] == [2]


def test_ibstat_failed_run_is_an_issue_and_keeps_what_it_printed() -> None:
    path = str(IBSTAT / "ibstat.39.0.a100.failed.ibpanic.exit-255.0")
    ports, issues = parse_ibstat(Path(path).read_text(), path)
    assert len(ports) == 8 and all(p.rate_gbps == 200.0 for p in ports)
    assert len(issues) == 1 and issues[0].path == path and issues[0].line == 137
    assert "ibpanic" in issues[0].message and "mlx5_8" in issues[0].message


def test_ibstatus_reads_sysfs_words() -> None:
    text = (IBSTAT / "ibstatus.39.0.a100.all.active.0").read_text()
    ports, issues = parse_ibstatus(text)
    assert issues == [] and len(ports) == 9
    assert {(p.state, p.phys_state, p.rate_gbps) for p in ports if p.link_layer == "InfiniBand"} == {
        (4, 5, 200.0)
    }
    assert parse_ib_status_text(text)[0] == ports
    assert parse_ibstat("not ibstat\n")[1][0].message.startswith("no CA/Port blocks")


def test_ibwarn_is_a_warning_not_a_failed_run() -> None:
    text = (IBSTAT / "ibstat.47.0.h100.all.active.0").read_text()
    ports, issues = parse_ibstat("ibwarn: [123] umad_init: can't read ABI version\n" + text)
    assert len(ports) == 12 and len(issues) == 1
    assert issues[0].line == 1 and issues[0].message.startswith("ibstat warned: ibwarn:")
