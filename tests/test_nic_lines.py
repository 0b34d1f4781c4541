"""The NIC driver's kernel lines (formats/nic_lines.py through formats/kmsg.py): each real line of fixtures/kernel-nic/
(sources in its SOURCES.md) becomes a `nic` record with detail.what, the PCI address kept with its function; ACCESS_REG
floods are one event per device a day with a count; a NIC line no pattern judges is counted, never dropped in
silence; replay and the rules judge them (link up is an event that raises nothing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleettool.formats.kmsg import KernelLogParser, parse_kernel_log
from fleettool.formats.nic_lines import DEDUP_S
from fleettool.store import Store
from tests.conftest import ROOT, run_cli

NIC = ROOT / "fixtures" / "kernel-nic"


def lines(name: str) -> list[str]:
    return (NIC / name).read_text().splitlines()


def whats(name: str, year: int = 2026) -> list[tuple[str | None, str | None]]:
    return [(r.detail.get("what"), r.pci_bus_id) for r in parse_kernel_log(lines(name), year=year)]  # type: ignore[misc]


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("gpud-pstore-dmesg.txt", [("cable-unplugged", "0000:41:00.1"), ("link-up", "0000:41:00.0")]),
        ("cx6-ocp3-x4-slot.dmesg", [("slot-power", "0000:04:00.0"), ("link-down", "0000:04:00.0")]),
        ("gx10-module-temp.txt", [("module-temp", None), ("link-down", None)]),
        ("cubecos-733.syslog", [("link-up", "0000:01:00.1")] * 4),
        ("truenas-igc.syslog", [("link-down", "0000:06:00.0"), ("link-up", "0000:06:00.0")]),
        (
            "netdev-2020-04-14-watchdog.dmesg",
            [("tx-timeout", None), ("tx-timeout", "0000:13:00.1"), ("tx-timeout", "0000:13:00.1")],
        ),
        (
            "netdev-2020-07-09-hot-unplug.dmesg",
            [("health-compromised", "0000:00:00.0")] * 2 + [("cmd-timeout", "0000:00:00.0")] * 7,
        ),
        (
            "cx6dx-overheat.dmesg",
            [
                ("link-down", "0000:01:00.0"),
                ("link-up", "0000:01:00.1"),
                ("link-down", "0000:41:00.0"),
                ("link-up", "0000:41:00.1"),
                ("health-compromised", "0000:41:00.0"),
                ("health-compromised", "0000:41:00.1"),
                ("health-compromised", "0000:41:00.0"),
                ("health-compromised", "0000:41:00.1"),
            ],
        ),
        ("node_exporter-3434.dmesg", [("access-reg", "0000:05:00.0"), ("access-reg", "0000:05:00.1")]),
        ("gpud-1164.syslog", [("access-reg", "0000:d2:00.0")]),
        (
            "arm-nas-16.dmesg",
            [],
        ),  # Cable plugged, "PCIe slot advertised sufficient power (75W)": nothing wrong
    ],
)
def test_each_real_line_is_read_as_what_it_says(name: str, want: list[tuple[str, str | None]]) -> None:
    assert whats(name) == want


def test_the_fields_of_each_line() -> None:
    recs = parse_kernel_log(lines("node-nic-faults.journal"))
    by = {str(r.detail["what"]): r for r in recs}
    assert all(r.kind == "nic" and r.host == "gpu-51" and r.ts is not None for r in recs)
    assert by["slot-power"].detail["slot_watts"] == 25
    assert by["cable-unplugged"].detail["module"] == 1
    assert by["link-up"].detail["netdev"] == "enp65s0f0np0"
    acc = by["access-reg"].detail
    assert (acc["register"], acc["op_mod"], acc["status"], acc["syndrome"], acc["err"]) == (
        "0x805",
        "0x1",
        "bad operation(0x2)",
        "0x9a6171",
        -22,
    )
    assert (by["cmd-timeout"].detail["command"], by["cmd-timeout"].detail["opcode"]) == ("2RST_QP", "0x50a")
    tx = [r for r in recs if r.detail["what"] == "tx-timeout"]
    # the old watchdog line names only eth1 (no PCI): the queue, the netdev and the driver
    assert tx[0].detail == {"netdev": "eth1", "driver": "mlx5_core", "queue": 19, "what": "tx-timeout"}
    assert tx[2].detail["queue"] == 19 and tx[2].pci_bus_id == "0000:13:00.1"


def test_a_watchdog_line_that_names_only_the_netdev_takes_the_pci_address_the_netdev_had() -> None:
    p = KernelLogParser()
    p.feed("[ 10.0] mlx5_core 0000:13:00.1 eth1: Link up")
    rec = p.feed("[ 6755.836716] NETDEV WATCHDOG: eth1 (mlx5_core): transmit queue 19 timed out")
    assert rec is not None and rec.pci_bus_id == "0000:13:00.1" and rec.detail["pci"] == "0000:13:00.1"
    # the 6.8 form names the device itself
    new = p.feed(
        "mlx5_core 0000:65:00.0 ens15np0: NETDEV WATCHDOG: CPU: 94: transmit queue 3 timed out 5032 ms"
    )
    assert new is not None and new.pci_bus_id == "0000:65:00.0"
    assert (new.detail["queue"], new.detail["timeout_ms"], new.detail["netdev"]) == (3, 5032, "ens15np0")


def test_a_nic_line_no_pattern_judges_is_counted_with_the_first_one_kept() -> None:
    p = KernelLogParser()
    assert list(p.feed_all(lines("arm-nas-16.dmesg"))) == []
    assert p.nic.unjudged == 2
    assert p.nic.first_unjudged == (1, "mlx5_core 0004:01:00.0: Port module event: module 0, Cable plugged")
    # a line that only mentions the module (a trace's module list) is not the driver's line: not counted
    q = KernelLogParser()
    assert list(q.feed_all(lines("netdev-2020-04-14-watchdog.dmesg"))) != []
    assert (
        q.nic.unjudged == 1
    )  # "EQ 0x1a: Cons = ..." only; "Modules linked in: ... mlx5_core ..." is not one


def test_access_reg_is_one_event_per_device_a_day_then_a_count() -> None:
    body = (
        "mlx5_core 0000:d2:00.0: mlx5_cmd_out_err:838:(pid 1441871): ACCESS_REG(0x805) op_mod(0x1) failed, "
        "status bad operation(0x2), syndrome (0x9a6171), err(-22)"
    )
    p = KernelLogParser()
    hours = [0, 1, 2, 23.9, 24.1, 30]
    recs = [p.feed(f"[{h * 3600 + 5:.6f}] {body}") for h in hours]
    got = [(h, r.detail.get("repeats_before")) for h, r in zip(hours, recs, strict=True) if r is not None]
    assert got == [(0, None), (24.1, 3)]  # the second day's event says how many lines the first day folded
    assert p.nic.deduplicated == 4
    assert recs[0] is not None and recs[0].detail["dedup_window_s"] == DEDUP_S
    # another device has its own window; a reboot starts every window again
    other = p.feed("[ 86500.5] " + body.replace("d2:00.0", "d2:00.1"))
    assert other is not None and other.pci_bus_id == "0000:d2:00.1"
    p.feed("[    0.000000] Linux version 6.8.0-45-generic (buildd@lcy02-amd64-075) #45-Ubuntu SMP")
    assert p.feed(f"[ 200.0] {body}") is not None


def test_replay_reads_nic_lines_notes_the_folded_and_unjudged_ones_and_judges_them(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    rep = run_cli("replay", str(NIC / "node-nic-faults.journal"), "--db", str(db), "--json")
    assert rep.returncode == 0, rep.stderr
    files = json.loads(rep.stdout)["files"]
    notes = files[0]["notes"]
    assert files[0]["events"] == 13
    assert any(n.startswith("2 NIC ACCESS_REG lines folded") for n in notes), notes
    assert any(n.startswith("2 NIC driver lines read but not judged") and "Cable plugged" in n for n in notes)
    with Store(db, read_only=True) as st:
        ev = st.query("SELECT pci_bus_id, detail FROM events WHERE kind = 'nic' ORDER BY ts, rowid")
        alerts = st.query("SELECT rule, severity, action FROM alerts ORDER BY rule")
    assert ev[0]["pci_bus_id"] == "00000000:04:00.0"  # the store's form, the function kept
    last = json.loads(ev[-1]["detail"])
    assert (last["what"], last["pci"], last["repeats_before"]) == ("access-reg", "0000:05:00.0", 1)
    got = {(a["rule"], a["severity"], a["action"]) for a in alerts}
    assert got == {
        ("NicAccessRegFailure", "info", "none"),
        ("NicCableUnplugged", "critical", "inspect-hardware"),
        ("NicCommandTimeout", "critical", "reboot-node"),
        ("NicHealthCompromised", "critical", "reboot-node"),
        ("NicLinkDown", "warning", "none"),
        ("NicModuleTemperature", "warning", "inspect-hardware"),
        ("NicSlotPower", "warning", "inspect-hardware"),
        ("NicTxTimeout", "warning", "none"),
    }
    assert (
        sum(1 for a in alerts if a["rule"] == "NicAccessRegFailure") == 3
    )  # 2 devices, one of them twice a day


def test_link_up_lines_are_events_that_raise_no_alert(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    rep = run_cli("replay", str(NIC / "cubecos-733.syslog"), "--db", str(db), "--year", "2026", "-q")
    assert rep.returncode == 0, rep.stderr
    with Store(db, read_only=True) as st:
        assert st.scalar("SELECT count(*) FROM events WHERE kind = 'nic'") == 4
        assert st.scalar("SELECT count(*) FROM alerts") == 0


def test_a_repeated_watchdog_line_takes_the_pci_address_once_its_netdev_is_known() -> None:
    p = KernelLogParser()
    line = "[ 6755.836716] NETDEV WATCHDOG: eth1 (mlx5_core): transmit queue 19 timed out"
    first = p.feed(line)
    assert first is not None and first.pci_bus_id is None  # nothing named eth1 yet
    p.feed("[ 6756.098429] mlx5_core 0000:13:00.1 eth1: TX timeout detected")
    again = p.feed(line)  # the same text: not frozen at "no PCI address" by the parse cache
    assert again is not None and again.pci_bus_id == "0000:13:00.1"


def test_a_nic_line_in_kern_log_and_in_the_journal_is_stored_once(tmp_path: Path) -> None:
    journal = lines("node-nic-faults.journal")[:4]
    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / "journal.txt").write_text("\n".join(journal) + "\n")
    # the same lines as rsyslog's kern.log writes them: another prefix, the same driver text
    (rec / "kern.log").write_text("\n".join("Nov  5 " + ln[11:19] + ln[24:] for ln in journal) + "\n")
    db = tmp_path / "s.duckdb"
    rep = run_cli("replay", str(rec), "--db", str(db), "--year", "2026", "--json")
    assert rep.returncode == 0, rep.stderr
    files = {Path(f["path"]).name: f for f in json.loads(rep.stdout)["files"]}
    assert files["journal.txt"]["events"] + files["kern.log"]["events"] == 3
    assert files["journal.txt"]["duplicate_events"] + files["kern.log"]["duplicate_events"] == 3
    with Store(db, read_only=True) as st:
        assert st.scalar("SELECT count(*) FROM events WHERE kind = 'nic'") == 3


def test_a_recorded_nic_event_replays_on_its_own_pci_function(tmp_path: Path) -> None:
    import dataclasses

    from fleettool.collectors.base import Collected
    from fleettool.formats.kmsg import record_to_event
    from fleettool.recording.writer import RecordingWriter

    recs = parse_kernel_log(lines("node-nic-faults.journal")[2:4])  # 41:00.1 unplugged, 41:00.0 link up
    assert [r.pci_bus_id for r in recs] == ["0000:41:00.1", "0000:41:00.0"]
    evs = []
    for i, r in enumerate(
        recs
    ):  # as the agent has them from /dev/kmsg: the record's sequence number in the detail
        ev = record_to_event(r, "gpu-51", "kmsg:kmsg")
        assert ev is not None
        evs.append(dataclasses.replace(ev, detail={**ev.detail, "kmsg_seq": i}))
    out = tmp_path / "rec"
    w = RecordingWriter(out, "gpu-51")
    w.add(Collected(events=evs))
    w.write()
    db = tmp_path / "s.duckdb"
    assert run_cli("replay", str(out), "--db", str(db), "-q").returncode == 0
    with Store(db, read_only=True) as st:
        got = st.query("SELECT pci_bus_id FROM events WHERE kind = 'nic' ORDER BY ts")
    # two functions of one card stay two devices (a GPU event's PCI id drops the function, a NIC's must not)
    assert [g["pci_bus_id"] for g in got] == ["00000000:41:00.1", "00000000:41:00.0"]


def test_a_nic_fault_is_the_node_s_incident_not_a_gpu_s(tmp_path: Path) -> None:
    """An mlx5 line's PCI address is the NIC's: the incident it roots names no GPU (it was shown as
    `root gpu-51 GPU 00000000:00:00.0`, scope gpu)."""
    db = str(tmp_path / "t.duckdb")
    src = str(NIC / "netdev-2020-07-09-hot-unplug.dmesg")
    run = run_cli("replay", src, "--db", db, "--node", "gpu-51", "--at", "2026-12-01T00:00:00Z")
    assert run.returncode == 0, run.stderr
    first = run.stdout.split("causes first:")[1].splitlines()[1]
    assert "root gpu-51;" in first and "GPU" not in first, first
    got = json.loads(run_cli("incidents", "--db", db, "--json").stdout)
    assert [(i["scope"], i["gpus"], i["root"]["gpu"], i["root"]["pci_bus_id"]) for i in got] == [
        ("node", 0, None, None)
    ]
