"""The agent's metrics port under load, beside prometheus_client's own server in the same run.

Both servers run as their own process and serve the same body: the agent as deployed (`fleettool agent --source
fake --gpus 8`, its /metrics), the peer prometheus_client's `start_http_server` (the ThreadingHTTPServer most
Python exporters use) serving a collector that returns the agent's families. Per server:

1. idle: 20 scrapes one after another;
2. a crowd: 200 scrapes released at once;
3. a slowloris of 300 connections that never finish their headers, held while 200 more scrapes go at once;
   the slowloris released.

Each phase gives p50 and p99 latency, errors, the server's threads and RSS; the agent's tick lag (the loop's
health on its own /metrics) is read after the load. The peer runs with SIGPIPE ignored, as Python's default.

    python bench/scrape_load.py --json bench/results/scrape-load.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PEER = r"""
import sys, time
from prometheus_client import start_http_server
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import REGISTRY, Collector

body = open(sys.argv[2]).read()
fams = list(text_string_to_metric_families(body))
class Static(Collector):
    def collect(self):
        return iter(fams)
REGISTRY.register(Static())
start_http_server(int(sys.argv[1]), addr="127.0.0.1")
print("ready", flush=True)
while True:
    time.sleep(3600)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM", "Threads"):
            out[k] = int(v.split()[0])
    return out


def scrape(port: int, timeout: float = 120) -> tuple[float, bool]:
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
            ok = r.status == 200 and len(r.read()) > 0
    except OSError:
        ok = False
    return time.perf_counter() - t0, ok


def pct(xs: list[float], p: float) -> float:
    ys = sorted(xs)
    return ys[min(len(ys) - 1, int(p * len(ys)))]


def crowd(port: int, n: int) -> dict[str, float]:
    gate = threading.Barrier(n)

    def one(_: int) -> tuple[float, bool]:
        gate.wait()
        return scrape(port)

    with ThreadPoolExecutor(n) as pool:
        res = list(pool.map(one, range(n)))
    lat = [t for t, _ in res]
    return {
        "p50_ms": 1000 * pct(lat, 0.5),
        "p99_ms": 1000 * pct(lat, 0.99),
        "errors": sum(1 for _, ok in res if not ok),
    }


def run(port: int, pid: int) -> dict[str, object]:
    out: dict[str, object] = {"start": status(pid)}
    idle = [scrape(port)[0] for _ in range(20)]
    out["idle"] = {"p50_ms": 1000 * pct(idle, 0.5), "p99_ms": 1000 * pct(idle, 0.99)}
    out["crowd_200"] = crowd(port, 200)
    out["after_crowd"] = status(pid)
    held = []
    for _ in range(300):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            held.append(s)
        except OSError:
            break
    time.sleep(1.5)
    out["slowloris_held"] = len(held)
    out["during_slowloris"] = status(pid)
    out["crowd_200_under_slowloris"] = crowd(port, 200)
    for s in held:
        s.close()
    time.sleep(2)
    out["after_release"] = status(pid)
    return out


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"server exited {proc.returncode}")
        if scrape(port, 2)[1]:
            return
        time.sleep(0.3)
    raise SystemExit("server never answered")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    exe = Path(sys.executable).parent / "fleettool"
    port = free_port()
    agent = subprocess.Popen(
        [str(exe), "agent", "--db", str(tmp / "a.duckdb"), "--source", "fake", "--gpus", "8", "--kmsg", "off",
         "--dcgm-exporter", "off", "--metrics-port", str(port), "-q"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    results: dict[str, object] = {"machine": f"{os.cpu_count()} cores", "python": sys.version.split()[0]}
    try:
        wait_port(port, agent)
        time.sleep(3)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as r:
            body = r.read().decode()
        (tmp / "body.prom").write_text(body)
        results["body_bytes"] = len(body)
        results["agent"] = run(port, agent.pid)
        results["agent_alive"] = agent.poll() is None
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz") as r:
            results["agent_healthz"] = r.read().decode().strip()
    finally:
        agent.terminate()
        agent.wait(30)
    pport = free_port()
    peer = subprocess.Popen(
        [sys.executable, "-c", PEER, str(pport), str(tmp / "body.prom")], stdout=subprocess.PIPE
    )
    try:
        wait_port(pport, peer)
        results["peer_prometheus_client"] = run(pport, peer.pid)
        results["peer_alive"] = peer.poll() is None
    finally:
        peer.kill()
        peer.wait()
    text = json.dumps(results, indent=2)
    print(text)
    if a.json:
        a.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
