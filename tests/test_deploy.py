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
    src = k["configMapGenerator"][0]["files"][0].split("=", 1)[-1]
    csv = (K8S / src).resolve()
    assert csv.exists() and csv.parent == K8S.resolve()  # kustomize reads no file outside its folder
    # one copy of the counters: the ConfigMap's and the one a by-hand dcgm-exporter is given
    assert sorted((ROOT / "deploy").rglob("*counters*.csv")) == [csv]


def rendered() -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: `kubectl kustomize deploy/kubernetes` cannot be rendered here")
    r = subprocess.run([kubectl, "kustomize", str(K8S)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def test_kustomize_renders_and_every_object_validates() -> None:
    kv = pytest.importorskip("kubernetes_validate")
    version = kv.utils.latest_version()
    objs = rendered()
    kinds = sorted(d["kind"] for d in objs)
    assert kinds == sorted(
        ["Namespace", "ServiceAccount", "ServiceAccount", "Role", "RoleBinding", "ClusterRole"]
        + [
            "ClusterRoleBinding",
            "ConfigMap",
            "Service",
            "Service",
            "DaemonSet",
            "DaemonSet",
            "ServiceMonitor",
        ]
    )
    for d in objs:
        if d["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert d["metadata"]["namespace"] == "fleettool", d["metadata"]["name"]
        if d["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # a CRD (Prometheus Operator): shape checked in test_servicemonitor_shape
        kv.validate(d, version, strict=True)
        for c in containers(d):  # the invariants of test_least_privilege, on what is applied
            sc = c["securityContext"]
            assert sc.get("privileged") is not True and sc["allowPrivilegeEscalation"] is False, c["name"]
            assert sc["readOnlyRootFilesystem"] is True and sc["capabilities"]["drop"] == ["ALL"], c["name"]
    agent = [d for d in objs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "fleettool-agent"][0]
    (c,) = containers(agent)
    assert c["image"] == "ghcr.io/fleettool/fleettool:0.1.0"
    assert c["securityContext"]["capabilities"]["add"] == ["SYSLOG"] and "--kmsg=/dev/kmsg" in c["args"]


def test_rendered_configmap_is_the_csv_dcgm_exporter_mounts_and_reads() -> None:
    objs = rendered()
    (cm,) = [d for d in objs if d["kind"] == "ConfigMap"]
    csv = (K8S / "fleettool-counters.csv").read_text()
    assert cm["data"] == {"fleettool-counters.csv": csv}
    dcgm = [d for d in objs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "dcgm-exporter"][0]
    pod = dcgm["spec"]["template"]["spec"]
    vol = [v for v in pod["volumes"] if "configMap" in v][0]
    assert vol["configMap"]["name"] == cm["metadata"]["name"]  # kustomize's hashed name, rewritten here
    (c,) = pod["containers"]
    mount = [m for m in c["volumeMounts"] if m["name"] == vol["name"]][0]
    assert c["args"][c["args"].index("-f") + 1] == f"{mount['mountPath']}/fleettool-counters.csv"


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
