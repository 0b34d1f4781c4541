"""Deployment files: Kubernetes manifests validated offline against Kubernetes' own schemas, least privilege
asserted, the kustomization complete; the systemd unit and the Dockerfile checked for what they promise."""

from __future__ import annotations

import configparser
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT

K8S = ROOT / "deploy" / "kubernetes"


def docs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for p in sorted(K8S.glob("*.yaml")):
        if p.name == "kustomization.yaml":
            continue
        for d in yaml.safe_load_all(p.read_text()):
            if d:
                out.append((p.name, d))
    return out


def containers(d: dict[str, Any]) -> list[dict[str, Any]]:
    spec = d.get("spec", {}).get("template", {}).get("spec", {})
    return list(spec.get("containers", [])) + list(spec.get("initContainers", []))


def test_manifests_validate_against_the_kubernetes_schema() -> None:
    kv = pytest.importorskip("kubernetes_validate")
    version = kv.utils.latest_version()
    checked = 0
    for _name, d in docs():
        if d["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # a CRD (Prometheus Operator): not in Kubernetes' schema; shape checked below
        kv.validate(d, version, strict=True)
        checked += 1
    assert checked >= 9


def test_servicemonitor_shape() -> None:
    sm = [d for _, d in docs() if d["kind"] == "ServiceMonitor"][0]
    assert sm["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "fleettool-agent"}
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"


def test_kustomization_lists_every_file_and_the_counters_csv() -> None:
    k = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(k["resources"]) == files
    src = k["configMapGenerator"][0]["files"][0].split("=", 1)[1]
    assert (K8S / src).resolve().exists()


def test_least_privilege() -> None:
    for name, d in docs():
        for c in containers(d):
            sc = c.get("securityContext", {})
            assert sc.get("privileged") is not True, (name, c["name"])
            assert sc.get("allowPrivilegeEscalation") is False, (name, c["name"])
            assert sc.get("readOnlyRootFilesystem") is True, (name, c["name"])
            assert sc["capabilities"]["drop"] == ["ALL"], (name, c["name"])
    agent = [d for _, d in docs() if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "fleettool-agent"][
        0
    ]
    (c,) = containers(agent)
    assert c["securityContext"]["capabilities"]["add"] == ["SYSLOG"]
    pod = agent["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False and "hostNetwork" not in pod and "hostPID" not in pod
    paths = {v["hostPath"]["path"]: v["hostPath"]["type"] for v in pod["volumes"] if "hostPath" in v}
    assert paths == {"/var/lib/fleettool": "DirectoryOrCreate", "/dev/kmsg": "CharDevice"}
    kmsg = [m for m in c["volumeMounts"] if m["mountPath"] == "/dev/kmsg"][0]
    assert kmsg["readOnly"] is True
    assert "nvidia.com/gpu" not in c.get("resources", {}).get("limits", {})  # the agent takes no GPU
    args = " ".join(c["args"])
    assert "--kmsg=/dev/kmsg" in args and "--dcgm-exporter=http://$(HOST_IP):9400/metrics" in args
    rbac = [d for _, d in docs() if d["kind"] in ("Role", "ClusterRole")]
    verbs = {
        (r["metadata"]["name"], res, v)
        for r in rbac
        for rule in r["rules"]
        for res in rule["resources"]
        for v in rule["verbs"]
    }
    assert ("fleettool-cordon", "nodes", "patch") in verbs and not any(
        v == "*" or res == "*" for _, res, v in verbs
    )
    assert ("fleettool-cordon", "nodes", "delete") not in verbs


def test_agent_args_are_real_options() -> None:
    from tests.conftest import run_cli

    agent = [d for _, d in docs() if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "fleettool-agent"][
        0
    ]
    (c,) = containers(agent)
    helptext = " ".join(run_cli("agent", "--help").stdout.split())
    for a in c["args"][1:]:
        assert a.split("=")[0] in helptext, a


def test_systemd_unit() -> None:
    unit = ROOT / "deploy" / "systemd" / "fleettool-agent.service"
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read_string(unit.read_text())
    svc = cp["Service"]
    assert (
        svc["DynamicUser"] == "yes" and svc["NoNewPrivileges"] == "yes" and svc["ProtectSystem"] == "strict"
    )
    assert svc["CapabilityBoundingSet"] == "CAP_SYSLOG" and svc["DevicePolicy"] == "closed"
    assert "agent" in svc["ExecStart"] and "--kmsg=/dev/kmsg" in svc["ExecStart"]
    sa = shutil.which("systemd-analyze")
    if sa:
        r = subprocess.run([sa, "verify", str(unit)], capture_output=True, text=True)
        bad = [ln for ln in r.stderr.splitlines() if "fleettool-agent.service" in ln and "Unknown" in ln]
        assert bad == [], r.stderr


def test_dockerfile_copies_every_package_dir() -> None:
    import tomllib

    text = (ROOT / "Dockerfile").read_text()
    py = tomllib.loads((ROOT / "pyproject.toml").read_text())
    dirs = set(py["tool"]["setuptools"]["package-dir"].values()) | {"fleettool"}
    for d in dirs:
        assert f"COPY {d} ./{d}" in text, d
