"""The kernel log over restarts, reboots and clock steps (issue 28): the agent reads /dev/kmsg from the start of
the ring buffer and stores each record once, by (boot id, sequence number) in the store; a boot is recorded
once per boot, so the repeat policy (the same XID after two reboots) fires live; a record's wall time is the
boot's, fixed once, plus its stamp, so a clock step moves nothing and NVML's report and the kernel's line of
one XID stay one event.

/dev/kmsg is played by a regular file of records in the device's own format (`pri,seq,usec,flags;message`,
one a line; DevKmsgSource(require_device=False)), the boot id by a file: nothing here writes to this machine's
kernel log. The store is a real DuckDB file, written by the agent's own tick and flush."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleettool.agent.loop import Agent, AgentConfig
from fleettool.collectors.base import Collected
from fleettool.collectors.kmsg import KmsgCollector
from fleettool.engine.rules import load_rules
from fleettool.model import Event
from fleettool.pipeline import Pipeline
from fleettool.sources.kmsg import DevKmsgSource
from fleettool.sources.kmsg_boot import monotonic_now
from fleettool.store import Store
from fleettool.store.kmsg_cursor import resume_point

NODE = "gpu-28"
XID = "NVRM: Xid (PCI:0000:{bus}:00): {code}, pid='<unknown>', name=<unknown>, {text}"


def rec(seq: int, usec: int, msg: str) -> str:
    """One /dev/kmsg record (Documentation/ABI/testing/dev-kmsg), with a dictionary line as the device has."""
    return f"4,{seq},{usec},-;{msg}\n SUBSYSTEM=pci\n"


def xid(code: int, bus: str = "18", text: str = "GPU has fallen off the bus.") -> str:
    return XID.format(bus=bus, code=code, text=text)


class Host:
    """One machine as the agent sees it: a kernel log (per boot), a boot id, a store, a wall clock."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.db, self.boot_id_path = tmp, tmp / "fleet.duckdb", tmp / "boot_id"
        self.boot = 0
        self.offset = 0.0  # wall clock minus the real one (a step, or another day)
        self.reboot()

    def reboot(self) -> None:
        self.boot += 1
        self.boot_id = f"0b00{self.boot:04d}-1111-2222-3333-444455556666"
        self.boot_id_path.write_text(self.boot_id + "\n")
        self.kmsg = self.tmp / f"kmsg.{self.boot}"  # a new ring buffer
        self.kmsg.write_text("")

    def write(self, *records: str) -> None:
        with self.kmsg.open("a") as f:
            f.write("".join(records))

    def realtime(self) -> float:
        return time.time() + self.offset

    def collector(self) -> KmsgCollector:
        resume = None
        if self.db.exists():
            with Store(self.db, read_only=True) as st:
                resume = resume_point(st, NODE, self.boot_id)
        return KmsgCollector(
            NODE,
            source=DevKmsgSource(str(self.kmsg), require_device=False),
            resume=resume,
            boot_id_path=str(self.boot_id_path),
            realtime=self.realtime,
        )

    def run_agent(self, *extra: Any, ticks: int = 1) -> KmsgCollector:
        """An agent process's life: start (reading where the store left off), tick, flush, stop."""
        c = self.collector()
        ag = Agent(AgentConfig(db=self.db, node=NODE, quiet=True), [*extra, c], clock=self.realtime)
        for _ in range(ticks):
            ag.tick()
        assert ag.flush()
        c.close()
        return c

    def events(self, kind: str) -> list[dict[str, Any]]:
        with Store(self.db, read_only=True) as st:
            return st.query(
                "SELECT epoch(ts) AS ts, code, pci_bus_id, source, detail FROM events WHERE kind = ? "
                "ORDER BY ts, code",
                [kind],
            )


def test_backlog_written_while_the_agent_was_down_is_read_at_restart_each_record_once(tmp_path: Path) -> None:
    h = Host(tmp_path)
    h.write(
        rec(0, 0, "Linux version 6.8.0-45-generic (buildd@lcy02-amd64-075) #45-Ubuntu SMP"),
        rec(1, 5_000_000, xid(79)),
        rec(2, 5_100_000, "mlx5_core 0000:ab:00.1: mlx5e_ethtool_set_link_ksettings:1099: link up"),
    )
    first = h.run_agent()
    assert first.skipped_stored == 0
    # printed while the agent was down (crash-looping, being rolled out): read at the next start
    h.write(
        rec(3, 60_000_000, xid(48, "3b", "An uncorrectable double bit error")), rec(4, 61_000_000, xid(79))
    )
    second = h.run_agent()
    # seq 1 (the XID) and seq 2 (the NIC link line, a `nic` event): stored by the first run, parsed again, not
    # events again
    assert second.skipped_stored == 2
    h.run_agent()  # nothing new: nothing stored twice
    got = [(e["code"], json.loads(e["detail"])) for e in h.events("xid")]
    assert [(code, d["kmsg_seq"]) for code, d in got] == [(79, 1), (48, 3), (79, 4)]
    assert {d["boot_id"] for _, d in got} == {h.boot_id}


def test_the_boot_is_recorded_once_per_boot_and_the_repeat_policy_sees_the_reboots(tmp_path: Path) -> None:
    h = Host(tmp_path)
    day = 86400.0
    for boot in range(3):  # a DBE (XID 48, repeat: hardware) in each of three boots, a day apart
        if boot:
            h.reboot()
        h.offset = boot * day
        h.write(rec(0, 0, "Linux version 6.8.0-45-generic #45-Ubuntu SMP"))
        h.run_agent()
        h.write(rec(7, 100_000_000, xid(48, "3b", "An uncorrectable double bit error")))
        h.run_agent()  # restarted in the same boot: no second boot record
    boots = h.events("boot")
    assert len(boots) == 3 and [b["source"] for b in boots] == ["kmsg:boot"] * 3
    xids = h.events("xid")
    assert len(xids) == 3
    assert all(b["ts"] < x["ts"] for b, x in zip(boots, xids, strict=True))
    with Store(h.db) as st:
        incidents = Pipeline(st, load_rules(None)).evaluate(now=xids[-1]["ts"] + 1)
    dbe = [
        f for i in incidents for f in i.findings if f.rule.alert == "GpuXid" and f.evidence.get("escalated")
    ]
    assert dbe, [(f.rule.alert, f.evidence) for i in incidents for f in i.findings]
    assert "seen in 3 boots" in str(dbe[0].evidence["escalated"])


def test_a_clock_step_after_start_moves_no_kernel_record(tmp_path: Path) -> None:
    h = Host(tmp_path)
    up1 = int((monotonic_now() - 30) * 1e6)
    h.write(rec(1, up1, xid(79)))
    h.run_agent()
    (first,) = h.events("xid")
    boot_time = first["ts"] - up1 / 1e6
    h.offset = 3600.0  # the first NTP sync steps the clock an hour forward; the agent restarts after it
    up2 = int((monotonic_now() - 1) * 1e6)
    h.write(rec(2, up2, xid(48, "3b", "An uncorrectable double bit error")))
    h.run_agent()
    second = h.events("xid")[1]
    assert abs(second["ts"] - (boot_time + up2 / 1e6)) < 0.01  # the boot's wall time is the first start's
    (boot,) = h.events("boot")
    assert abs(boot["ts"] - boot_time) < 0.01


class StepClockNvml:
    """NVML's event API reporting an XID, stamped by a wall clock stepped an hour forward since the agent
    started (what collectors/nvml.py does: the wall time at which the event came)."""

    id = "nvml"
    reason = None

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock, self.sent = clock, False

    def start(self) -> bool:
        return True

    def inflight(self) -> str | None:
        return None

    def collect(self, now: float) -> Collected:
        if self.sent:
            return Collected()
        self.sent = True
        e = Event(self.clock(), NODE, "xid", "GPU has fallen off the bus", pci_bus_id="0000:18:00", code=79)
        return Collected(events=[Event(**{**_fields(e), "source": "nvml"})])

    def close(self) -> None:
        pass


def _fields(e: Event) -> dict[str, Any]:
    return {k: getattr(e, k) for k in e.__dataclass_fields__}


def test_nvml_and_kernel_reports_of_one_xid_stay_one_across_a_clock_step_and_a_restart(
    tmp_path: Path,
) -> None:
    h = Host(tmp_path)
    h.run_agent()  # the first start of this boot fixes the boot's wall time
    h.offset = 3600.0  # then the clock steps
    h.write(rec(5, int(monotonic_now() * 1e6), xid(79)))  # the XID, printed now; NVML reports it now too
    h.run_agent(StepClockNvml(h.realtime))
    assert len(h.events("xid")) == 1, h.events("xid")
    h.run_agent()  # restarted: the kernel's line is in the backlog, and NVML's report of it is stored
    (only,) = h.events("xid")
    assert only["source"] == "nvml"


def test_the_agent_command_resumes_this_boot_from_its_store(tmp_path: Path) -> None:
    """`fleettool agent` hands the kmsg collector what its --db holds of this machine's boot (this boot id)."""
    from fleettool.sources.kmsg_boot import read_boot_id
    from fleettool.store.kmsg_cursor import this_boot_resume

    boot_id = read_boot_id()
    assert boot_id, "this machine has a boot id"
    db = tmp_path / "fleet.duckdb"
    assert this_boot_resume(db, NODE) is None  # no store yet: the whole ring buffer is read
    with Store(db) as st:
        st.write_events(
            [
                Event(1.7e9, NODE, "boot", "boot", source="kmsg:boot", detail={"boot_id": boot_id}),
                Event(
                    1.7e9 + 9,
                    NODE,
                    "xid",
                    xid(79),
                    code=79,
                    source="kmsg:kmsg",
                    detail={"kmsg_seq": 41, "boot_id": boot_id},
                ),
                Event(
                    1.7e9 + 9,
                    "other-node",
                    "xid",
                    xid(79),
                    code=79,
                    source="kmsg:kmsg",
                    detail={"kmsg_seq": 99, "boot_id": boot_id},
                ),
                Event(
                    1.7e9 + 9,
                    NODE,
                    "xid",
                    xid(79),
                    code=79,
                    source="kmsg:kmsg",
                    detail={"kmsg_seq": 77, "boot_id": "an-older-boot"},
                ),
            ]
        )
    r = this_boot_resume(db, NODE)
    assert r is not None and (r.boot_id, r.last_seq, r.boot_time) == (boot_id, 41, 1.7e9)
