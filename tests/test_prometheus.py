"""A real Prometheus server (Debian package `prometheus`) on loopback scrapes an agent fed by a recording and a
stand-in dcgm-exporter serving a real dcgm-exporter scrape (fixtures/samples/dcgm-exporter); the series come
back through Prometheus's HTTP API and join with dcgm-exporter's on its labels; the exported alerting rules load
in that server; and `promtool check metrics` finds nothing on the agent's /metrics but the one style note that
dcgm-exporter's own `modelName` label earns; and an injected XID 79 on a node with no XID yet is a firing alert in
ALERTS within two evaluation intervals."""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import FIXTURES

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


DCGM_SAMPLES = FIXTURES / "samples" / "dcgm-exporter" / "dcgm-exporter-metrics-samples.txt"
DCGM_HOST = "r6i3n0"  # the node of the V100 scrape below (dcgm-exporter issue #250): 4 GPUs, gpu 0 to 3


def _dcgm_scrape() -> bytes:
    """The V100 block of the samples file as dcgm-exporter served it (its HELP/TYPE lines and series)."""
    (block,) = [b for b in DCGM_SAMPLES.read_text().split("=== SOURCE: ") if "issue #250" in b.split("\n")[0]]
    lines = [ln for ln in block.splitlines()[1:] if ln.startswith(("DCGM_", "# HELP", "# TYPE"))]
    return ("\n".join(lines) + "\n").encode()


class _Exporter(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


def _metrics_with(port: int, needle: bytes) -> bytes | None:
    """The agent's /metrics once it shows `needle` (the port answers before the first tick)."""
    b = _get(f"http://127.0.0.1:{port}/metrics")
    return b if needle in b else None


def _fleettool() -> list[str]:
    exe = shutil.which("fleettool")
    return [exe] if exe else [sys.executable, "-m", "fleettool"]


def _fake_agent(db: Path, mport: int, inject: str, duration: str, *more: str) -> list[str]:
    """The argv of a 4-GPU fake-source agent serving /metrics on loopback, with no kernel log or dcgm-exporter."""
    return [
        *_fleettool(), "agent", "--source", "fake", "--gpus", "4", "--inject", inject, "--db", str(db),
        "--metrics-port", str(mport), "--metrics-addr", "127.0.0.1", "--flush", "2s", "--duration", duration,
        "--kmsg", "off", "--dcgm-exporter", "off", "--quiet", *more,
    ]  # fmt: skip


def _promtool_findings(body: bytes) -> tuple[int, list[str]]:
    chk = subprocess.run([PROMTOOL or "promtool", "check", "metrics"], input=body, capture_output=True)
    return chk.returncode, (chk.stdout + chk.stderr).decode().splitlines()


def test_promtool_finds_nothing_but_dcgm_exporters_camel_case_model_name(tmp_path: Path) -> None:
    """The agent's /metrics keeps dcgm-exporter's label names so the two join; promtool's lint calls one of
    them, `modelName`, camelCase. That note, on exactly the families that carry the label, is all it may say:
    with the label renamed the same body is clean."""
    assert PROMTOOL, "promtool is required in CI"
    mport = _port()
    args = ["--source", "fake", "--gpus", "2", "--db", str(tmp_path / "a.duckdb"), "--kmsg", "off"]
    args += ["--dcgm-exporter", "off", "--metrics-port", str(mport), "--duration", "40s", "--quiet"]
    agent = subprocess.Popen(
        [*_fleettool(), "agent", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        body = _wait(lambda: _metrics_with(mport, b"fleettool_gpu_info{"), 30, "the agent's GPU inventory")
    finally:
        agent.terminate()
        agent.wait(timeout=15)
    rc, lines = _promtool_findings(body)
    with_model = {m.group(1) for m in re.finditer(rb"^(\w+)\{[^}]*modelName=", body, re.M)}
    note = " label names should be written in 'snake_case' not 'camelCase'"
    assert rc != 0 and lines and all(ln.endswith(note) for ln in lines), lines
    assert {ln[: -len(note)] for ln in lines} == {n.decode() for n in with_model}
    assert len(with_model) > 20
    rc, lines = _promtool_findings(body.replace(b"modelName=", b"model_name="))
    assert rc == 0 and lines == [], lines


def test_prometheus_scrapes_the_agent_and_loads_the_rules(tmp_path: Path) -> None:
    assert PROM and PROMTOOL, "prometheus/promtool are required in CI"
    mport, pport = _port(), _port()
    agent = subprocess.Popen(
        _fake_agent(tmp_path / "a.duckdb", mport, "thermal@gpu=1", "60s", "--node", DCGM_HOST),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    prom = None
    _Exporter.body = _dcgm_scrape()
    dcgm = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    threading.Thread(target=dcgm.serve_forever, daemon=True).start()
    dport = dcgm.server_address[1]
    try:
        body = _wait(
            lambda: _metrics_with(mport, b"fleettool_gpu_temp_celsius{"), 30, "the agent's first tick"
        )
        text = body.decode()
        assert "# TYPE fleettool_gpu_temp_celsius gauge" in text  # base units, counters with _total
        assert "# TYPE fleettool_agent_collector_up gauge" in text
        assert (
            "# TYPE fleettool_sm_clock_hertz gauge" in text
            and "# TYPE fleettool_energy_joules_total counter" in text
        )
        rules = tmp_path / "rules.yml"
        r = subprocess.run(
            [*_fleettool(), "rules", "export", "--prometheus", "-o", str(rules)],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, r.stderr
        cfg = tmp_path / "prometheus.yml"
        cfg.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files: ['{rules}']\n"
            f"scrape_configs:\n  - job_name: fleettool\n    static_configs:\n      - targets: ['127.0.0.1:{mport}']\n"
            f"  - job_name: dcgm-exporter\n    static_configs:\n      - targets: ['127.0.0.1:{dport}']\n"
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

        def joined() -> list | None:  # type: ignore[type-arg]
            # a dashboard's join: fleettool's temperature beside dcgm-exporter's PCIe replays, per GPU
            q = "fleettool_gpu_temp_celsius * on(Hostname, gpu) group_left() DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
            res = json.loads(_get(f"{api}/query?query=" + urllib.parse.quote(q)))["data"]["result"]
            return res if len(res) == 4 else None

        pairs = _wait(joined, 30, "fleettool's series joined with dcgm-exporter's on Hostname and gpu")
        assert {(p["metric"]["Hostname"], p["metric"]["gpu"]) for p in pairs} == {
            (DCGM_HOST, str(i)) for i in range(4)
        }
        q = "fleettool_gpu_info * on(Hostname, gpu, device) group_left() DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
        res = json.loads(_get(f"{api}/query?query=" + urllib.parse.quote(q)))["data"]["result"]
        assert len(res) == 4  # the info series joins too, on dcgm-exporter's device label as well
    finally:
        dcgm.shutdown()
        for p in (prom, agent):
            if p is not None:
                p.terminate()
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()


class _Stack:
    """A fake-source agent on loopback, and a real Prometheus scraping it every second with the exported rules."""

    def __init__(self, tmp_path: Path, inject: str, eval_s: int = 1) -> None:
        assert PROM and PROMTOOL, "prometheus/promtool are required in CI"
        self.tmp = tmp_path
        self.eval_s = eval_s
        self.mport, self.pport = _port(), _port()
        self.base = _fleettool()
        self.api = f"http://127.0.0.1:{self.pport}/api/v1"
        self.procs: list[subprocess.Popen] = []  # type: ignore[type-arg]
        self.inject = inject

    def __enter__(self) -> _Stack:
        self.procs.append(
            subprocess.Popen(
                _fake_agent(self.tmp / "a.duckdb", self.mport, self.inject, "90s"),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        self.body = _wait(lambda: _get(f"http://127.0.0.1:{self.mport}/metrics"), 30, "the agent's /metrics")
        self.rules = self.tmp / "rules.yml"
        r = subprocess.run(
            [*self.base, "rules", "export", "--prometheus", "-o", str(self.rules)],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, r.stderr
        cfg = self.tmp / "prometheus.yml"
        cfg.write_text(
            f"global:\n  scrape_interval: 1s\n  evaluation_interval: {self.eval_s}s\n"
            f"rule_files: ['{self.rules}']\n"
            f"scrape_configs:\n  - job_name: fleettool\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{self.mport}']\n"
        )
        self.procs.append(
            subprocess.Popen(
                [
                    PROM,  # type: ignore[list-item]
                    f"--config.file={cfg}",
                    f"--storage.tsdb.path={self.tmp / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{self.pport}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        return self

    def __exit__(self, *exc: object) -> None:
        for p in reversed(self.procs):
            p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()

    def query(self, q: str) -> list:  # type: ignore[type-arg]
        return list(json.loads(_get(f"{self.api}/query?query={urllib.parse.quote(q)}"))["data"]["result"])


def test_an_injected_xid_79_fires_within_two_evaluations(tmp_path: Path) -> None:
    """A node's first XID, end to end: the agent has been scraped for a while with no XID counter, then XID 79
    arrives (its counter appears at 1). The exported rule's alert is in ALERTS, firing, within two evaluation
    intervals of the counter's first sample."""
    ev = 2
    with _Stack(tmp_path, "xid:79@gpu=3,after=15", eval_s=ev) as st:
        xid = 'fleettool_events_total{kind="xid",code="79"}'
        alert = 'ALERTS{alertname="GpuXidCriticalRebootNodeGpulost",alertstate="firing"}'
        _wait(lambda: st.query(alert), 60, "the XID 79 alert in ALERTS")
        (ctr,) = st.query(f"{xid}[5m]")
        (fired,) = st.query(f"{alert}[5m]")
        (up,) = st.query('up{job="fleettool"}[5m]')
        t_xid = float(ctr["values"][0][0])
        t_alert = float(fired["values"][0][0])
        assert float(up["values"][0][0]) < t_xid - 5, (
            "the agent was scraped before the XID (a node with none yet)"
        )
        assert ctr["values"][0][1] == "1"  # the counter appears at 1: increase() alone would not fire
        assert 0 <= t_alert - t_xid <= 2 * ev, (t_xid, t_alert)
        print(f"XID 79 counter at {t_xid}, alert firing at {t_alert}: {t_alert - t_xid:.1f} s")
        assert fired["metric"]["code"] == "79" and fired["metric"]["severity"] == "critical"
        (a,) = [
            a
            for a in json.loads(_get(f"{st.api}/alerts"))["data"]["alerts"]
            if a["labels"]["alertname"] == "GpuXidCriticalRebootNodeGpulost"
        ]
        node = a["labels"].get("Hostname") or a["labels"].get("hostname")
        assert node, a["labels"]
        assert a["annotations"]["summary"].endswith(": XID 79"), a["annotations"]
        assert a["annotations"]["runbook_url"] == (
            "https://github.com/fleettool/fleettool/blob/main/runbooks/gpu-xid.md"
        )
