"""`fleettool rules export --alertmanager`: Debian's amtool accepts the config, and the real Alertmanager, fed the
labels the exported Prometheus rules give an alert, mutes a symptom under its firing root and nothing else.

The alerts posted here are built from `rules export --prometheus` itself (the rule whose selector takes the XID code,
with its severity, category and action), so a change of the exported labels breaks these tests, not production.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleettool.engine import alertmanager as am
from tests.conftest import run_cli

JOB, RACK, DOMAIN, NODE = "hpc_job", "rack", "nvlink_domain", "Hostname"


def _tool(name: str) -> str:
    """The binary's path; a skip where Debian's prometheus-alertmanager is not installed, never in CI (.ci/run
    installs it there, so a missing binary is a failure, not a silent skip)."""
    path = shutil.which(name)
    if path is None:
        assert os.environ.get("CI") != "true", (
            f"CI installs Debian's prometheus-alertmanager: {name} must be there"
        )
        pytest.skip(f"{name} not installed (apt-get install prometheus-alertmanager)")
    return path


def _export(tmp_path: Path, *args: str) -> Path:
    out = tmp_path / "alertmanager.yml"
    r = run_cli("rules", "export", "--alertmanager", "-o", str(out), *args)
    assert r.returncode == 0, r.stderr
    return out


def _prometheus_rules() -> list[dict[str, Any]]:
    r = run_cli("rules", "export", "--prometheus")
    assert r.returncode == 0, r.stderr
    return [rule for g in yaml.safe_load(r.stdout)["groups"] for rule in g["rules"]]


def _xid_rule(rules: list[dict[str, Any]], code: int) -> dict[str, Any]:
    """The exported rule that fires on XID `code`: its selector fleettool_events_total{kind="xid",code=~"..."}."""
    for rule in rules:
        for codes in re.findall(r'kind="xid",code=~"([0-9|]+)"', rule["expr"]):
            if str(code) in codes.split("|"):
                return rule
    raise AssertionError(f"no exported rule fires on XID {code}")


@pytest.fixture(scope="module")
def prom_rules() -> list[dict[str, Any]]:
    return _prometheus_rules()


def xid_alert(rules: list[dict[str, Any]], code: int, **labels: str) -> dict[str, str]:
    """The labels Prometheus gives the exported rule's alert for XID `code` on a series with these labels."""
    rule = _xid_rule(rules, code)
    return {"alertname": rule["alert"], **rule["labels"], "kind": "xid", "code": str(code), **labels}


def test_the_sets_are_the_folds_own() -> None:
    from fleettool.incidents.model import HARDWARE_ACTIONS, TEARDOWN_XIDS

    assert set(am.TEARDOWN_XIDS) == TEARDOWN_XIDS
    assert set(am.HARDWARE_ACTIONS) == HARDWARE_ACTIONS


def test_amtool_check_config_passes(tmp_path: Path) -> None:
    amtool = _tool("amtool")
    for args in (
        (),
        ("--label", "job=slurm_job", "--label", "rack=topology_rack", "--node-label", "hostname"),
    ):
        f = _export(tmp_path, *args)
        r = subprocess.run([amtool, "check-config", str(f)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "SUCCESS" in r.stdout and " - 4 inhibit rules" in r.stdout, r.stdout
    cfg = yaml.safe_load(f.read_text())
    assert cfg["inhibit_rules"][0]["equal"] == ["hostname"]
    assert cfg["inhibit_rules"][1]["equal"] == ["slurm_job"]
    assert {
        "matchers": ['category=~"thermal|power"', 'topology_rack=~".+"'],
        "group_by": ["alertname", "topology_rack"],
    } in cfg["route"]["routes"]
    assert (
        "--label job=slurm_job --label rack=topology_rack --node-label hostname"
        in f.read_text().splitlines()[0]
    )


def test_the_exported_rules_carry_the_labels_the_inhibitions_match(prom_rules: list[dict[str, Any]]) -> None:
    """Every XID an inhibit rule names fires an exported rule (whose alert carries kind and code from the series);
    the hardware roots are critical with a hardware action, the teardown XIDs are neither."""
    root = xid_alert(prom_rules, 79)
    assert root["severity"] == "critical" and root["action"] in am.HARDWARE_ACTIONS
    for code in am.TEARDOWN_XIDS:
        sym = xid_alert(prom_rules, code)
        assert sym["severity"] != "critical" and sym["action"] not in am.HARDWARE_ACTIONS, sym
    for code in (am.NVLINK_ROOT_XID, am.NVLINK_SYMPTOM_XID, am.SXID_SYMPTOM_XID):
        assert xid_alert(prom_rules, code)["code"] == str(code)
    for rule in prom_rules:  # the node is a label of every exported alert's series (the XID rules' included)
        if rule["alert"].startswith("GpuXid"):
            assert "fleettool_events_total{" in rule["expr"]


def test_bad_labels_are_refused(tmp_path: Path) -> None:
    for spec, words in (
        ("racks=r", "KEY one of job, rack, nvlink_domain"),
        ("job=1job", "not a Prometheus label name"),
        ("job=Hostname", "must differ"),
    ):
        r = run_cli("rules", "export", "--alertmanager", "--label", spec)
        assert r.returncode == 2, (spec, r.stderr)
        assert r.stderr.count("\n") == 1 and "--label" in r.stderr and words in r.stderr, r.stderr
        assert r.stdout == ""
    r = run_cli("rules", "export", "--alertmanager", "--tests", str(tmp_path / "t"))
    assert r.returncode == 2 and "--tests" in r.stderr and not (tmp_path / "t").exists()
    r = run_cli("rules", "export", "--alertmanager", "--names", "dcgm")
    assert r.returncode == 0 and "no code label" in r.stderr and "inhibit_rules:" in r.stdout


def _route(amtool: str, cfg: Path, labels: dict[str, str]) -> str:
    """The route amtool says these labels take: its matchers as the tree prints them."""
    r = subprocess.run(
        [
            amtool,
            "config",
            "routes",
            "test",
            f"--config.file={cfg}",
            "--tree",
            *(f"{k}={v}" for k, v in labels.items()),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    leaf = [line for line in r.stdout.splitlines() if "──" in line][-1]  # the deepest route of the tree
    assert "receiver: fleettool" in leaf, r.stdout
    return leaf.split("──", 1)[1].split("receiver:")[0].strip()


def test_amtool_routes_group_by_job_rack_and_domain(tmp_path: Path, prom_rules: list[dict[str, Any]]) -> None:
    amtool = _tool("amtool")
    cfg = _export(tmp_path)
    group_by = {
        ",".join(sorted(m.replace('"', "") for m in r["matchers"])): r["group_by"]
        for r in yaml.safe_load(cfg.read_text())["route"]["routes"]
    }

    def grouped(labels: dict[str, str]) -> list[str]:
        route = _route(amtool, cfg, labels)
        if route == "default-route":
            return list(yaml.safe_load(cfg.read_text())["route"]["group_by"])
        return list(group_by[route.strip("{}").replace('"', "")])

    teardown = xid_alert(prom_rules, 45, Hostname="n2", **{JOB: "4711", RACK: "r1"})
    assert grouped(teardown) == ["alertname", JOB]
    thermal = {"alertname": "GpuThermalSlowdown", "severity": "warning", "category": "thermal", NODE: "n3"}
    assert grouped({**thermal, RACK: "r7", JOB: "4711"}) == [
        "alertname",
        RACK,
    ]  # a rack's cooling, not its jobs
    assert grouped(xid_alert(prom_rules, 145, Hostname="n4", **{DOMAIN: "d1", JOB: "1"})) == [
        "alertname",
        DOMAIN,
    ]
    assert grouped(xid_alert(prom_rules, 79, Hostname="n1", **{JOB: "4711", RACK: "r1"})) == [
        "alertname",
        NODE,
    ]
    assert grouped(xid_alert(prom_rules, 45, Hostname="n5", **{RACK: "r1"})) == ["alertname", RACK]
    assert grouped(xid_alert(prom_rules, 45, Hostname="n6")) == ["alertname", NODE]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _call(url: str, body: object | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:  # noqa: S310 - loopback
        raw = r.read()
    return json.loads(raw) if raw else None


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    """The real Alertmanager on a free loopback port, over the exported config, clustering off."""
    binary = _tool("prometheus-alertmanager")
    cfg = _export(tmp_path)
    port = _free_port()
    log = (tmp_path / "alertmanager.log").open("w")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={cfg}",
            f"--storage.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, (tmp_path / "alertmanager.log").read_text()
            try:
                urllib.request.urlopen(f"{url}/-/ready", timeout=2).close()  # noqa: S310 - loopback
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "alertmanager.log").read_text()
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_a_firing_root_mutes_its_symptoms_in_the_real_alertmanager(
    alertmanager: str, prom_rules: list[dict[str, Any]]
) -> None:
    alerts = {
        "root": xid_alert(prom_rules, 79, Hostname="n1", **{JOB: "4711", RACK: "r1"}),
        "same job": xid_alert(prom_rules, 45, Hostname="n2", **{JOB: "4711", RACK: "r1"}),
        "root's node": xid_alert(prom_rules, 13, Hostname="n1"),
        "other job": xid_alert(prom_rules, 45, Hostname="n3", **{JOB: "999", RACK: "r1"}),
        # a root with no job label does not mute every job-less symptom (a label missing on both sides is equal)
        "jobless root": xid_alert(prom_rules, 48, Hostname="n4"),
        "jobless symptom": xid_alert(prom_rules, 45, Hostname="n5"),
        "149": xid_alert(prom_rules, 149, Hostname="n6", **{DOMAIN: "d1"}),
        "145 same domain": xid_alert(prom_rules, 145, Hostname="n7", **{DOMAIN: "d1"}),
        "145 other domain": xid_alert(prom_rules, 145, Hostname="n8", **{DOMAIN: "d2"}),
        "fatal sxid": {
            "alertname": am.SXID_ALERT,
            "severity": "critical",
            "category": "nvlink",
            "Hostname": "n9",
        },
        "74 same node": xid_alert(prom_rules, 74, Hostname="n9"),
        "74 other node": xid_alert(prom_rules, 74, Hostname="n10"),
    }
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    _call(f"{alertmanager}/api/v2/alerts", [{"labels": a, "startsAt": now} for a in alerts.values()])
    muted = {
        "same job": "root",
        "root's node": "root",
        "145 same domain": "149",
        "74 same node": "fatal sxid",
    }

    def states() -> dict[str, dict[str, Any]]:
        got = {json.dumps(a["labels"], sort_keys=True): a for a in _call(f"{alertmanager}/api/v2/alerts")}
        return {
            name: got[json.dumps(labels, sort_keys=True)]
            for name, labels in alerts.items()
            if json.dumps(labels, sort_keys=True) in got
        }

    deadline = time.monotonic() + 20
    while True:  # the inhibitor sees a new alert a moment after the API takes it
        s = states()
        if len(s) == len(alerts) and all(s[n]["status"]["state"] == "suppressed" for n in muted):
            break
        assert time.monotonic() < deadline, json.dumps({n: a["status"] for n, a in s.items()}, indent=1)
        time.sleep(0.2)
    for name, a in s.items():
        if name in muted:
            assert a["status"]["inhibitedBy"] == [s[muted[name]]["fingerprint"]], (name, a["status"])
        else:
            assert a["status"]["state"] == "active" and a["status"]["inhibitedBy"] == [], (name, a["status"])

    # the groups: the root pages alone (by node); the other job's teardown is its job's group
    groups = _call(f"{alertmanager}/api/v2/alerts/groups")
    labels = [g["labels"] for g in groups]
    assert {"alertname": alerts["root"]["alertname"], "Hostname": "n1"} in labels
    assert {"alertname": alerts["other job"]["alertname"], JOB: "999"} in labels
    assert {"alertname": alerts["145 other domain"]["alertname"], DOMAIN: "d2"} in labels
