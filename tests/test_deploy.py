"""Deployment files: the kustomize base rendered by the real `kubectl kustomize` and every object validated
offline (Kubernetes' schemas, the Prometheus Operator's CRD schemas, the API server's security-context rules);
its pods held to the namespace's Pod Security level (tests/pod_security.py) with each deviation from Baseline
pinned; the agent's path to its own node's dcgm-exporter, its probes (served by a real agent), and the burn-in's
RBAC checked against the kubectl calls the code makes; the systemd unit and the Dockerfile checked for what they
promise. The Helm chart: tests/test_helm_chart.py."""

from __future__ import annotations

import ast
import configparser
import copy
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.deploy_render import (
    CHART,
    K8S,
    api_refusals,
    containers,
    ingress_admits,
    kustomize,
    kustomize_with,
    load_all,
    one,
    selects,
    validate,
)
from tests.pod_security import least_level, namespace_level, violations


def docs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for p in sorted(K8S.glob("*.yaml")):
        if p.name == "kustomization.yaml":
            continue
        for d in load_all(p.read_text()):
            out.append((p.name, d))
    return out


def test_kustomization_lists_every_file_and_the_counters_csv() -> None:
    k = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(k["resources"]) == files
    src = k["configMapGenerator"][0]["files"][0].split("=", 1)[-1]
    csv = (K8S / src).resolve()
    assert csv.exists() and csv.parent == K8S.resolve()  # kustomize reads no file outside its folder
    # one copy of the counters: the ConfigMap's, the one a by-hand dcgm-exporter is given, and the chart's (a link)
    copies = sorted((ROOT / "deploy").rglob("*counters*.csv"))
    assert [c for c in copies if not c.is_symlink()] == [csv]
    assert [c.resolve() for c in copies if c.is_symlink()] == [csv]
    assert [c.parent for c in copies if c.is_symlink()] == [CHART / "files"]


def test_kustomize_renders_and_every_object_validates() -> None:
    objs = kustomize()
    kinds = sorted(d["kind"] for d in objs)
    assert kinds == sorted(
        ["Namespace", "ServiceAccount", "ConfigMap", "Service", "Service", "Service", "DaemonSet"]
        + ["DaemonSet", "ServiceMonitor", "ServiceMonitor", "NetworkPolicy"]
        + ["ClusterRole", "ClusterRoleBinding"]  # the agent's node condition (rbac.yaml)
        + ["ClusterRole", "Role"]  # the remediator's, bound to nobody (remediator.yaml)
    )
    for d in objs:
        if d["kind"] not in CLUSTER_SCOPED:
            assert d["metadata"]["namespace"] == "fleettool", d["metadata"]["name"]
        else:
            assert "namespace" not in d["metadata"], d["metadata"]["name"]
    assert validate(objs) == len(objs)
    # the burn-in's namespace and RBAC, without and with the cordon component
    burnin, cordon = kustomize("burnin"), kustomize("burnin-cordon")
    assert sorted(d["kind"] for d in burnin) == ["Namespace", "Role", "RoleBinding", "ServiceAccount"]
    assert sorted(d["kind"] for d in cordon) == sorted(
        [d["kind"] for d in burnin] + ["ClusterRole", "ClusterRoleBinding"]
    )
    assert validate(burnin) + validate(cordon) == len(burnin) + len(cordon)
    agent = one(objs, "DaemonSet", "fleettool-agent")
    (c,) = containers(agent)
    assert c["image"] == "ghcr.io/fleettool/fleettool:0.1.0"


CLUSTER_SCOPED = ("Namespace", "ClusterRole", "ClusterRoleBinding")


def test_the_offline_checks_can_fail() -> None:
    """The checks kubernetes-validate does not make, each shown refusing a bad object."""
    with pytest.raises(yaml.constructor.ConstructorError, match="duplicate key 'app.kubernetes.io/name'"):
        load_all("metadata:\n  labels:\n    app.kubernetes.io/name: a\n    app.kubernetes.io/name: b\n")
    objs = kustomize()
    dcgm = copy.deepcopy(one(objs, "DaemonSet", "dcgm-exporter"))
    (c,) = containers(dcgm)
    assert api_refusals(dcgm) == []
    c["securityContext"]["capabilities"]["add"] = ["CAP_SYS_ADMIN"]
    assert api_refusals(dcgm) == [
        "dcgm-exporter: allowPrivilegeEscalation false with capabilities.add CAP_SYS_ADMIN"
    ]
    agent = copy.deepcopy(one(objs, "DaemonSet", "fleettool-agent"))
    containers(agent)[0]["securityContext"]["allowPrivilegeEscalation"] = False
    assert api_refusals(agent) == ["agent: allowPrivilegeEscalation false with privileged true"]
    sm = copy.deepcopy(one(objs, "ServiceMonitor", "fleettool-agent"))
    sm["spec"]["endpoints"][0]["relabellings"] = sm["spec"]["endpoints"][0].pop("relabelings")  # a typo
    with pytest.raises(AssertionError, match="relabellings"):
        validate([sm])
    sm = copy.deepcopy(one(objs, "ServiceMonitor", "fleettool-agent"))
    sm["spec"]["endpoints"][0]["interval"] = "15 seconds"
    with pytest.raises(AssertionError, match="interval"):
        validate([sm])


# What each pod needs beyond Baseline, and why (namespace.yaml): the only deviations allowed.
BEYOND_BASELINE = {
    "fleettool-agent": {
        ("Privileged Containers", "spec.containers[agent].securityContext.privileged"),  # /dev/kmsg
        ("HostPath Volumes", "spec.volumes[db].hostPath"),  # the database outlives the pod
        ("HostPath Volumes", "spec.volumes[kmsg].hostPath"),
        (
            "HostPath Volumes",
            "spec.volumes[sysfs].hostPath",
        ),  # the fabric collector: the host's /sys, read-only
    },
    "dcgm-exporter": {
        ("Capabilities", "spec.containers[dcgm-exporter].securityContext.capabilities.add"),  # SYS_ADMIN
        ("HostPath Volumes", "spec.volumes[pod-resources].hostPath"),  # the kubelet's pod-resources socket
    },
}


def test_pods_meet_the_namespace_level_and_nothing_stricter() -> None:
    objs = kustomize()
    level = namespace_level(one(objs, "Namespace"))
    assert level == "privileged"
    pods = [d for d in objs if d["kind"] == "DaemonSet"]
    assert {d["metadata"]["name"] for d in pods} == set(BEYOND_BASELINE)
    for d in pods:
        name = d["metadata"]["name"]
        assert violations(d, level) == []
        found = {(v.control, v.field) for v in violations(d, "baseline")}
        assert found == BEYOND_BASELINE[name], (name, found)
        # the label is the least that admits the pods: neither would pass Baseline
        assert least_level(d) == "privileged"


def test_agent_reaches_its_own_nodes_dcgm_exporter_through_a_local_service() -> None:
    objs = kustomize()
    (agent,) = containers(one(objs, "DaemonSet", "fleettool-agent"))
    url = [a for a in agent["args"] if a.startswith("--dcgm-exporter=")][0].split("=", 1)[1]
    assert url == "http://dcgm-exporter-local:9400/metrics"
    svc = one(objs, "Service", "dcgm-exporter-local")
    assert svc["metadata"]["name"] == "dcgm-exporter-local" and svc["metadata"]["namespace"] == "fleettool"
    assert svc["spec"]["internalTrafficPolicy"] == "Local" and svc["spec"].get("clusterIP") != "None"
    dcgm = one(objs, "DaemonSet", "dcgm-exporter")
    assert svc["spec"]["selector"] == dcgm["spec"]["template"]["metadata"]["labels"]
    (dc,) = containers(dcgm)
    (port,) = svc["spec"]["ports"]
    assert port["port"] == 9400 and port["targetPort"] == "metrics"
    assert [p["containerPort"] for p in dc["ports"] if p["name"] == "metrics"] == [9400]
    # no hostPort or host network anywhere: the exporter is not opened on the nodes' addresses
    for d in objs:
        pod = d.get("spec", {}).get("template", {}).get("spec", {})
        assert not pod.get("hostNetwork")
        assert all("hostPort" not in p for c in containers(d) for p in c.get("ports", []))
    # the Local Service is not selected by a ServiceMonitor (the exporters would be scraped twice)
    for sm in (d for d in objs if d["kind"] == "ServiceMonitor"):
        sel = sm["spec"]["selector"]["matchLabels"]
        assert not all(svc["metadata"].get("labels", {}).get(k) == v for k, v in sel.items())


def test_probes_and_service_monitors() -> None:
    objs = kustomize()
    (agent,) = containers(one(objs, "DaemonSet", "fleettool-agent"))
    assert [p["containerPort"] for p in agent["ports"] if p["name"] == "metrics"] == [9402]
    assert "--metrics-port=9402" in agent["args"]
    for probe, path in (
        ("startupProbe", "/healthz"),
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
    ):
        assert agent[probe]["httpGet"] == {"path": path, "port": "metrics"}, probe
    (dcgm,) = containers(one(objs, "DaemonSet", "dcgm-exporter"))
    for probe in ("livenessProbe", "readinessProbe"):
        assert dcgm[probe]["httpGet"] == {"path": "/health", "port": "metrics"}, probe
    monitors = {sm["metadata"]["name"]: sm for sm in objs if sm["kind"] == "ServiceMonitor"}
    assert set(monitors) == {"fleettool-agent", "dcgm-exporter"}
    for name, sm in monitors.items():
        assert sm["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": name}
        assert sm["spec"]["endpoints"][0]["port"] == "metrics"
        svc = one(objs, "Service", name)
        assert svc["metadata"]["name"] == name and svc["spec"]["clusterIP"] == "None"  # every pod scraped
        assert svc["metadata"]["labels"]["app.kubernetes.io/name"] == name


def test_dcgm_exporter_labels_its_series_with_the_node() -> None:
    (dcgm,) = containers(one(kustomize(), "DaemonSet", "dcgm-exporter"))
    env = {e["name"]: e for e in dcgm["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def test_rendered_configmap_is_the_csv_dcgm_exporter_mounts_and_reads() -> None:
    objs = kustomize()
    (cm,) = [d for d in objs if d["kind"] == "ConfigMap"]
    csv = (K8S / "fleettool-counters.csv").read_text()
    assert cm["data"] == {"fleettool-counters.csv": csv}
    dcgm = one(objs, "DaemonSet", "dcgm-exporter")
    pod = dcgm["spec"]["template"]["spec"]
    vol = [v for v in pod["volumes"] if "configMap" in v][0]
    assert vol["configMap"]["name"] == cm["metadata"]["name"]  # kustomize's hashed name, rewritten here
    (c,) = pod["containers"]
    mount = [m for m in c["volumeMounts"] if m["name"] == vol["name"]][0]
    assert c["args"][c["args"].index("-f") + 1] == f"{mount['mountPath']}/fleettool-counters.csv"


def test_least_privilege() -> None:
    by_name = {d["metadata"]["name"]: d for _, d in docs() if d["kind"] == "DaemonSet"}
    # the agent: privileged for /dev/kmsg only, as uid 0; everything else read-only
    (c,) = containers(by_name["fleettool-agent"])
    assert c["securityContext"] == {"privileged": True, "runAsUser": 0, "readOnlyRootFilesystem": True}
    pod = by_name["fleettool-agent"]["spec"]["template"]["spec"]
    # a token for --node-condition alone (get nodes, patch nodes/status: test_the_agents_role_is_...)
    assert pod["automountServiceAccountToken"] is True and "--node-condition" in c["args"]
    (sa,) = [d for _, d in docs() if d["kind"] == "ServiceAccount"]
    assert sa["automountServiceAccountToken"] is False  # nothing else naming it gets one
    assert not {"hostNetwork", "hostPID", "hostIPC"} & set(pod)
    paths = {v["hostPath"]["path"]: v["hostPath"]["type"] for v in pod["volumes"] if "hostPath" in v}
    assert paths == {
        "/var/lib/fleettool": "DirectoryOrCreate",
        "/dev/kmsg": "CharDevice",
        "/sys": "Directory",
    }
    for path in ("/dev/kmsg", "/host/sys"):
        (m,) = [m for m in c["volumeMounts"] if m["mountPath"] == path]
        assert m["readOnly"] is True, path
    assert "nvidia.com/gpu" not in c.get("resources", {}).get("limits", {})  # the agent takes no GPU
    assert "--kmsg=/dev/kmsg" in c["args"]
    # dcgm-exporter: SYS_ADMIN and nothing else, no escalation, read-only root
    (c,) = containers(by_name["dcgm-exporter"])
    sc = c["securityContext"]
    assert sc.get("privileged") is not True and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True and sc["capabilities"] == {
        "drop": ["ALL"],
        "add": ["SYS_ADMIN"],
    }
    pod = by_name["dcgm-exporter"]["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/var/lib/kubelet/pod-resources"]["readOnly"] is True


def test_with_a_kmsg_device_plugin_the_agent_is_not_privileged(tmp_path: Path) -> None:
    """The kmsg-device component: /dev/kmsg from a device plugin's resource, so the agent keeps the kernel log
    without `privileged`: uid 0 with every capability dropped but SYSLOG, no escalation, seccomp RuntimeDefault,
    no /dev/kmsg hostPath. Beyond Baseline only SYSLOG and the hostPaths of the database and the host's /sys
    remain."""
    objs = kustomize_with(tmp_path, "kmsg-device")
    assert validate(objs) == len(objs)
    agent = one(objs, "DaemonSet", "fleettool-agent")
    (c,) = containers(agent)
    assert c["securityContext"] == {
        "runAsUser": 0,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "seccompProfile": {"type": "RuntimeDefault"},
        "capabilities": {"drop": ["ALL"], "add": ["SYSLOG"]},
    }
    assert c["resources"]["limits"]["squat.ai/kmsg"] == 1 and "--kmsg=/dev/kmsg" in c["args"]
    pod = agent["spec"]["template"]["spec"]
    assert [v["name"] for v in pod["volumes"] if "hostPath" in v] == ["db", "sysfs"]
    assert "/dev/kmsg" not in {m["mountPath"] for m in c["volumeMounts"]}
    assert {(v.control, v.field) for v in violations(agent, "baseline")} == {
        ("Capabilities", "spec.containers[agent].securityContext.capabilities.add"),  # SYSLOG
        ("HostPath Volumes", "spec.volumes[db].hostPath"),
        ("HostPath Volumes", "spec.volumes[sysfs].hostPath"),
    }
    assert [str(v) for v in violations(agent, "baseline") if v.control == "Capabilities"] == [
        "Capabilities: spec.containers[agent].securityContext.capabilities.add='SYSLOG'"
    ]
    # the rest of the base is as it was
    base = kustomize()
    assert [d for d in objs if d["metadata"]["name"] != "fleettool-agent"] == [
        d for d in base if d["metadata"]["name"] != "fleettool-agent"
    ]


# The API calls of each kubectl command the burn-in dispatcher runs (fleettool/burnin/dispatch.py), as
# (API group, resource, verb). `create -f -` of a Job: create; `get job/N -o json` (the poll): get; `logs job/N`:
# get the Job, list its pods, get the pod's log; `cordon`/`uncordon N`: get the node, patch spec.unschedulable.
KUBECTL_CALLS = {
    "create": {("batch", "jobs", "create")},
    "get": {("batch", "jobs", "get")},
    "logs": {("batch", "jobs", "get"), ("", "pods", "list"), ("", "pods", "get"), ("", "pods/log", "get")},
    "cordon": {("", "nodes", "get"), ("", "nodes", "patch")},
    "uncordon": {("", "nodes", "get"), ("", "nodes", "patch")},
}


def kubectl_commands(path: Any) -> set[str]:
    """The kubectl subcommands a module runs: string constants in list or tuple displays that start with
    `kubectl` (a name, an attribute such as runner.kubectl, or the string)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
            first = node.elts[0]
            if (
                (isinstance(first, ast.Name) and first.id == "kubectl")
                or (isinstance(first, ast.Attribute) and first.attr == "kubectl")  # runner.kubectl
                or (isinstance(first, ast.Constant) and first.value == "kubectl")
            ):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value.isalpha():
                        found.add(sub.value)
    return found


def _grants(objs: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    granted = set()
    for d in objs:
        if d["kind"] in ("Role", "ClusterRole"):
            for rule in d["rules"]:
                assert not rule.get("resourceNames")
                for g in rule["apiGroups"]:
                    for res in rule["resources"]:
                        for v in rule["verbs"]:
                            granted.add((g, res, v))
                            assert "*" not in (g, res, v)
    return granted


def test_burnin_rbac_is_exactly_what_its_kubectl_calls_need() -> None:
    used = kubectl_commands(ROOT / "fleettool" / "burnin" / "dispatch.py") & (
        set(KUBECTL_CALLS)
        | {"delete", "patch", "label", "taint", "drain", "exec", "apply", "wait", "annotate"}
    )
    assert used == set(KUBECTL_CALLS), (
        f"dispatch.py runs kubectl {sorted(used)}: update KUBECTL_CALLS and deploy/kubernetes/burnin"
    )
    # the agent's base grants the burn-in nothing: its roles are the agent's and the remediator's only
    assert {
        d["metadata"]["name"]
        for d in kustomize()
        if d["kind"] in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
    } == {"fleettool-agent-node-condition", "fleettool-remediator"}
    # with the cordon component: exactly what the kubectl calls need
    with_cordon = kustomize("burnin-cordon")
    need = set().union(*KUBECTL_CALLS.values())
    granted = _grants(with_cordon)
    assert granted == need, {"missing": need - granted, "more than needed": granted - need}
    roles = {d["metadata"]["name"]: d for d in with_cordon if d["kind"] in ("Role", "ClusterRole")}
    assert roles["fleettool-cordon"]["kind"] == "ClusterRole"
    assert {r["resources"][0] for r in roles["fleettool-cordon"]["rules"]} == {
        "nodes"
    }  # cluster-wide: nodes only
    assert roles["fleettool-burnin-jobs"]["kind"] == "Role"  # jobs and pods: the burn-in's namespace only
    for d in (d for d in with_cordon if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        assert d["subjects"] == [
            {"kind": "ServiceAccount", "name": "fleettool-burnin", "namespace": "fleettool-burnin"}
        ]
    # without it (the default): no cluster-wide grant, nothing on nodes
    burnin = kustomize("burnin")
    assert not [d for d in burnin if d["kind"].startswith("Cluster")]
    assert _grants(burnin) == need - KUBECTL_CALLS["cordon"] - KUBECTL_CALLS["uncordon"]


# The agent's own API calls (fleettool/agent/node_condition.py; tests/test_node_condition.py holds it to them):
# (method, path) -> (API group, resource, verb).
AGENT_API_CALLS = {
    ("GET", "/api/v1/nodes/{node}"): ("", "nodes", "get"),  # the condition held, read once at start
    ("PATCH", "/api/v1/nodes/{node}/status"): ("", "nodes/status", "patch"),  # GpuHealthy
}


def test_the_agents_role_is_get_nodes_and_patch_nodes_status_only() -> None:
    objs = kustomize()
    role = one(objs, "ClusterRole", "fleettool-agent-node-condition")
    assert (
        _grants([role])
        == set(AGENT_API_CALLS.values())
        == {("", "nodes", "get"), ("", "nodes/status", "patch")}
    )
    binding = one(objs, "ClusterRoleBinding", "fleettool-agent-node-condition")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "fleettool-agent-node-condition",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "fleettool-agent", "namespace": "fleettool"}
    ]
    # the check sees one verb more, or the node itself patched
    for rule, verb in ((0, "list"), (0, "patch"), (1, "update")):
        wider = copy.deepcopy(role)
        wider["rules"][rule]["verbs"].append(verb)
        assert _grants([wider]) != set(AGENT_API_CALLS.values()), verb


# The API calls of each kubectl command `fleettool remediate --via k8s` runs (fleettool/remediate/k8s.py, and
# runner.py for the node's commands), as (API group, resource, verb). `apply -f -` of a DeviceTaintRule: GET, then
# CREATE, or PATCH on a rerun; `taint nodes`/`cordon`/`uncordon`: GET the node, PATCH it; `patch node
# --subresource=status`: PATCH nodes/status; `create -f -` of the reboot Job; `get pods -l`: LIST; `exec`: GET the
# pod, CREATE pods/exec.
REMEDIATE_CALLS = {
    "apply": {("resource.k8s.io", "devicetaintrules", v) for v in ("get", "create", "patch")},
    "delete": {("resource.k8s.io", "devicetaintrules", "delete")},
    "taint": {("", "nodes", "get"), ("", "nodes", "patch")},
    "cordon": {("", "nodes", "get"), ("", "nodes", "patch")},
    "uncordon": {("", "nodes", "get"), ("", "nodes", "patch")},
    "patch": {("", "nodes/status", "patch")},
    "create": {("batch", "jobs", "create")},
    "get": {("", "pods", "list")},
    "exec": {("", "pods", "get"), ("", "pods/exec", "create")},
}
IN_AGENT_NAMESPACE = {"pods", "pods/exec", "jobs"}  # the rest is cluster-scoped


def test_the_remediator_rbac_is_exactly_what_its_kubectl_calls_need_and_bound_to_nobody() -> None:
    used: set[str] = set()
    for module in ("k8s.py", "runner.py"):
        used |= kubectl_commands(ROOT / "fleettool" / "remediate" / module)
    used &= set(REMEDIATE_CALLS) | {
        "label",
        "annotate",
        "drain",
        "wait",
        "logs",
        "scale",
        "rollout",
        "replace",
    }
    assert used == set(REMEDIATE_CALLS), (
        f"remediate runs kubectl {sorted(used)}: update REMEDIATE_CALLS and deploy/kubernetes/remediator.yaml"
    )
    objs = kustomize()
    cluster = one(objs, "ClusterRole", "fleettool-remediator")
    local = one(objs, "Role", "fleettool-remediator")
    need = set().union(*REMEDIATE_CALLS.values())
    granted = _grants([cluster]) | _grants([local])
    assert granted == need, {"missing": need - granted, "more than needed": granted - need}
    assert local["metadata"]["namespace"] == "fleettool"  # the agent's pods, the reboot Job: there only
    assert {res for _, res, _ in _grants([local])} == IN_AGENT_NAMESPACE
    assert not {res for _, res, _ in _grants([cluster])} & IN_AGENT_NAMESPACE
    # bound to nobody: whoever may create the privileged reboot Job is root on any node
    assert not [
        d for d in objs if d["kind"].endswith("Binding") and d["roleRef"]["name"] == "fleettool-remediator"
    ]


def test_burnin_jobs_go_to_a_restricted_namespace_the_job_meets() -> None:
    """Creating Jobs in the agent's privileged namespace would be root on any node: the burn-in's Role is in a
    namespace of its own that enforces restricted, the one `fleettool burnin --via k8s` sends its Job to by
    default, and that Job passes it."""
    from fleettool.burnin.dispatch import k8s_job

    burnin = kustomize("burnin")
    ns = one(burnin, "Namespace")
    assert namespace_level(ns) == "restricted"
    assert namespace_level(one(kustomize(), "Namespace")) == "privileged"  # the agent's: why apart
    role = one(burnin, "Role", "fleettool-burnin-jobs")
    assert role["metadata"]["namespace"] == ns["metadata"]["name"] == "fleettool-burnin"
    job = k8s_job("gpu-17", [], image="ghcr.io/fleettool/fleettool:0.1.0")
    assert job["metadata"]["namespace"] == role["metadata"]["namespace"]
    assert violations(job, namespace_level(ns)) == []


def test_only_prometheus_reaches_the_agents_port() -> None:
    """The NetworkPolicy selects the agent's pods and admits to its metrics port only pods of the namespace
    named monitoring; any other pod of the cluster, the agent's own namespace included, is refused. (The
    kubelet's probes come from the node, which no policy can refuse: networkpolicy.yaml.)"""
    objs = kustomize()
    policies = [d for d in objs if d["kind"] == "NetworkPolicy"]
    (np,) = policies
    agent = one(objs, "DaemonSet", "fleettool-agent")
    assert selects(np["spec"]["podSelector"], agent["spec"]["template"]["metadata"]["labels"])
    assert np["spec"]["policyTypes"] == ["Ingress"]
    (c,) = containers(agent)
    (port,) = [p["containerPort"] for p in c["ports"] if p["name"] == "metrics"]
    monitoring = ("monitoring", {"kubernetes.io/metadata.name": "monitoring"}, {"app": "prometheus"})
    assert ingress_admits(policies, agent, monitoring, port)
    for ns, pod in (("default", {"app": "prometheus"}), ("fleettool", {"app.kubernetes.io/name": "x"})):
        assert not ingress_admits(policies, agent, (ns, {"kubernetes.io/metadata.name": ns}, pod), port), ns
    assert not ingress_admits(policies, agent, monitoring, port + 1)  # the metrics port only
    # the check can fail: without the policy, any pod reaches the port
    anyone = ("default", {"kubernetes.io/metadata.name": "default"}, {})
    assert ingress_admits([], agent, anyone, port)


def test_agent_args_are_real_options() -> None:
    from tests.conftest import run_cli

    (c,) = containers(one([d for _, d in docs()], "DaemonSet", "fleettool-agent"))
    helptext = " ".join(run_cli("agent", "--help").stdout.split())
    for a in c["args"][1:]:
        assert a.split("=")[0] in helptext, a


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310 - loopback
            return int(r.status), r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return int(e.code), ""


def test_the_agent_serves_the_probe_paths(tmp_path: Path) -> None:
    """A real agent (fake GPUs) answers the DaemonSet's probes on its metrics port: 200 from /healthz once the
    loop runs, and from /readyz once the first collection is stored."""
    (c,) = containers(one(kustomize(), "DaemonSet", "fleettool-agent"))
    paths = {c[p]["httpGet"]["path"] for p in ("startupProbe", "livenessProbe", "readinessProbe")}
    port = _port()
    here = Path(sys.executable).parent / "fleettool"  # the venv's, as tests.conftest.run_cli takes it
    cmd = [str(here)] if here.exists() else [sys.executable, "-m", "fleettool"]
    agent = subprocess.Popen(
        [
            *cmd,
            "agent",
            "--source",
            "fake",
            "--gpus",
            "2",
            "--db",
            str(tmp_path / "a.duckdb"),
            "--kmsg",
            "off",
        ]
        + ["--dcgm-exporter", "off", "--metrics-port", str(port), "--flush", "1s", "--duration", "60s"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline, got = time.time() + 30, {}
        while time.time() < deadline:
            try:
                got = {p: _get(base + p) for p in sorted(paths)}
            except OSError:
                got = {}
            if got and all(code == 200 for code, _ in got.values()):
                break
            time.sleep(0.5)
        assert {p: code for p, (code, _) in got.items()} == {p: 200 for p in paths}, (got, agent.poll())
        assert not any("# HELP" in body for _, body in got.values()), got
    finally:
        agent.terminate()
        agent.wait(timeout=30)


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
