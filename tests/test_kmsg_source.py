"""`--kmsg PATH` is read by what the path is: the kernel log device, a FIFO, a regular file; anything else has
one reason. Against the real things: this machine's /dev/kmsg (written to as root), real FIFOs with and without
a writer, a file rotated under the reader, a directory, a socket, /dev/null; and the real agent as a process,
which must start, turn a kernel line into a stored event and a /metrics counter, and stop on SIGTERM."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleettool.collectors.kmsg import KmsgCollector
from fleettool.sources.base import SourceUnavailable
from fleettool.sources.kmsg import (
    DevKmsgSource,
    FifoSource,
    FileFollowSource,
    KmsgPathMissing,
    LineSource,
    check_spec,
    source_for_path,
)
from tests.conftest import run_cli
from tests.test_agent import AgentProcess

XID79 = "NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus."
FAKE_ARGS = (
    "--source",
    "fake",
    "--gpus",
    "2",
    "--flush",
    "1s",
    "--interval",
    "0.5s",
    "--dcgm-exporter",
    "off",
)


def kmsg_write_refused() -> str | None:
    """Why this machine's kernel log must not get a test line, or None."""
    if not os.path.exists("/dev/kmsg"):
        return "no /dev/kmsg on this machine"
    if not os.access("/dev/kmsg", os.W_OK):
        return "/dev/kmsg is not writable here (writing a kernel log line needs root)"
    if os.environ.get("FLEETTOOL_TEST_WRITE_KMSG") != "1":
        return (
            "writes a test XID 79 into this machine's kernel log, which other monitors read: only with "
            "FLEETTOOL_TEST_WRITE_KMSG=1"
        )
    return None


needs_kmsg_write = pytest.mark.skipif(kmsg_write_refused() is not None, reason=str(kmsg_write_refused()))


def write_kmsg(line: str) -> None:
    with open("/dev/kmsg", "w") as f:  # one write() is one record
        f.write(line + "\n")


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    p = tmp_path / "kmsg.fifo"
    os.mkfifo(p)
    yield p


def _write_fifo_later(path: Path, text: str, delay: float) -> threading.Thread:
    def go() -> None:
        time.sleep(delay)
        with open(path, "w") as f:  # blocks until a reader has the FIFO open
            f.write(text)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def _read_until(src: LineSource, want: str, timeout: float = 5) -> list[str]:
    got: list[str] = []
    end = time.monotonic() + timeout
    while time.monotonic() < end and not any(want in ln for ln in got):
        got += src.read(100)
        time.sleep(0.02)
    return got


# -- what the path is picks the reader -----------------------------------------------------------------------


def test_each_kind_of_path_gets_its_reader_or_one_reason(tmp_path: Path, fifo: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    assert isinstance(source_for_path(str(fifo)), FifoSource)
    assert isinstance(source_for_path(str(log)), FileFollowSource)
    if os.path.exists("/dev/kmsg"):
        assert isinstance(source_for_path("/dev/kmsg"), DevKmsgSource)
    sock_path = tmp_path / "s.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(sock_path))
    try:
        refused = {
            str(tmp_path): "a directory, not a kernel log",
            str(sock_path): "a socket, not a kernel log",
            "/dev/null": "character device 1:3, not the kernel log (/dev/kmsg is 1:11)",
        }
        for path, why in refused.items():
            with pytest.raises(SourceUnavailable) as e:
                source_for_path(path)
            msg = str(e.value)
            assert (
                msg.startswith(f"{path}: ") and why in msg and "give /dev/kmsg, a FIFO or a log file" in msg
            )
            assert "\n" not in msg and not isinstance(e.value, KmsgPathMissing)
    finally:
        sock.close()
    with pytest.raises(KmsgPathMissing, match="no such file or directory"):
        source_for_path(str(tmp_path / "nope"))


def test_check_spec_refuses_only_a_missing_path(tmp_path: Path, fifo: Path) -> None:
    missing = str(tmp_path / "kern.lg")
    assert check_spec(missing) == (
        f"--kmsg {missing}: no such file or directory; give /dev/kmsg, a FIFO or a log file; "
        "or --kmsg auto, journal or off"
    )
    for ok in ("auto", "kmsg", "journal", "off", str(fifo), str(tmp_path), "/dev/null"):
        assert check_spec(ok) is None, ok  # exists: starts, or is reported unavailable while the agent runs


def test_a_char_device_that_is_not_kmsg_is_refused_even_by_the_kmsg_reader() -> None:
    with pytest.raises(SourceUnavailable, match=r"/dev/null: not the kernel log device"):
        DevKmsgSource("/dev/null").open()


# -- FIFOs ---------------------------------------------------------------------------------------------------


def test_fifo_without_a_writer_opens_at_once_and_reads_nothing(fifo: Path) -> None:
    src = FifoSource(str(fifo))
    t0 = time.monotonic()
    src.open()
    for _ in range(3):
        assert src.read(100) == []
    assert time.monotonic() - t0 < 1.0
    src.close()


def test_fifo_writer_comes_later_goes_away_and_comes_back(fifo: Path) -> None:
    src = FifoSource(str(fifo))
    src.open()
    assert src.read(10) == []
    _write_fifo_later(fifo, f"[  12.000000] {XID79}\n[  12.5] half a line wi", 0.2).join(5)
    got = _read_until(src, "half a line")
    # the writer closed without a final newline: that last line is complete, not kept waiting
    assert got == [f"[  12.000000] {XID79}", "[  12.5] half a line wi"]
    assert src.read(10) == []  # writer gone: no lines, no error, no block
    _write_fifo_later(fifo, "[  13.0] NVRM: Xid (PCI:0000:18:00): 48, DBE\n", 0.1).join(5)
    assert _read_until(src, "48, DBE") == ["[  13.0] NVRM: Xid (PCI:0000:18:00): 48, DBE"]
    src.close()


def test_fifo_made_again_at_the_same_path_is_reopened(fifo: Path) -> None:
    src = FifoSource(str(fifo))
    src.open()
    os.unlink(fifo)
    os.mkfifo(fifo)
    assert src.read(10) == []  # no writer on the old one: notices the new FIFO and opens it
    _write_fifo_later(fifo, "after the new mkfifo\n", 0.1).join(5)
    assert _read_until(src, "after") == ["after the new mkfifo"]
    src.close()


# -- a regular file ------------------------------------------------------------------------------------------


def test_file_is_followed_from_its_end_through_copytruncate(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("old line the follower must not report\n")
    src = source_for_path(str(log))
    src.open()
    assert src.read(10) == []
    with open(log, "a") as f:
        f.write("new 1\n")
    assert src.read(10) == ["new 1"]
    with open(log, "w") as f:  # logrotate copytruncate: same inode, shorter
        f.write("after truncate\n")
    assert src.read(10) == ["after truncate"]
    src.close()


def test_a_missing_path_is_unavailable_then_read_once_it_appears(tmp_path: Path) -> None:
    log = tmp_path / "later.log"
    col = KmsgCollector("gpu-9", spec=str(log))
    assert not col.start()
    assert col.reason is not None and col.reason.startswith(f"{log}: no such file or directory")
    assert col.collect(1.0).events == []
    log.write_text("")
    assert col.collect(2.0).events == [] and col.reason is None  # the path is looked at again: now a file
    with open(log, "a") as f:
        f.write(f"[  10.0] {XID79}\n")
    assert [(e.kind, e.code) for e in col.collect(3.0).events] == [("xid", 79)]
    col.close()


# -- /dev/kmsg -----------------------------------------------------------------------------------------------


@needs_kmsg_write
def test_dev_kmsg_source_reads_a_record_written_now() -> None:
    src = source_for_path("/dev/kmsg")
    src.open()
    src.read(10_000)  # drain whatever other writers put there since open
    write_kmsg(XID79)
    got = _read_until(src, "Xid (PCI:0000:18:00): 79")
    src.close()
    line = [ln for ln in got if "Xid (PCI:0000:18:00): 79" in ln][-1]
    assert line.startswith("[") and line.endswith("] " + XID79)
    uptime = float(line[1 : line.index("]")])
    assert abs(uptime - time.clock_gettime(time.CLOCK_BOOTTIME)) < 30


# -- the real agent ------------------------------------------------------------------------------------------


def _events(db: Path, want: int, timeout: float = 30, mark: str = "") -> list[dict[str, object]]:
    end = time.monotonic() + timeout
    rows: list[dict[str, object]] = []
    while time.monotonic() < end:
        r = run_cli("events", "--db", str(db), "--json", timeout=60)
        if r.returncode == 0:
            rows = [
                e
                for e in json.loads(r.stdout)
                if e["kind"] == "xid" and e["code"] == want and mark in str(e["message"])
            ]
            if rows:
                return rows
        time.sleep(0.5)
    raise AssertionError(f"no XID {want} event in {db} after {timeout:g}s: {rows}")


def _stopped_cleanly(agent: AgentProcess) -> str:
    rc, err, took = agent.stop()
    assert rc == 0, err
    assert took < 10, f"SIGTERM took {took:.1f}s"
    assert "Traceback" not in err, err
    return err


AVAILABLE = 'fleettool_agent_collector_available{Hostname="%s",collector="kmsg"} %s'
XID_TOTAL = 'fleettool_events_total{Hostname="%s",code="%d",kind="xid"}'


@needs_kmsg_write
def test_agent_reads_dev_kmsg_into_the_store_and_metrics(tmp_path: Path) -> None:
    db, node = tmp_path / "a.duckdb", "kmsg-dev"
    with AgentProcess("--db", str(db), "--node", node, "--kmsg=/dev/kmsg", *FAKE_ARGS) as agent:
        agent.wait_metrics(AVAILABLE % (node, "1.0"))
        # the agent reads the ring buffer from its start: this run's line is told from earlier runs' by a mark
        mark = f"(test run {os.getpid()} at {time.time():.6f})"
        write_kmsg(f"{XID79} {mark}")
        agent.wait_metrics(XID_TOTAL % (node, 79))
        (ev,) = _events(db, 79, mark=mark)
        assert ev["pci_bus_id"] == "00000000:18:00.0" and ev["source"] == "kmsg:kmsg" and ev["node"] == node
        assert ev["gpu"] == 0  # the fake H200 inventory puts GPU 0 at 0000:18:00
        _stopped_cleanly(agent)


def test_agent_with_a_fifo_nobody_writes_starts_and_stops_on_sigterm(tmp_path: Path, fifo: Path) -> None:
    node = "kmsg-fifo-idle"
    with AgentProcess(
        "--db", str(tmp_path / "i.duckdb"), "--node", node, f"--kmsg={fifo}", *FAKE_ARGS
    ) as agent:
        agent.wait_metrics(AVAILABLE % (node, "1.0"), 'collector="nvml"')
        _stopped_cleanly(agent)


def test_agent_reads_a_fifo_whose_writer_comes_later(tmp_path: Path, fifo: Path) -> None:
    db, node = tmp_path / "f.duckdb", "kmsg-fifo"
    with AgentProcess("--db", str(db), "--node", node, f"--kmsg={fifo}", *FAKE_ARGS) as agent:
        agent.wait_metrics(AVAILABLE % (node, "1.0"))  # up and serving before anyone writes
        _write_fifo_later(fifo, f"[  42.000000] {XID79}\n", 0.0).join(10)
        agent.wait_metrics(XID_TOTAL % (node, 79))
        (ev,) = _events(db, 79)
        assert ev["source"] == "kmsg:fifo" and ev["pci_bus_id"] == "00000000:18:00.0"
        _stopped_cleanly(agent)


def test_agent_follows_a_regular_file_through_rotation(tmp_path: Path) -> None:
    db, node, log = tmp_path / "r.duckdb", "kmsg-file", tmp_path / "kern.log"
    log.write_text(
        "2026-11-30T00:00:00+0000 kmsg-file kernel: NVRM: Xid (PCI:0000:18:00): 13, before start\n"
    )
    with AgentProcess("--db", str(db), "--node", node, f"--kmsg={log}", *FAKE_ARGS) as agent:
        agent.wait_metrics(AVAILABLE % (node, "1.0"))
        with open(log, "a") as f:
            f.write(f"2026-11-30T00:16:40+0000 {node} kernel: {XID79}\n")
        agent.wait_metrics(XID_TOTAL % (node, 79))
        os.rename(log, tmp_path / "kern.log.1")
        log.write_text(f"2026-11-30T00:20:00+0000 {node} kernel: NVRM: Xid (PCI:0000:18:00): 48, DBE\n")
        agent.wait_metrics(XID_TOTAL % (node, 48))
        assert _events(db, 79)[0]["source"] == "kmsg:file" and _events(db, 48)
        _stopped_cleanly(agent)
        r = run_cli("events", "--db", str(db), "--json")
        assert not [e for e in json.loads(r.stdout) if e["code"] == 13]  # followed from the end, like tail -F


def test_agent_given_a_directory_goes_on_and_says_why(tmp_path: Path) -> None:
    db, node = tmp_path / "d.duckdb", "kmsg-dir"
    with AgentProcess("--db", str(db), "--node", node, f"--kmsg={tmp_path}", *FAKE_ARGS) as agent:
        agent.wait_metrics(
            AVAILABLE % (node, "0.0"),
            f'fleettool_agent_collector_available{{Hostname="{node}",collector="nvml"}} 1.0',
        )
        err = _stopped_cleanly(agent)
    why = f"collector kmsg unavailable: {tmp_path}: a directory, not a kernel log"
    assert why in err
    r = run_cli("events", "--db", str(db), "--json")
    assert any(why in str(e["message"]) for e in json.loads(r.stdout) if e["kind"] == "agent")


def test_agent_refuses_a_missing_kmsg_path_at_start(tmp_path: Path) -> None:
    missing = tmp_path / "kern.lg"
    r = run_cli(
        "agent", "--db", str(tmp_path / "m.duckdb"), f"--kmsg={missing}", *FAKE_ARGS, "--duration", "5s"
    )
    assert r.returncode == 3, r.stderr
    assert r.stderr.strip().splitlines() == [f"fleettool: {check_spec(str(missing))}"]
