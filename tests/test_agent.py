"""The agent as a process: SIGTERM flushes, kill -9 loses at most the unflushed batch, no GPU is survivable,
/metrics serves, readers read while it runs, and `record` writes a recording that replays."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from fleettool.store import Store
from tests.conftest import H200, promtool_or_skip, run_cli


def _start(*args: str) -> subprocess.Popen[str]:
    exe = shutil.which("fleettool")
    cmd = [exe, "agent", *args] if exe else [sys.executable, "-m", "fleettool", "agent", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class AgentProcess:
    """A real `fleettool agent` process with /metrics on a free loopback port: wait for what /metrics says,
    then SIGTERM it and get (exit code, stderr, seconds it took to stop)."""

    def __init__(self, *args: str, argv: list[str] | None = None, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        tail = ["--metrics-port", str(self.port), "--metrics-addr", "127.0.0.1"]
        if argv is None:
            exe = shutil.which("fleettool")
            argv = [exe, "agent"] if exe else [sys.executable, "-m", "fleettool", "agent"]
        self.proc = subprocess.Popen(
            [*argv, *args, *tail],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )

    def metrics(self) -> str:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as r:
                return str(r.read().decode())
        except OSError:
            return ""

    def wait_metrics(self, *needles: str, timeout: float = 45) -> str:
        """/metrics once it has every needle; fails naming the missing ones (and the agent's stderr)."""
        end = time.monotonic() + timeout
        body = ""
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise AssertionError(f"agent exited {self.proc.returncode}: {self.proc.stderr.read()}")  # type: ignore[union-attr]
            body = self.metrics()
            if body and all(n in body for n in needles):
                return body
            time.sleep(0.2)
        missing = [n for n in needles if n not in body]
        self.stop()
        raise AssertionError(f"/metrics never showed {missing}")

    def stop(self, timeout: float = 15) -> tuple[int, str, float]:
        t0 = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            _out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _out, err = self.proc.communicate()
            raise AssertionError(f"SIGTERM did not stop the agent within {timeout:g}s: {err}") from None
        return self.proc.returncode, err, time.monotonic() - t0

    def __enter__(self) -> AgentProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def _wait_rows(db: Path, sql: str, minimum: int, timeout: float = 30) -> int:
    end = time.monotonic() + timeout
    n = 0
    while time.monotonic() < end:
        if db.exists():
            try:
                with Store(db, read_only=True, wait_s=1) as s:
                    n = int(s.scalar(sql) or 0)
            except Exception:
                n = 0
            if n >= minimum:
                return n
        time.sleep(0.2)
    return n


def test_sigterm_flushes_and_readers_read_while_it_runs(tmp_path: Path) -> None:
    db = tmp_path / "a.duckdb"
    port = free_port()  # a fixed port failed the test whenever anything else on the machine held it
    p = _start(
        "--db",
        str(db),
        "--source",
        "fake",
        "--gpus",
        "2",
        "--interval",
        "0.2s",
        "--flush",
        "1s",
        "--recording",
        str(H200 / "nvml.om.gz"),
        "--node",
        "gpu-17",
        "--metrics-port",
        str(port),
        "--metrics-addr",
        "127.0.0.1",
    )
    try:
        assert _wait_rows(db, "SELECT count(*) FROM samples", 20) >= 20  # a reader between flushes
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        power = (
            'fleettool_power_watts{DCGM_FI_DRIVER_VERSION="580.159.04",Hostname="gpu-17",'
            'UUID="GPU-fa4e0000-0000-4000-8000-000000000001",device="nvidia1",gpu="1",modelName="NVIDIA H200",'
            'pci_bus_id="00000000:28:00.0"}'
        )
        assert power in body
        assert 'fleettool_agent_collector_up{Hostname="gpu-17",collector="nvml"} 1.0' in body
        time.sleep(0.5)
    finally:
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    m = err.strip().splitlines()[-1]
    assert "stopped after" in m
    flushed = int(m.split(";")[1].split()[0])
    with Store(db, read_only=True) as s:
        assert s.scalar("SELECT count(*) FROM samples") + s.scalar("SELECT count(*) FROM events") == flushed
        assert s.scalar("SELECT count(DISTINCT gpu) FROM samples WHERE gpu IS NOT NULL") == 2


def test_kill_9_loses_at_most_the_unflushed_batch(tmp_path: Path) -> None:
    db = tmp_path / "k.duckdb"
    p = _start(
        "--db",
        str(db),
        "--source",
        "fake",
        "--gpus",
        "1",
        "--interval",
        "0.1s",
        "--flush",
        "0.5s",
        "--recording",
        str(H200 / "nvml.om.gz"),
        "-q",
    )
    try:
        before = _wait_rows(db, "SELECT count(*) FROM samples", 50)
        assert before >= 50
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=10)
    with Store(db) as s:  # opens read-write after the crash (DuckDB replays its WAL)
        after = s.scalar("SELECT count(*) FROM samples")
        assert after >= before
        assert s.scalar("SELECT count(*) FROM samples WHERE value IS NULL") == 0


def test_no_gpu_keeps_running_and_says_so(tmp_path: Path) -> None:
    db = tmp_path / "n.duckdb"
    r = run_cli(
        "agent",
        "--db",
        str(db),
        "--source",
        "nvml",
        "--duration",
        "2s",
        "--flush",
        "1s",
        "--node",
        "cpu-box",
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    with Store(db, read_only=True) as s:
        rows = {
            r["metric"]: r["v"]
            for r in s.query(
                "SELECT metric, arg_max(value, ts) AS v FROM samples WHERE node = 'cpu-box' GROUP BY metric"
            )
        }
        msgs = [e["message"] for e in s.query("SELECT message FROM events WHERE kind = 'agent'")]
    if rows.get("agent_nvml_available") == 1.0:  # this machine has a GPU
        assert rows["gpu_count"] >= 1
    else:
        assert rows["agent_nvml_available"] == 0.0 and rows["agent_collector_up"] == 0.0
        assert any("collector nvml unavailable" in m for m in msgs)


def test_hung_collector_is_visible_as_health_and_event(tmp_path: Path) -> None:
    db = tmp_path / "h.duckdb"
    r = run_cli(
        "agent",
        "--db",
        str(db),
        "--source",
        "fake",
        "--gpus",
        "1",
        "--inject",
        "hang@read=energy",
        "--watchdog",
        "0.5s",
        "--duration",
        "3s",
        "--interval",
        "0.5s",
        "--recording",
        str(H200 / "nvml.om.gz"),
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    with Store(db, read_only=True) as s:
        # a GPU's read that hangs sets that GPU aside (agent_nvml_gpu_hung), not the whole collector
        hung = s.scalar("SELECT max(value) FROM samples WHERE metric = 'agent_nvml_gpu_hung' AND gpu = 0")
        ev = s.query("SELECT message FROM events WHERE kind = 'agent' AND message LIKE '%hung%'")
    assert hung == 1.0
    assert ev and "energy(gpu 0)" in ev[0]["message"]


def test_record_then_replay_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "rec"
    r = run_cli(
        "record",
        "--out",
        str(out),
        "--duration",
        "3s",
        "--source",
        "fake",
        "--gpus",
        "2",
        "--inject",
        "xid:48@gpu=1",
        "--recording",
        str(H200 / "nvml.om.gz"),
        "--node",
        "gpu-9",
    )
    assert r.returncode == 0, r.stderr
    assert (out / "nvml.om.gz").exists() and (out / "kernel.log").exists()
    log = (out / "kernel.log").read_text()
    assert "NVRM: Xid (PCI:0000:28:00): 48," in log and "NVRM: GPU at PCI:0000:18:00: GPU-" in log
    db = tmp_path / "r.duckdb"
    rr = run_cli("replay", str(out), "--db", str(db), "--json")
    assert rr.returncode == 0, rr.stderr
    with Store(db, read_only=True) as s:
        assert (
            s.scalar("SELECT count(DISTINCT gpu) FROM samples WHERE node = 'gpu-9' AND gpu IS NOT NULL") == 2
        )
        assert s.scalar("SELECT max(value) FROM samples WHERE metric = 'power_limit_w'") == 700.0


def test_recording_is_valid_openmetrics_for_promtool(tmp_path: Path) -> None:
    promtool = promtool_or_skip()
    import gzip

    om = tmp_path / "h200.om"
    om.write_bytes(gzip.decompress((H200 / "nvml.om.gz").read_bytes()))
    r = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(tmp_path / "tsdb")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr + r.stdout
    assert any((tmp_path / "tsdb").iterdir())


def _nvml_starts() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


@pytest.mark.skipif(
    _nvml_starts(), reason="this machine has a working NVML: the no-driver path cannot be seen"
)
def test_record_on_a_machine_without_a_driver_says_no_gpu_was_recorded(tmp_path: Path) -> None:
    """The real NVML path with no driver (CI's machine): with nvml alone nothing can be recorded, so it gives up
    at once (exit 7, NVML's reason, no directory left); with the kernel log beside it, the files are written,
    with the agent's health series and the reason, and the exit is 7 with a line saying so, never a quiet 0."""
    out = tmp_path / "rec"
    r = run_cli("record", "--out", str(out), "--duration", "10m", "--interval", "1s", timeout=60)
    assert r.returncode == 7, (r.returncode, r.stderr)
    assert r.stderr.startswith(f"fleettool: nothing can be recorded into {out}: nvml: NVML could not start")
    assert not out.exists()
    r = run_cli(
        "record", "--out", str(out), "--duration", "2s", "--interval", "1s", "--collector", "nvml",
        "--collector", "kmsg",
    )  # fmt: skip
    assert r.returncode == 7, (r.returncode, r.stderr)
    if "nothing can be recorded" in r.stderr:  # this host's kernel log cannot be read either: both named
        assert "nvml: NVML could not start" in r.stderr and "kmsg: " in r.stderr
        return
    assert "no GPU was recorded: NVML answered for no GPU in 2s" in r.stderr
    assert "NVML could not start" in r.stderr
    assert (out / "nvml.om.gz").exists() and "collector nvml unavailable" in (
        out / "events.jsonl"
    ).read_text()
