"""Kernel-log XID -> alert latency of the agent as deployed, next to the floor of a bare /dev/kmsg reader.

Needs root (it writes to /dev/kmsg). Starts `fleettool agent` (fake source with 8 GPUs, so the XID's PCI id
resolves to a GPU; kernel log = /dev/kmsg as the DaemonSet reads it; built-in rules; /metrics on loopback;
dcgm-exporter off) and, after its start-up, writes one `NVRM: Xid (PCI:...): 79` line per fake GPU to
/dev/kmsg, --gap seconds apart. For each it measures, from the write:
- metrics_s: until /metrics shows a `fleettool_alerts` series for that GPU (polled every 5 ms);
- store_s: until the alert is in the store for a reader (`SELECT ... FROM alerts` on a read-only connection
  opened per poll, as `fleettool alerts` does; polled every 20 ms).
The floor: a bare reader thread of /dev/kmsg in this process, the time from write to its read() returning the
line. Prints and writes (--json) every probe and the max/median.

  sudo python bench/event_latency.py --json bench/results/event-latency.json
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--gap", type=float, default=3.0, help="seconds between XIDs")
    ap.add_argument("--port", type=int, default=19411)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp())
    db = work / "agent.duckdb"
    exe = shutil.which("fleettool")
    cmd = [exe, "agent"] if exe else [sys.executable, "-m", "fleettool", "agent"]
    cmd += ["--db", str(db), "--source", "fake", "--gpus", str(a.gpus), "--kmsg", "auto"]
    cmd += ["--dcgm-exporter", "off", "--metrics-port", str(a.port), "--metrics-addr", "127.0.0.1"]
    errlog = (work / "agent.stderr").open("w")  # noqa: SIM115 - open for the agent's whole life
    agent = subprocess.Popen(cmd, stderr=errlog)
    bare = BareReader()
    bare.start()
    probes = []
    try:
        end = time.monotonic() + 60
        while "fleettool_agent_collector_up" not in _metrics(a.port) and time.monotonic() < end:
            time.sleep(0.2)
        time.sleep(5)  # past the start-up flush and the first rules
        with open("/dev/kmsg", "w") as kmsg:
            for i in range(a.gpus):
                pci = f"0000:{0x18 + i * 0x10:02x}:00"
                tag = f"p{i}x{int(time.time())}"
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
                    "gpu": i,
                    "metrics_s": m_s,
                    "store_s": s_s,
                    "bare_read_s": None if floor is None else floor - t0,
                }
                probes.append(p)
                print(json.dumps(p), flush=True)
                time.sleep(a.gap)
    finally:
        agent.terminate()
        agent.wait(30)

    def stat(k: str) -> dict[str, float | None]:
        v = [p[k] for p in probes if p[k] is not None]
        return {"n": len(v), "median": statistics.median(v) if v else None, "max": max(v) if v else None}

    out = {
        "probes": probes,
        "missed": sum(1 for p in probes if p["metrics_s"] is None or p["store_s"] is None),
        "metrics_s": stat("metrics_s"),
        "store_s": stat("store_s"),
        "bare_read_s": stat("bare_read_s"),
        "agent_stderr": (work / "agent.stderr").read_text()[-2000:],
        "nproc": os.cpu_count(),
    }
    print(json.dumps({k: v for k, v in out.items() if k != "probes"}, indent=1))
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
