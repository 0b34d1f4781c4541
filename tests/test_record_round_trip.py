"""`fleettool record` then `fleettool replay` of the same directory stores what the live agent saw: the same events
(kind, GPU, UUID, PCI id, code, message, time, detail), the GPU inventory, and alerts on the same GPU.

In-process: one agent run (the fake GPU source on the test's clock, and the kernel-log collector over real driver
lines) writes its store and, through its sink, a recording; the recording is replayed into a second store and the
two are compared. As processes: `fleettool agent --db` and `fleettool record` with the same faults, then
`fleettool replay`, compared by what the commands print."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fleettool.agent.loop import Agent, AgentConfig
from fleettool.collectors.kmsg import KmsgCollector
from fleettool.collectors.nvml import NvmlCollector
from fleettool.engine.incremental import RuleScheduler
from fleettool.engine.rules import load_rules
from fleettool.formats.fleettool_events import dump_event, parse_event
from fleettool.ingest.report import IngestOptions
from fleettool.model import Event
from fleettool.pipeline import replay
from fleettool.recording.identify import identify_bytes
from fleettool.recording.writer import RecordingWriter
from fleettool.sources.fake import FakeSource, parse_injection
from fleettool.store import Store
from tests.conftest import H200, promtool_or_skip, run_cli
from tests.test_agent_live import Clock

NODE = "gpu-9"
T0 = 1_800_000_000.123456  # a fraction of a second: the recording keeps event times to the microsecond
# the driver's own lines (fixtures/samples/kmsg/), read live by the kernel-log collector: an XID on the fake
# GPU 0 (PCI 0000:18:00) with its process, an SXid, the three-line "fallen off the bus" (its PCI id on the first
# line only), a GSP rate-limit line, and an XID with the kernel's uptime beside the wall time
KERNEL_LINES = [
    f"2027-01-15T08:00:01.250000+00:00 {NODE} kernel: NVRM: Xid (PCI:0000:18:00): 13, pid=2708, name=python, "
    "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
    f"2027-01-15T08:00:01.500000+00:00 {NODE} kernel: nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 12028, "
    "Non-fatal, Link 50 egress non-posted PRIV error (First)",
    "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",
    "               NVRM: (PCI ID: 10de:26b5) installed in this system has",
    "               NVRM: fallen off the bus and is not responding to commands.",
    f"2027-01-15T08:00:02+00:00 {NODE} kernel: NVRM: Rate limiting GSP RPC error prints for GPU at "
    "PCI:0000:9b:00 (printing 1 of every 30).  The GPU likely needs to be reset.",
    f"2027-01-15T08:00:02.750000+00:00 {NODE} kernel: [ 4909.922970] NVRM: Xid (PCI:0000:44:00): 79, "
    "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
]
# NVML's faults: GPU 1 lost from the first tick (its XID 79 before any read of it), a double-bit XID 48 on GPU 0
# later, and a read that fails (an nvml-error that is no XID)
INJECT = ["xid:79@gpu=1", "xid:48@gpu=0,after=2", "error@gpu=2,read=power,after=1"]
COMPARED = "ts, node, kind, gpu, uuid, pci_bus_id, code, message, detail"


class ListSource:
    """A LineSource over fixed lines, handed out a few per read."""

    boot_time: float | None = None
    name = "kern.log"

    def __init__(self, lines: list[str]) -> None:
        self.lines = list(lines)

    def open(self) -> None:
        pass

    def read(self, max_lines: int) -> list[str]:
        out, self.lines = self.lines[:3], self.lines[3:]
        return out

    def close(self) -> None:
        pass


def _events(db: Path) -> list[dict[str, Any]]:
    with Store(db, read_only=True) as s:
        return s.query(f"SELECT {COMPARED}, source FROM events ORDER BY ts, kind, code, message")


def _record_live(tmp_path: Path) -> tuple[Path, Path]:
    """One agent run into a store (live) and a recording (its sink); returns (the store, the recording)."""
    clk = Clock(T0)
    src = FakeSource(
        gpus=3, recording=H200 / "nvml.om.gz", inject=[parse_injection(s) for s in INJECT], clock=T0
    )
    db, out = tmp_path / "live.duckdb", tmp_path / "rec"
    writer = RecordingWriter(out, NODE)
    ag = Agent(
        AgentConfig(db=db, node=NODE, quiet=True),
        [NvmlCollector(src, NODE), KmsgCollector(NODE, source=ListSource(KERNEL_LINES))],
        sink=writer.add,
        scheduler=RuleScheduler(load_rules(None)),
        clock=clk.now,
        mono=clk.mono,
    )
    ag.start()
    for _ in range(5):
        ag.tick()
        assert ag.flush()
        clk.tick(1.000271)
    writer.write()
    return db, out


def test_a_recording_replays_into_the_events_and_gpus_the_agent_stored(tmp_path: Path) -> None:
    live_db, rec = _record_live(tmp_path)
    assert sorted(p.name for p in rec.iterdir()) == ["events.jsonl", "kernel.log", "nvml.om.gz"]
    kernel = (rec / "kernel.log").read_text().splitlines()
    # every line of the kernel log is a driver line, stamped to the microsecond; fleettool's own events are not
    driver = re.compile(
        r"^\S+\.\d{6}\+00:00 gpu-9 kernel: (?:\[ *\d+\.\d+\] )?(?:NVRM: |nvidia-nvswitch2: SXid \()"
    )
    assert all(driver.match(ln) for ln in kernel), kernel
    assert (
        f"{NODE} kernel: NVRM: GPU at PCI:0000:28:00: GPU-fa4e0000-0000-4000-8000-000000000001" in kernel[2]
    )
    assert any(".123456+00:00 gpu-9 kernel: NVRM: Xid (PCI:0000:28:00): 79, " in ln for ln in kernel)
    own = [parse_event(ln) for ln in (rec / "events.jsonl").read_text().splitlines()]
    assert {e.kind for e in own} == {"nvml-error"}

    with Store(tmp_path / "replay.duckdb") as store:
        res = replay(store, rec, IngestOptions(quiet=True), load_rules(None))
    assert [r.status for r in res.reports] == ["read", "read", "read"]
    assert (
        res.reports[1].stored() == "7 events, 3 GPU identities (PCI id -> UUID)"
    )  # 3 GPUs, each with its serial
    assert not any(r.issues for r in res.reports)
    # the inventory series is read for the GPUs' identity: never noted as "not stored"
    assert not [n for r in res.reports for n in r.notes if "not stored" in n]

    live, replayed = _events(live_db), _events(tmp_path / "replay.duckdb")
    kinds = Counter(e["kind"] for e in live)
    assert kinds == {"xid": 4, "nvml-error": 2, "sxid": 1, "fell-off-bus": 1, "gsp-rate-limit": 1}, kinds
    assert [{k: e[k] for k in COMPARED.split(", ")} for e in replayed] == [
        {k: e[k] for k in COMPARED.split(", ")} for e in live
    ]
    lost = next(
        e
        for e in replayed
        if e["kind"] == "xid" and e["code"] == 79 and e["pci_bus_id"] == "00000000:28:00.0"
    )
    assert lost["gpu"] == 1 and lost["uuid"] == "GPU-fa4e0000-0000-4000-8000-000000000001"
    # NVML's events keep their source; the kernel's say the file they were read from
    assert {e["source"] for e in replayed if e["kind"] == "nvml-error"} == {"nvml"}

    q = "SELECT gpu, uuid, pci_bus_id, serial FROM gpus WHERE gpu IS NOT NULL ORDER BY gpu"
    with Store(live_db, read_only=True) as a, Store(tmp_path / "replay.duckdb", read_only=True) as b:
        assert b.query(q) == a.query(q) and len(b.query(q)) == 3
        # the rules over the recording name the GPUs the agent's own judgement named
        alerts_q = "SELECT DISTINCT rule, gpu FROM alerts WHERE rule LIKE 'GpuXid%' OR category = 'gpu-lost'"
        live_alerts, replayed_alerts = a.query(alerts_q), b.query(alerts_q)
    assert {(r["rule"], r["gpu"]) for r in replayed_alerts} == {(r["rule"], r["gpu"]) for r in live_alerts}
    assert 1 in {r["gpu"] for r in replayed_alerts}


def test_an_event_line_round_trips_every_field() -> None:
    e = Event(
        T0,
        NODE,
        "nvml-error",
        'power(gpu 2): Unknown Error \u2013 "quoted"',
        gpu=2,
        uuid="GPU-x",
        pci_bus_id="00000000:38:00.0",
        code=None,
        source="nvml",
        detail={"pid": 7, "registers": ["0x1"]},
    )
    back = parse_event(dump_event(e))
    assert back == dataclasses.replace(e, pci_bus_id="0000:38:00")
    for bad, why in [
        ('{"ts": 1, "node": "n", "kind": "x"}', "no message"),
        ('{"ts": "today", "node": "n", "kind": "x", "message": ""}', "is not unix seconds"),
        ('{"ts": 1, "node": "n", "kind": "x", "message": "", "gpu": 4096}', "is not a GPU index"),
        ("[1, 2]", "not an event object"),
    ]:
        try:
            parse_event(bad)
        except ValueError as err:
            assert why in str(err), (bad, err)
        else:
            raise AssertionError(f"{bad} was read as an event")


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)
_FIELDS = ("gpu", "uuid", "pci_bus_id", "code", "source", "raw", "detail")


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=200),
        _JSON.map(json.dumps),
        st.fixed_dictionaries(
            {k: _JSON for k in ("ts", "node", "kind", "message")}, optional={k: _JSON for k in _FIELDS}
        ).map(json.dumps),
        st.integers(1, 5000).map(lambda n: "[" * n + "]" * n),
    )
)
def test_any_line_is_an_event_or_says_why_not(line: str) -> None:
    try:
        ev = parse_event(line)
    except ValueError:
        return
    assert ev.node and ev.kind and (ev.ts is None or math.isfinite(ev.ts))


@settings(max_examples=200, deadline=None)
@given(
    st.builds(
        Event,
        ts=st.none() | st.floats(0, 4e9),
        node=st.text(min_size=1, max_size=30),
        kind=st.text(min_size=1, max_size=20),
        message=st.text(max_size=200),
        gpu=st.none() | st.integers(0, 1023),
        uuid=st.none() | st.text(min_size=1, max_size=40),
        code=st.none() | st.integers(-(2**31), 2**31 - 1),
        raw=st.text(max_size=50),
        source=st.text(max_size=20),
        detail=st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=20), max_size=3),
    )
)
def test_every_event_line_reads_back_as_the_event(e: Event) -> None:
    line = dump_event(e)
    assert "\n" not in line
    assert parse_event(line) == e


def test_a_kernel_kind_no_driver_line_can_carry_is_kept_as_json(tmp_path: Path) -> None:
    """An XID whose PCI id is unknown, and a line whose text would not read back as itself, are not made into
    kernel lines (a made-up PCI id would name another device): they go to events.jsonl and replay as they were."""
    out = tmp_path / "rec"
    writer = RecordingWriter(out, NODE)
    nopci = Event(T0, NODE, "xid", "Xid 79 reported through NVML events", gpu=3, uuid="GPU-3", code=79)
    odd = Event(T0 + 1, NODE, "gsp-timeout", "GSP timed out", raw="gsp timed out, said someone", source="x")
    writer.events += [nopci, odd]
    assert [p.name for p in writer.write()] == ["nvml.om.gz", "events.jsonl"]
    with Store(tmp_path / "r.duckdb") as store:
        replay(store, out, IngestOptions(quiet=True), [])
        got = store.query("SELECT kind, gpu, uuid, pci_bus_id, code, message FROM events ORDER BY ts")
    assert got == [
        {"kind": "xid", "gpu": 3, "uuid": "GPU-3", "pci_bus_id": None, "code": 79, "message": nopci.message},
        {
            "kind": "gsp-timeout",
            "gpu": None,
            "uuid": None,
            "pci_bus_id": None,
            "code": None,
            "message": odd.message,
        },
    ]


def test_the_events_file_is_told_by_its_content() -> None:
    line = dump_event(Event(T0, NODE, "agent", "collector kmsg unavailable: no /dev/kmsg", source="kmsg"))
    assert identify_bytes((line + "\n").encode()).format == "fleettool-events"
    journal = '{"__REALTIME_TIMESTAMP": "1764675527548779", "MESSAGE": "NVRM: Xid", "_HOSTNAME": "w4"}\n'
    assert identify_bytes(journal.encode()).format == "kmsg-journal-json"
    assert identify_bytes(b'{"node": "n", "kind": "x"}\n').format == "unknown"


def test_a_fresh_recording_backfills_into_prometheus(tmp_path: Path) -> None:
    """The GPU inventory's info family (fleettool_gpu_info) and the series: promtool takes the whole file."""
    promtool = promtool_or_skip()
    _, rec = _record_live(tmp_path)
    om = tmp_path / "nvml.om"
    om.write_bytes(gzip.decompress((rec / "nvml.om.gz").read_bytes()))
    assert "# TYPE fleettool_gpu info\n" in om.read_text()
    r = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(tmp_path / "tsdb")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr + r.stdout


def _cli_json(*args: str) -> Any:
    r = run_cli(*args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_record_then_replay_names_the_gpus_the_live_agent_named(tmp_path: Path) -> None:
    """The commands: an XID on a GPU lost from the start (no `after=`) and one later, and the GPU-lost
    nvml-error; live (`fleettool agent --db`) and recorded-then-replayed give the same events and alerts."""
    inject = [a for spec in ("xid:79@gpu=1", "xid:48@gpu=0,after=1") for a in ("--inject", spec)]
    fake = ["--source", "fake", "--gpus", "2", "--recording", str(H200 / "nvml.om.gz"), "--node", NODE]
    live_db, rec, db = tmp_path / "live.duckdb", tmp_path / "rec", tmp_path / "r.duckdb"
    r = run_cli("record", "--out", str(rec), "--duration", "3s", *fake, *inject)
    assert r.returncode == 0, r.stderr
    assert "and 3 events" in r.stdout
    # the collectors `record` runs by default: nvml only (no fabric collector's "unavailable" event)
    r = run_cli("agent", "--db", str(live_db), "--duration", "3s", "--kmsg", "off", "--dcgm-exporter", "off",
                "--no-collector", "fabric", *fake, *inject, "-q")  # fmt: skip
    assert r.returncode == 0, r.stderr
    om = gzip.decompress((rec / "nvml.om.gz").read_bytes()).decode()
    assert 'fleettool_gpu_info{hostname="gpu-9",gpu="1",UUID="GPU-fa4e0000-0000-4000-8000-000000000001"' in om
    assert 'fleettool_gpu_temp_c{hostname="gpu-9",gpu="1"' not in om  # GPU 1 never answered a read

    rr = run_cli("replay", str(rec), "--db", str(db), "--strict", "--json")
    assert rr.returncode == 0, rr.stderr + rr.stdout
    key = ("kind", "gpu", "uuid", "pci_bus_id", "code", "message")
    live = Counter(tuple(e[k] for k in key) for e in _cli_json("events", "--db", str(live_db)))
    replayed = Counter(tuple(e[k] for k in key) for e in _cli_json("events", "--db", str(db)))
    assert replayed == live
    assert ("nvml-error", 1, "GPU-fa4e0000-0000-4000-8000-000000000001", "00000000:28:00.0", 15) in {
        k[:5] for k in live
    }
    live_alerts = {(a["category"], a["gpu"]) for a in _cli_json("alerts", "--db", str(live_db))}
    replayed_alerts = {(a["category"], a["gpu"]) for a in json.loads(rr.stdout)["alerts"]}
    assert replayed_alerts == live_alerts and ("gpu-lost", 1) in replayed_alerts


def test_an_older_recordings_own_event_lines_are_named_not_dropped(tmp_path: Path) -> None:
    log = tmp_path / "kernel.log"
    log.write_text(
        f"2027-01-15T08:00:01+0000 {NODE} kernel: NVRM: Xid (PCI:0000:28:00): 79, pid='<unknown>', "
        "name=<unknown>, Xid 79 reported through NVML events\n"
        f"2027-01-15T08:00:01+0000 {NODE} kernel: fleettool[nvml]: nvml-error: GPU is lost: temperature(gpu 1)\n"
    )
    r = run_cli("replay", str(log), "--db", str(tmp_path / "a.duckdb"))
    assert r.returncode == 0 and f"{log}:2: fleettool's own event as an older recording wrote it" in r.stderr
    r = run_cli("replay", str(log), "--db", str(tmp_path / "b.duckdb"), "--strict")
    assert r.returncode == 3, r.stderr


def test_record_gives_up_at_once_when_nothing_can_be_recorded(tmp_path: Path) -> None:
    """No collector can start (a recording the fake GPU source cannot play stands for NVML that cannot load):
    `record --duration 10m` exits 7 at once with the reason, instead of after ten minutes, and leaves no
    directory behind. Where NVML cannot load on this host, the real NVML source does the same."""
    bad = tmp_path / "not-a-recording.om"
    bad.write_text("garbage\n")
    out = tmp_path / "rec"
    r = run_cli(
        "record",
        "--out",
        str(out),
        "--source",
        "fake",
        "--recording",
        str(bad),
        "--duration",
        "10m",
        timeout=60,
    )
    assert r.returncode == 7, r.stderr
    assert r.stderr.splitlines() == [
        f"fleettool: nothing can be recorded into {out}: nvml: fake source cannot play {bad}: {bad}:1: "
        "sample has no value"
    ]
    assert not out.exists()
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        real = run_cli("record", "--out", str(out), "--duration", "10m", timeout=60)
        assert (
            real.returncode == 7 and "nothing can be recorded" in real.stderr and "nvml: NVML" in real.stderr
        )
        assert not out.exists()
    else:  # a host with a driver records GPUs; the fake source's case above holds everywhere
        pynvml.nvmlShutdown()
