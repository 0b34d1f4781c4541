"""A real Prometheus server (Debian package `prometheus`) on loopback scrapes an agent fed by a recording;
the series come back through Prometheus's HTTP API; the exported alerting rules load in that server; and
`promtool check metrics` is clean on the agent's /metrics."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

PROM = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    (PROM is None or PROMTOOL is None) and not os.environ.get("CI"),
    reason="needs the Debian package prometheus (CI installs it)",
)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 - loopback
        return bytes(r.read())


def _wait(pred, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = pred()
            if last:
                return last
        except OSError as e:
            last = e
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}: {last!r}")


def test_prometheus_scrapes_the_agent_and_loads_the_rules(tmp_path: Path) -> None:
    assert PROM and PROMTOOL, "prometheus/promtool are required in CI"
    mport, pport = _port(), _port()
    exe = shutil.which("fleettool")
    base = [exe] if exe else [sys.executable, "-m", "fleettool"]
    agent = subprocess.Popen(
        [
            *base,
            "agent",
            "--source",
            "fake",
            "--gpus",
            "4",
            "--inject",
            "thermal@gpu=1",
            "--db",
            str(tmp_path / "a.duckdb"),
            "--metrics-port",
            str(mport),
            "--metrics-addr",
            "127.0.0.1",
            "--flush",
            "2s",
            "--duration",
            "60s",
            "--kmsg",
            "off",
            "--dcgm-exporter",
            "off",
            "--quiet",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    prom = None
    try:
        body = _wait(lambda: _get(f"http://127.0.0.1:{mport}/metrics"), 30, "the agent's /metrics")
        chk = subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True)
        assert chk.returncode == 0, chk.stdout.decode() + chk.stderr.decode()
        text = body.decode()
        assert "# TYPE fleettool_gpu_temp_celsius gauge" in text  # base units, counters with _total
        assert "# TYPE fleettool_agent_collector_up gauge" in text
        assert (
            "# TYPE fleettool_sm_clock_hertz gauge" in text
            and "# TYPE fleettool_energy_joules_total counter" in text
        )
        rules = tmp_path / "rules.yml"
        r = subprocess.run(
            [*base, "rules", "export", "--prometheus", "-o", str(rules)], capture_output=True, text=True
        )
        assert r.returncode == 0, r.stderr
        cfg = tmp_path / "prometheus.yml"
        cfg.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files: ['{rules}']\n"
            f"scrape_configs:\n  - job_name: fleettool\n    static_configs:\n      - targets: ['127.0.0.1:{mport}']\n"
        )
        prom = subprocess.Popen(
            [
                PROM,
                f"--config.file={cfg}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{pport}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        api = f"http://127.0.0.1:{pport}/api/v1"

        def temps() -> list | None:  # type: ignore[type-arg]
            q = urllib.parse.quote('fleettool_gpu_temp_celsius{job="fleettool"}')
            res = json.loads(_get(f"{api}/query?query={q}"))["data"]["result"]
            return res if len(res) == 4 else None

        series = _wait(temps, 40, "four GPUs' temperature series in Prometheus")
        assert {s["metric"]["gpu"] for s in series} == {"0", "1", "2", "3"}
        assert all(30 <= float(s["value"][1]) <= 100 for s in series)
        groups = json.loads(_get(f"{api}/rules"))["data"]["groups"]
        loaded = [r for g in groups for r in g["rules"]]
        assert len(loaded) >= 40
        assert all(r.get("health") in ("ok", "unknown") for r in loaded), [
            r for r in loaded if r.get("health") == "err"
        ]
        up = json.loads(_get(f"{api}/query?query=" + urllib.parse.quote("up{job='fleettool'}")))["data"][
            "result"
        ]
        assert up and up[0]["value"][1] == "1"
    finally:
        for p in (prom, agent):
            if p is not None:
                p.terminate()
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
