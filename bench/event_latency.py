"""Kernel-log XID -> alert latency of the agent as deployed, next to the floor of a bare /dev/kmsg reader.

Needs root (it writes to /dev/kmsg). Starts `fleettool agent` (the fake source with 8 GPUs, or `--source
nvml`: the live GPUs, whose PCI ids NVML gives; either way the XID's PCI id resolves to a GPU; kernel log =
/dev/kmsg as the DaemonSet reads it; built-in rules; /metrics on loopback; dcgm-exporter off) and, after its
start-up, writes one `NVRM: Xid (PCI:...): 79` line per GPU to /dev/kmsg, --gap seconds apart; --rounds
repeats that with a fresh agent and store (a GPU's alert, once firing, cannot be seen raised again). For each it measures, from the write:
- metrics_s: until /metrics shows a `fleettool_alerts` series for that GPU (polled every 5 ms);
- store_s: until the alert is in the store for a reader (`SELECT ... FROM alerts` on a read-only connection
  opened per poll, as `fleettool alerts` does; polled every 20 ms).
The floor: a bare reader thread of /dev/kmsg in this process, the time from write to its read() returning the
line. Prints and writes (--json) every probe and the max/median.

  sudo python bench/event_latency.py --rounds 3 --json bench/results/event-latency.json
  sudo python bench/event_latency.py --source nvml --rounds 5 --json $OUT/event-latency-nvml.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path


def _metrics(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
            return str(r.read().decode())
    except OSError:
        return ""


def _store_has(db: Path, gpu: int) -> bool:
    import duckdb

    try:
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.Error:
        return False  # the agent holds it for a flush
    try:
        return bool(
            con.execute("SELECT count(*) FROM alerts WHERE gpu = ? AND state = 'firing'", [gpu]).fetchall()[
                0
            ][0]
        )
    finally:
        con.close()


class BareReader(threading.Thread):
    """The floor: /dev/kmsg read as soon as select() says so; the monotonic time each marker was read."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        os.lseek(self.fd, 0, os.SEEK_END)
        self.seen: dict[str, float] = {}

    def run(self) -> None:
        while True:
            select.select([self.fd], [], [], 1.0)
            while True:
                try:
                    rec = os.read(self.fd, 16384).decode("utf-8", "replace")
                except BlockingIOError:
                    break
                except OSError:
                    continue
                if m := re.search(r"probe=(\w+)", rec):
                    self.seen.setdefault(m.group(1), time.monotonic())


def _pci_ids(source: str, gpus: int) -> list[str]:
    """The PCI ids the XID lines name, as the driver prints them (0000:18:00): the fake source's (18, 28, ...)
    or the live GPUs' from NVML."""
    if source == "fake":
        return [f"0000:{0x18 + i * 0x10:02x}:00" for i in range(gpus)]
    import pynvml

    pynvml.nvmlInit()
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            bus = pynvml.nvmlDeviceGetPciInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).busId
            bus = bus.decode() if isinstance(bus, bytes) else bus
            dom, b, dev = bus.split(":")[0], bus.split(":")[1], bus.split(":")[2].split(".")[0]
            out.append(f"{int(dom, 16):04x}:{b.lower()}:{dev.lower()}")
        return out
    finally:
        pynvml.nvmlShutdown()


def one_round(a: argparse.Namespace, rnd: int, bare: BareReader) -> tuple[list[dict[str, object]], str]:
    """A fresh agent and store; one XID 79 per GPU; the agent stopped. Returns the probes and its stderr."""
    work = Path(tempfile.mkdtemp())
    db = work / "agent.duckdb"
    pcis = _pci_ids(a.source, a.gpus)
    exe = shutil.which("fleettool")
    cmd = [exe, "agent"] if exe else [sys.executable, "-m", "fleettool", "agent"]
    cmd += ["--db", str(db), "--source", a.source, "--kmsg", "auto"]
    if a.source == "fake":
        cmd += ["--gpus", str(a.gpus)]
    cmd += ["--dcgm-exporter", "off", "--metrics-port", str(a.port), "--metrics-addr", "127.0.0.1"]
    errlog = (work / "agent.stderr").open("w")  # noqa: SIM115 - open for the agent's whole life
    # cwd: the work directory, so `python -m fleettool` takes the installed package, not a source tree here
    agent = subprocess.Popen(cmd, stderr=errlog, cwd=work)
    probes: list[dict[str, object]] = []
    try:
        end = time.monotonic() + 60
        while "fleettool_agent_collector_up" not in _metrics(a.port) and time.monotonic() < end:
            time.sleep(0.2)
        if agent.poll() is not None:
            errlog.flush()
            print((work / "agent.stderr").read_text()[-1500:], file=sys.stderr)
            raise SystemExit(f"the agent exited ({agent.returncode}) at start-up: {cmd}")
        time.sleep(5)  # past the start-up flush and the first rules
        with open("/dev/kmsg", "w") as kmsg:
            for i, pci in enumerate(pcis):
                tag = f"r{rnd}p{i}x{int(time.time())}"
                line = f"<3>NVRM: Xid (PCI:{pci}): 79, pid=4242, name=bench probe={tag}, GPU has fallen off the bus.\n"
                t0 = time.monotonic()
                kmsg.write(line)
                kmsg.flush()
                m_s = s_s = None
                while time.monotonic() - t0 < 10 and (m_s is None or s_s is None):
                    if m_s is None and re.search(rf'fleettool_alerts\{{[^}}]*gpu="{i}"', _metrics(a.port)):
                        m_s = time.monotonic() - t0
                    if s_s is None and _store_has(db, i):
                        s_s = time.monotonic() - t0
                    time.sleep(0.005)
                floor = bare.seen.get(tag)
                p = {
                    "round": rnd,
                    "gpu": i,
                    "pci": pci,
                    "metrics_s": m_s,
                    "store_s": s_s,
                    "bare_read_s": None if floor is None else floor - t0,
                }
                probes.append(p)
                print(json.dumps(p), flush=True)
                if m_s is None and agent.poll() is not None:
                    errlog.flush()
                    print((work / "agent.stderr").read_text()[-1500:], file=sys.stderr)
                    raise SystemExit(f"the agent exited ({agent.returncode}) before its alert was seen")
                time.sleep(a.gap)
    finally:
        agent.terminate()
        agent.wait(30)
        errlog.close()
    return probes, (work / "agent.stderr").read_text()[-2000:]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", choices=["fake", "nvml"], default="fake", help="nvml: the live GPUs' PCI ids")
    ap.add_argument("--gpus", type=int, default=8, help="fake source only")
    ap.add_argument("--rounds", type=int, default=1, help="fresh agent and store each round")
    ap.add_argument("--gap", type=float, default=3.0, help="seconds between XIDs")
    ap.add_argument("--port", type=int, default=19411)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    bare = BareReader()
    bare.start()
    probes: list[dict[str, object]] = []
    stderr = ""
    for rnd in range(a.rounds):
        got, stderr = one_round(a, rnd, bare)
        probes.extend(got)

    def stat(k: str) -> dict[str, float | None]:
        v = sorted(float(p[k]) for p in probes if p[k] is not None)  # type: ignore[arg-type]
        p99 = v[min(len(v) - 1, int(0.99 * len(v)))] if v else None
        return {
            "n": len(v),
            "median": statistics.median(v) if v else None,
            "p99": p99,
            "max": max(v) if v else None,
        }

    out = {
        "source": a.source,
        "probes": probes,
        "missed": sum(1 for p in probes if p["metrics_s"] is None or p["store_s"] is None),
        "metrics_s": stat("metrics_s"),
        "store_s": stat("store_s"),
        "bare_read_s": stat("bare_read_s"),
        "agent_stderr": stderr,
        "nproc": os.cpu_count(),
    }
    print(json.dumps({k: v for k, v in out.items() if k != "probes"}, indent=1))
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
