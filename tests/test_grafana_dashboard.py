"""The Grafana dashboard (deploy/grafana/fleettool.json): a dashboard model Grafana loads; every panel's query is
PromQL that Prometheus's own parser accepts (each as a recording rule under `promtool check rules`, which is
offline); every metric it selects is one the agent serves, by the names fleettool/metrics.py gives /metrics; its
label names are ones a real agent's /metrics carries; and against a real Prometheus scraping a real agent (fake
GPUs, an injected XID and thermal event) every query evaluates, and those over series the agent served return
them."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy_render import DASHBOARD

promql_parser = pytest.importorskip("promql_parser", reason="promql-parser is a dev dependency")
PROMTOOL = shutil.which("promtool")
PROM = shutil.which("prometheus")

# Grafana's variables, and the value each takes for the checks: the dashboard's own $Hostname (all nodes) and
# Grafana's interval built-ins. Any other `$` in a query fails test_queries_use_only_known_variables.
VARIABLES = {"$__rate_interval": "1m", "$__range": "1h", "$Hostname": ".*"}
# Series Prometheus makes itself, not the agent.
PROMETHEUS_OWN = {"ALERTS": {"alertname", "alertstate"}}


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def queries() -> Iterator[tuple[str, str, str]]:
    """(panel title, refId, expr) of every query."""
    for p in dashboard()["panels"]:
        for t in p.get("targets", []):
            yield p["title"], t["refId"], t["expr"]


def concrete(expr: str) -> str:
    for var, value in VARIABLES.items():
        expr = expr.replace(var, value)
    return expr


def served_names() -> set[str]:
    """Every name the agent's /metrics can carry: each metric under its /metrics name (prom_spec, as
    fleettool/export/metrics_server.py serves it), the event counter and the open-alerts gauge."""
    from fleettool.metrics import METRICS, prom_spec

    return {prom_spec(m)[0] for m in METRICS} | {"fleettool_events_total", "fleettool_alerts"}


def selected(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, label names) an expression selects or groups by, from its syntax tree."""
    names: set[str] = set()
    labels: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            assert node.name, f"a selector without a metric name in {expr}"
            names.add(node.name)
            labels.update(m.name for m in node.matchers.matchers)
        elif isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
            labels.update(node.modifier.labels)
        elif (
            isinstance(node, promql_parser.BinaryExpr)
            and getattr(node.modifier, "matching", None) is not None
        ):
            labels.update(node.modifier.matching.labels)
            labels.update(getattr(node.modifier, "group_labels", None) or [])  # group_left(modelName)

    promql_parser.walk(promql_parser.parse(concrete(expr)), visit)
    return names, labels


def test_the_dashboard_is_a_grafana_dashboard_model() -> None:
    d = dashboard()
    assert d["uid"] == "fleettool-gpu-fleet" and d["title"] and isinstance(d["schemaVersion"], int)
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    host = variables["Hostname"]
    assert host["query"]["query"] == host["definition"] == "label_values(fleettool_gpus, Hostname)"
    assert host["includeAll"] and host["allValue"] == ".*"
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    cells: dict[tuple[int, int], str] = {}
    for p in d["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] >= 1, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = p["title"]
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)), p["title"]
        assert all(t["datasource"] == p["datasource"] and t["expr"].strip() for t in p["targets"]), p["title"]
    # what the issue asks the dashboard to show
    exprs = " ".join(e for _, _, e in queries())
    for needed in (
        'fleettool_events_total{kind="xid"',
        "fleettool_violation_thermal_seconds_total",
        "fleettool_violation_power_seconds_total",
        "fleettool_clock_event_reasons",
        "fleettool_remap_uncorrectable_rows_total",
        "fleettool_remap_pending",
        "ALERTS{",
        "fleettool_alerts",
    ):
        assert needed in exprs, needed


def test_queries_use_only_known_variables() -> None:
    for title, ref, expr in queries():
        assert re.findall(r"\$\{?\w+", concrete(expr)) == [], (title, ref, expr)


def _promtool_check(tmp_path: Path, exprs: dict[str, str]) -> subprocess.CompletedProcess[str]:
    if PROMTOOL is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is required in CI (Debian package prometheus)")
        pytest.skip("promtool (Debian package prometheus) is not installed")
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": k, "expr": v} for k, v in exprs.items()]}]}
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    return subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)


def test_every_query_is_promql_that_prometheus_parses(tmp_path: Path) -> None:
    exprs = {f"dashboard:panel_{i}": concrete(e) for i, (_, _, e) in enumerate(queries())}
    assert len(exprs) >= 25
    r = _promtool_check(tmp_path, exprs)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in r.stdout
    # the check can fail: one broken query among them is named
    r = _promtool_check(tmp_path, {**exprs, "dashboard:broken": "sum by (Hostname (fleettool_gpus)"})
    assert r.returncode != 0 and "dashboard:broken" in r.stdout + r.stderr


def test_every_metric_is_one_the_agent_serves() -> None:
    served = served_names()
    assert "fleettool_violation_thermal_seconds_total" in served and "fleettool_gpus_expected" in served
    used: set[str] = set()
    for title, ref, expr in queries():
        names, _ = selected(expr)
        unknown = names - served - set(PROMETHEUS_OWN)
        assert not unknown, (title, ref, unknown)
        used |= names
    assert len(used) >= 20
    # a name the agent does not serve is caught (the dcgm-exporter spelling, a guessed XID counter)
    for wrong in ("DCGM_FI_DEV_GPU_TEMP", "fleettool_xid_total"):
        assert selected(f"rate({wrong}[5m])")[0] - served == {wrong}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 - loopback
        return bytes(r.read())


def _wait_for(url: str, timeout: float) -> bytes:
    deadline, last = time.time() + timeout, None
    while time.time() < deadline:
        try:
            return _get(url)
        except (OSError, urllib.error.URLError) as e:
            last = e
            time.sleep(0.5)
    raise AssertionError(f"{url} did not answer within {timeout:g}s: {last!r}")


def _labels_by_metric(exposition: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for line in exposition.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})? ", line)
        if m:
            out.setdefault(m.group(1), set()).update(re.findall(r'([a-zA-Z_]\w*)="', m.group(3) or ""))
    return out


@pytest.mark.skipif(
    (PROM is None or PROMTOOL is None) and not os.environ.get("CI"),
    reason="needs the Debian package prometheus (CI installs it)",
)
def test_every_query_runs_against_a_real_prometheus_scraping_a_real_agent(tmp_path: Path) -> None:
    assert PROM, "prometheus is required in CI"
    mport, pport = _port(), _port()
    here = Path(sys.executable).parent / "fleettool"
    cmd = [str(here)] if here.exists() else [sys.executable, "-m", "fleettool"]
    agent = subprocess.Popen(
        [*cmd, "agent", "--source", "fake", "--gpus", "2", "--inject", "xid:79@gpu=1,after=2"]
        + ["--inject", "thermal@gpu=0", "--db", str(tmp_path / "a.duckdb"), "--kmsg", "off"]
        + ["--dcgm-exporter", "off", "--metrics-port", str(mport), "--metrics-addr", "127.0.0.1"]
        + ["--flush", "1s", "--duration", "90s", "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    prom = None
    try:
        cfg = tmp_path / "prometheus.yml"
        cfg.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"scrape_configs:\n  - job_name: fleettool\n    static_configs:\n      - targets: ['127.0.0.1:{mport}']\n"
        )
        prom = subprocess.Popen(
            [PROM, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}"]
            + [f"--web.listen-address=127.0.0.1:{pport}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        exposition = _wait_for(f"http://127.0.0.1:{mport}/metrics", 30).decode()
        api = f"http://127.0.0.1:{pport}/api/v1"
        _wait_for(f"http://127.0.0.1:{pport}/-/ready", 30)

        def query(expr: str) -> list[dict[str, Any]]:
            body = json.loads(_get(f"{api}/query?query={urllib.parse.quote(expr)}"))
            assert body["status"] == "success", (expr, body)
            return list(body["data"]["result"])

        # wait until the XID is in Prometheus, with a few samples of every series around it
        deadline = time.time() + 45
        while time.time() < deadline and not query('fleettool_events_total{kind="xid"}'):
            time.sleep(1)
        time.sleep(4)
        exposition = _get(f"http://127.0.0.1:{mport}/metrics").decode()
        served = _labels_by_metric(exposition)
        assert 'kind="xid"' in exposition

        empty = []
        for title, ref, expr in queries():
            names, _ = selected(expr)
            result = query(concrete(expr))  # every query evaluates
            if names <= set(served) and not result:
                empty.append((title, ref))
        assert empty == [], f"queries over series the agent served that returned nothing: {empty}"

        # the labels the dashboard groups and filters by are on the agent's series
        for title, ref, expr in queries():
            names, labels = selected(expr)
            for name in names & set(served):
                missing = labels - served[name] - PROMETHEUS_OWN.get(name, set())
                # a label another selected metric of the query carries (e.g. kind on the events counter) is fine
                missing -= set().union(*(served.get(n, set()) for n in names))
                assert not missing, (title, ref, name, missing)
    finally:
        for p in (prom, agent):
            if p is not None:
                p.terminate()
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
