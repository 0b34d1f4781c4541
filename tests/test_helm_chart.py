"""The Helm chart (deploy/helm/fleettool), rendered by Helm's own engine (tests/deploy_render.py) with the value
sets a fleet would use: every object validates (Kubernetes' schemas, the Prometheus Operator's CRDs, the API
server's security-context rules); the pods meet the Pod Security level the chart labels the namespace with, and
no stricter one; the defaults render what the kustomize base applies; the PrometheusRule is a fresh
`fleettool rules export --prometheus`; the values schema refuses what the agent would refuse."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import run_cli
from tests.deploy_render import (
    CHART,
    DASHBOARD,
    containers,
    helm_error,
    helm_objects,
    helm_render,
    ingress_admits,
    kustomize,
    one,
    selects,
    validate,
)
from tests.pod_security import LEVELS, least_level, namespace_level, violations

pytest.importorskip("helm_python", reason="helm-python-sdk (Helm's engine) is a dev dependency")

RULES_COPY = CHART / "files" / "fleettool-rules.yml"
UNPRIVILEGED: dict[str, Any] = {
    # the fabric collector off: its host /sys is a hostPath, which `restricted` (and `baseline`) refuse
    "agent": {"kernelLog": "off", "db": {"persistence": "emptyDir"}, "fabric": {"enabled": False}},
    "dcgmExporter": {"enabled": False},
}

# name -> (values, the Pod Security level the release needs)
VALUE_SETS: dict[str, tuple[dict[str, Any], str]] = {
    "defaults": ({}, "privileged"),
    "restricted": (UNPRIVILEGED, "restricted"),
    "no-kernel-log-hostpath-db": (
        {"agent": {"kernelLog": "off"}, "dcgmExporter": {"enabled": False}},
        "privileged",
    ),
    "kernel-log-emptydir": (
        {
            "agent": {"db": {"persistence": "emptyDir", "sizeLimit": "4Gi"}},
            "dcgmExporter": {"enabled": False},
        },
        "privileged",
    ),
    "kmsg-device": ({"agent": {"kernelLog": "device"}}, "privileged"),
    # otherwise unprivileged, but the fabric collector's host /sys is a hostPath
    "restricted-but-fabric": (
        {**UNPRIVILEGED, "agent": {**UNPRIVILEGED["agent"], "fabric": {"enabled": True}}},
        "privileged",
    ),
    "fabric-exclude": (
        {"agent": {"fabric": {"exclude": ["mlx5_bond_*", "mlx5_0/2"], "sysfsRoot": "/hostfs/sys"}}},
        "privileged",
    ),
    "gpu-operator-dcgm": (
        {
            "agent": {"expectGpus": 8},
            "dcgmExporter": {"enabled": False, "external": {"namespace": "gpu-operator"}},
            "serviceMonitor": {"labels": {"release": "kube-prometheus-stack"}},
            "prometheusRule": {"labels": {"release": "kube-prometheus-stack"}},
        },
        "privileged",
    ),
    "s3-export": (
        {
            "agent": {
                "export": {
                    "to": "s3://gpu-fleet/segments",
                    "every": "30m",
                    "s3Endpoint": "http://minio.storage:9000",
                    "region": "eu-west-1",
                    "existingSecret": "fleet-s3",
                },
                "extraArgs": ["--interval=2s"],
            }
        },
        "privileged",
    ),
    "nfs-export-unprivileged": (
        {
            **UNPRIVILEGED,
            "agent": {
                **UNPRIVILEGED["agent"],
                "export": {"to": "/fleet/segments", "volume": {"nfs": {"server": "nas", "path": "/fleet"}}},
            },
        },
        "baseline",
    ),
    "pvc-export-unprivileged": (
        {
            **UNPRIVILEGED,
            "agent": {
                **UNPRIVILEGED["agent"],
                "export": {"to": "/fleet", "volume": {"persistentVolumeClaim": {"claimName": "fleet"}}},
            },
        },
        "restricted",
    ),
    "everything-on": (
        {
            "grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "GPUs"}},
            "burnin": {"cordon": True, "nodeNames": ["gpu-01", "gpu-02"]},
            "imagePullSecrets": [{"name": "regcred"}],
            "image": {"tag": "0.2.0"},
        },
        "privileged",
    ),
}


def render(values: dict[str, Any], create_ns: bool = True) -> list[dict[str, Any]]:
    return helm_objects({**values, "namespace": {"create": create_ns}})


def release_namespace(objs: list[dict[str, Any]]) -> dict[str, Any]:
    (ns,) = [d for d in objs if d["kind"] == "Namespace" and d["metadata"]["name"] == "fleettool"]
    return ns


def agent_container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    (c,) = containers(one(objs, "DaemonSet", "-agent"))
    return c


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_every_rendered_object_validates(name: str) -> None:
    objs = render(VALUE_SETS[name][0])
    assert validate(objs) == len(objs) >= 8


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_pods_meet_the_namespace_level_the_chart_declares_and_no_stricter(name: str) -> None:
    values, expected = VALUE_SETS[name]
    objs = render(values)
    level = namespace_level(release_namespace(objs))
    assert level == expected
    pods = [d for d in objs if d["kind"] == "DaemonSet"]
    assert pods
    for d in pods:
        assert violations(d, level) == [], (d["metadata"]["name"], [str(v) for v in violations(d, level)])
    # the least: some pod fails the next stricter level (so the label asks for no more than the pods need)
    assert min(LEVELS.index(least_level(d)) for d in pods) == LEVELS.index(level)
    notes = helm_render({**values, "namespace": {"create": False}})["fleettool/templates/NOTES.txt"]
    assert f"pod-security.kubernetes.io/enforce={level} " in notes


def test_the_unprivileged_agent_drops_everything_and_runs_as_a_user() -> None:
    objs = render(UNPRIVILEGED)
    c = agent_container(objs)
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    pod = one(objs, "DaemonSet", "-agent")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65532
    assert "--kmsg=off" in c["args"] and "--dcgm-exporter=off" in c["args"]
    assert not any("hostPath" in v for v in pod["volumes"])
    assert not [d for d in objs if d["kind"] == "Service" and "dcgm" in d["metadata"]["name"]]


def _normalise(obj: Any, names: dict[str, str]) -> Any:
    if isinstance(obj, dict):
        return {k: _normalise(v, names) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_normalise(v, names) for v in obj]
    if isinstance(obj, str):
        for a, b in names.items():
            obj = obj.replace(a, b)
    return obj


def test_the_defaults_render_what_the_kustomize_base_applies() -> None:
    chart, base = render({}, create_ns=False), kustomize()
    names = {
        "fleettool-dcgm-local": "dcgm-exporter-local",
        "fleettool-dcgm-counters": "dcgm-exporter-counters",
    }
    for ds, kind_end in (("-agent", "fleettool-agent"), ("-dcgm-exporter", "dcgm-exporter")):
        c_pod = one(chart, "DaemonSet", ds)["spec"]["template"]["spec"]
        b_pod = one(base, "DaemonSet", kind_end)["spec"]["template"]["spec"]
        for key in ("nodeSelector", "tolerations", "runtimeClassName", "automountServiceAccountToken"):
            assert c_pod.get(key) == b_pod.get(key), (ds, key)
        assert c_pod.get("securityContext") == b_pod.get("securityContext"), ds
        c_vols = {v["name"]: {k: x for k, x in v.items() if k != "configMap"} for v in c_pod["volumes"]}
        b_vols = {v["name"]: {k: x for k, x in v.items() if k != "configMap"} for v in b_pod["volumes"]}
        assert c_vols == b_vols, ds
        (cc,), (bc,) = c_pod["containers"], b_pod["containers"]
        cc = _normalise(cc, names)
        for key in ("args", "securityContext", "ports", "resources", "volumeMounts", "startupProbe"):
            assert cc.get(key) == bc.get(key), (ds, key)
        for key in ("livenessProbe", "readinessProbe"):
            assert cc.get(key) == bc.get(key), (ds, key)
        b_env = {e["name"]: e for e in bc["env"]}
        assert {e["name"]: e for e in cc["env"] if e["name"] != "HOME"} == b_env, ds
    # the burn-in's namespace and grants: deploy/kubernetes/burnin, and burnin-cordon with burnin.cordon
    for values, folder in (({}, "burnin"), ({"burnin": {"cordon": True}}, "burnin-cordon")):
        objs, kust = render(values, create_ns=False), kustomize(folder)
        burnin_roles = ("-burnin-jobs", "-cordon")  # the agent's and the remediator's: below
        rules = {
            d["kind"]: d["rules"]
            for d in objs
            if d["kind"] in ("Role", "ClusterRole") and d["metadata"]["name"].endswith(burnin_roles)
        }
        assert rules == {d["kind"]: d["rules"] for d in kust if d["kind"] in ("Role", "ClusterRole")}, folder
        ns, kns = one(objs, "Namespace"), one(kust, "Namespace")
        assert ns["metadata"]["name"] == kns["metadata"]["name"] == "fleettool-burnin"
        assert {k: v for k, v in ns["metadata"]["labels"].items() if k.startswith("pod-security")} == {
            k: v for k, v in kns["metadata"]["labels"].items() if k.startswith("pod-security")
        }
    # the NetworkPolicy
    (np,) = [d for d in chart if d["kind"] == "NetworkPolicy"]
    (knp,) = [d for d in base if d["kind"] == "NetworkPolicy"]
    assert np["spec"]["ingress"] == knp["spec"]["ingress"] and np["spec"]["policyTypes"] == ["Ingress"]
    assert one(chart, "Service", "-dcgm-local")["spec"]["internalTrafficPolicy"] == "Local"


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_agent_args_are_real_options(name: str) -> None:
    helptext = " ".join(run_cli("agent", "--help").stdout.split())
    for a in agent_container(render(VALUE_SETS[name][0]))["args"][1:]:
        assert a.split("=")[0] in helptext, (name, a)


def test_the_agent_reaches_its_own_nodes_dcgm_exporter() -> None:
    objs = render({})
    svc = one(objs, "Service", "-dcgm-local")
    url = "http://fleettool-dcgm-local:9400/metrics"
    assert f"--dcgm-exporter={url}" in agent_container(objs)["args"]
    dcgm = one(objs, "DaemonSet", "-dcgm-exporter")
    assert svc["spec"]["selector"] == dcgm["spec"]["template"]["metadata"]["labels"]
    assert svc["metadata"]["namespace"] == "fleettool"
    # the GPU Operator's exporter: a Local Service in its namespace, selecting its pods
    objs = render(VALUE_SETS["gpu-operator-dcgm"][0])
    svc = one(objs, "Service", "-dcgm-local")
    assert svc["metadata"]["namespace"] == "gpu-operator" and svc["spec"]["internalTrafficPolicy"] == "Local"
    assert svc["spec"]["selector"] == {"app": "nvidia-dcgm-exporter"}
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 9400, "targetPort": 9400}]
    args = agent_container(objs)["args"]
    assert "--dcgm-exporter=http://fleettool-dcgm-local.gpu-operator.svc:9400/metrics" in args
    assert "--expect-gpus=8" in args
    assert not [d for d in objs if d["kind"] == "DaemonSet" and "dcgm" in d["metadata"]["name"]]
    assert [d["metadata"]["name"] for d in objs if d["kind"] == "ServiceMonitor"] == ["fleettool-agent"]
    # an explicit URL wins, and no Service is made for it
    objs = render({"dcgmExporter": {"url": "http://127.0.0.1:9400/metrics"}})
    assert "--dcgm-exporter=http://127.0.0.1:9400/metrics" in agent_container(objs)["args"]
    assert not [d for d in objs if d["kind"] == "Service" and d["metadata"]["name"].endswith("-dcgm-local")]


def test_monitoring_objects_carry_the_fleets_labels() -> None:
    objs = render(VALUE_SETS["gpu-operator-dcgm"][0])
    for kind in ("ServiceMonitor", "PrometheusRule"):
        for d in (d for d in objs if d["kind"] == kind):
            assert d["metadata"]["labels"]["release"] == "kube-prometheus-stack", kind
    objs = render({})
    for sm in (d for d in objs if d["kind"] == "ServiceMonitor"):
        sel = sm["spec"]["selector"]["matchLabels"]
        svcs = [
            s
            for s in objs
            if s["kind"] == "Service" and all(s["metadata"]["labels"].get(k) == v for k, v in sel.items())
        ]
        assert len(svcs) == 1 and svcs[0]["spec"]["clusterIP"] == "None", sm["metadata"]["name"]


def test_export_values_become_the_agents_options_and_environment() -> None:
    c = agent_container(render(VALUE_SETS["s3-export"][0]))
    assert "--export-to=s3://gpu-fleet/segments" in c["args"] and "--export-every=30m" in c["args"]
    assert c["args"][-1] == "--interval=2s"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["FLEETTOOL_S3_ENDPOINT"] == "http://minio.storage:9000" and env["AWS_REGION"] == "eu-west-1"
    assert c["envFrom"] == [{"secretRef": {"name": "fleet-s3"}}]
    objs = render(VALUE_SETS["nfs-export-unprivileged"][0])
    c = agent_container(objs)
    assert "--export-to=/fleet/segments" in c["args"]
    assert {"name": "export", "mountPath": "/fleet"} in c["volumeMounts"]
    pod = one(objs, "DaemonSet", "-agent")["spec"]["template"]["spec"]
    assert {"name": "export", "nfs": {"server": "nas", "path": "/fleet"}} in pod["volumes"]
    assert "--export-to" not in " ".join(agent_container(render({}))["args"])


def test_bad_values_are_refused_in_one_line_naming_the_value() -> None:
    err = helm_error({"agent": {"kernelLog": "journal"}})
    assert "/agent/kernelLog" in err
    err = helm_error({"agent": {"retention": {"raw": "7 days"}}})
    assert "/agent/retention/raw" in err
    err = helm_error({"agent": {"nodeselector": {}}})
    assert "nodeselector" in err and "additional properties" in err
    err = helm_error({"agent": {"export": {"to": "/elsewhere", "volume": {"emptyDir": {}}}}})
    assert 'agent.export.to "/elsewhere" must be under agent.export.mountPath "/fleet"' in err


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("7d", True),
        ("1h30m", True),
        ("90", True),
        ("1.5h", True),
        ("2w", True),
        ("7 days", False),
        ("", False),
    ]
    + [("-1h", False), ("1y", False), ("30", True)],
)
def test_the_schemas_duration_pattern_is_the_agents_grammar(text: str, ok: bool) -> None:
    from fleettool.units import parse_duration

    pattern = json.loads((CHART / "values.schema.json").read_text())["properties"]["agent"]["properties"]
    matches = re.fullmatch(pattern["retention"]["properties"]["raw"]["pattern"].strip("^$"), text) is not None
    try:
        parse_duration(text)
        parses = True
    except ValueError:
        parses = False
    assert matches == parses == ok, (text, matches, parses)


@pytest.mark.parametrize("text", ["64MiB", "512M", "65536", "2GiB", "1.5G", "64 MiB", "64XB", "", "-1M"])
def test_the_schemas_size_pattern_is_the_agents_grammar(text: str) -> None:
    from fleettool.units import parse_size

    pattern = json.loads((CHART / "values.schema.json").read_text())["properties"]["agent"]["properties"]
    matches = re.fullmatch(pattern["maxBuffer"]["pattern"].strip("^$"), text) is not None
    try:
        parse_size(text)
        parses = True
    except ValueError:
        parses = False
    assert matches == parses, (text, matches, parses)


def test_the_prometheus_rule_is_a_fresh_export(tmp_path: Path) -> None:
    fresh = tmp_path / "rules.yml"
    r = run_cli("rules", "export", "--prometheus", "-o", str(fresh))
    assert r.returncode == 0, r.stderr
    regenerate = f"fleettool rules export --prometheus -o {RULES_COPY.relative_to(CHART.parents[2])}"
    assert RULES_COPY.read_text() == fresh.read_text(), (
        f"the chart's copy of the exported rules is stale: run `{regenerate}`"
    )
    rule = one(render({}), "PrometheusRule")
    assert rule["spec"] == yaml.safe_load(fresh.read_text())
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip(
            "promtool (Debian package prometheus) is not installed: the rendered rules are not loaded"
        )
    rendered = tmp_path / "rendered.yml"
    rendered.write_text(yaml.safe_dump(rule["spec"]))
    p = subprocess.run(
        [promtool, "check", "rules", str(rendered)], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, p.stdout + p.stderr


def test_the_dashboard_configmap_is_the_dashboard() -> None:
    objs = render(VALUE_SETS["everything-on"][0])
    cm = one(objs, "ConfigMap", "-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "GPUs"}
    assert json.loads(cm["data"]["fleettool.json"]) == json.loads(DASHBOARD.read_text())
    assert not [
        d for d in render({}) if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard")
    ]
    cordon = one(objs, "ClusterRole", "-cordon")
    assert cordon["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["nodes"],
            "verbs": ["get", "patch"],
            "resourceNames": ["gpu-01", "gpu-02"],
        }
    ]
    assert agent_container(objs)["image"] == "ghcr.io/fleettool/fleettool:0.2.0"


def test_the_chart_lints_clean() -> None:
    import helm_python

    report = helm_python.lint(str(CHART))
    assert report["errors"] == [], report
    # Helm's severities: 1 info, 2 warning, 3 error; the only info is the missing icon
    assert [m for m in report["messages"] if m["severity"] > 1] == [], report


def test_the_network_policy_admits_the_prometheus_the_values_name() -> None:
    def admits(objs: list[dict[str, Any]], ns: str, pod: dict[str, str], port: int = 9402) -> bool:
        agent = one(objs, "DaemonSet", "-agent")
        policies = [d for d in objs if d["kind"] == "NetworkPolicy"]
        return ingress_admits(policies, agent, (ns, {"kubernetes.io/metadata.name": ns}, pod), port)

    prom = {"app.kubernetes.io/name": "prometheus"}
    objs = render({})
    (np,) = [d for d in objs if d["kind"] == "NetworkPolicy"]
    assert selects(
        np["spec"]["podSelector"], one(objs, "DaemonSet", "-agent")["spec"]["template"]["metadata"]["labels"]
    )
    assert admits(objs, "monitoring", {}) and not admits(objs, "default", prom)
    assert not admits(objs, "monitoring", {}, port=9400)
    # another namespace and only the Prometheus pods of it; the port follows agent.port
    objs = render(
        {
            "agent": {
                "port": 9502,
                "networkPolicy": {
                    "prometheus": {
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "prom"}},
                        "podSelector": {"matchLabels": prom},
                    }
                },
            }
        }
    )
    assert admits(objs, "prom", prom, 9502)
    assert not admits(objs, "prom", {"app": "grafana"}, 9502) and not admits(objs, "monitoring", prom, 9502)
    # a hostNetwork Prometheus: an ipBlock of the nodes (matches no pod here), given as it is
    objs = render({"agent": {"networkPolicy": {"extraFrom": [{"ipBlock": {"cidr": "10.0.0.0/16"}}]}}})
    (np,) = [d for d in objs if d["kind"] == "NetworkPolicy"]
    assert np["spec"]["ingress"][0]["from"][1] == {"ipBlock": {"cidr": "10.0.0.0/16"}}
    assert validate([np]) == 1
    # off: no policy, the port is open to every pod
    objs = render({"agent": {"networkPolicy": {"enabled": False}}})
    assert not [d for d in objs if d["kind"] == "NetworkPolicy"] and admits(objs, "default", {})
    err = helm_error({"agent": {"networkPolicy": {"prometheus": {"namespaceSelector": {"matchlabels": {}}}}}})
    assert "matchlabels" in err


def test_burnin_jobs_run_in_a_restricted_namespace_and_cordoning_is_asked_for() -> None:
    from fleettool.burnin.dispatch import k8s_job

    objs = render({})
    ns = one(objs, "Namespace", "-burnin")
    assert namespace_level(ns) == "restricted" and namespace_level(release_namespace(objs)) == "privileged"
    role = one(objs, "Role", "-burnin-jobs")
    assert role["metadata"]["namespace"] == one(objs, "RoleBinding", "-burnin-jobs")["metadata"]["namespace"]
    assert role["metadata"]["namespace"] == ns["metadata"]["name"]
    job = k8s_job("gpu-17", [], image="img")  # the CLI's default --namespace
    assert job["metadata"]["namespace"] == ns["metadata"]["name"] and violations(job, "restricted") == []
    # nothing cluster-wide for the burn-in by default (the agent's node condition and the remediator's are
    # test_the_node_condition_and_remediator_rbac_are_the_kustomize_bases)
    assert not [
        d
        for d in objs
        if d["kind"].startswith("Cluster")
        and not d["metadata"]["name"].endswith(("-node-condition", "-remediator"))
    ]
    objs = render({"burnin": {"cordon": True}})
    assert one(objs, "ClusterRole", "-cordon")["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}
    ]
    # a namespace managed elsewhere: not rendered, the grants still go there
    objs = render({"burnin": {"namespace": "gpu-burnin", "createNamespace": False}})
    assert [d["metadata"]["name"] for d in objs if d["kind"] == "Namespace"] == ["fleettool"]
    assert one(objs, "Role", "-burnin-jobs")["metadata"]["namespace"] == "gpu-burnin"
    err = helm_error({"burnin": {"namespace": "fleettool"}})
    assert 'burnin.namespace "fleettool" is the release\'s namespace' in err


def test_kernel_log_from_a_device_plugin_is_the_kustomize_component(tmp_path: Path) -> None:
    """agent.kernelLog=device renders the agent deploy/kubernetes/components/kmsg-device makes: not privileged,
    SYSLOG only, the plugin's resource requested (agent.kmsgDevice.resource)."""
    from tests.deploy_render import kustomize_with

    chart = one(render(VALUE_SETS["kmsg-device"][0], create_ns=False), "DaemonSet", "-agent")
    base = one(kustomize_with(tmp_path, "kmsg-device"), "DaemonSet", "fleettool-agent")
    (cc,), (bc,) = containers(chart), containers(base)
    assert cc["securityContext"] == bc["securityContext"] and cc["securityContext"].get("privileged") is None
    assert cc["resources"] == bc["resources"]
    assert cc["volumeMounts"] == bc["volumeMounts"]
    assert chart["spec"]["template"]["spec"]["volumes"] == base["spec"]["template"]["spec"]["volumes"]
    assert "--kmsg=/dev/kmsg" in cc["args"]
    c = agent_container(
        render({"agent": {"kernelLog": "device", "kmsgDevice": {"resource": "example.com/kmsg"}}})
    )
    assert c["resources"]["limits"] == {"memory": "256Mi", "example.com/kmsg": 1}
    assert "/agent/kernelLog" in helm_error({"agent": {"kernelLog": "devices"}})


def _roles(objs: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    return {
        (d["kind"], d["metadata"]["name"].removeprefix("fleettool-")): d["rules"]
        for d in objs
        if d["kind"] in ("Role", "ClusterRole")
        and not d["metadata"]["name"].endswith(("-burnin-jobs", "-cordon"))
    }


def test_the_node_condition_and_remediator_rbac_are_the_kustomize_bases() -> None:
    """agent.nodeCondition (on by default, as the base): the token in the agent's pod, --node-condition and the
    ClusterRole of get nodes, patch nodes/status bound to the agent's ServiceAccount; remediator.rbac.create: the
    remediator's ClusterRole and Role, bound to nobody. Off, each renders none of it."""
    chart, base = render({}, create_ns=False), kustomize()
    assert _roles(chart) == _roles(base)
    assert set(_roles(chart)) == {
        ("ClusterRole", "agent-node-condition"),
        ("ClusterRole", "remediator"),
        ("Role", "remediator"),
    }
    binding = one(chart, "ClusterRoleBinding", "-agent-node-condition")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "fleettool-agent", "namespace": "fleettool"}
    ]
    assert binding["roleRef"]["name"] == "fleettool-agent-node-condition"
    assert not [d for d in chart if d["kind"].endswith("Binding") and "remediator" in d["roleRef"]["name"]]
    assert one(chart, "Role", "-remediator")["metadata"]["namespace"] == "fleettool"
    pod = one(chart, "DaemonSet", "-agent")["spec"]["template"]["spec"]
    assert (
        pod["automountServiceAccountToken"] is True and "--node-condition" in agent_container(chart)["args"]
    )
    off = render({"agent": {"nodeCondition": {"enabled": False}}, "remediator": {"rbac": {"create": False}}})
    assert validate(off) == len(off)
    assert not [
        d
        for d in off
        if d["kind"] in ("Role", "ClusterRole", "ClusterRoleBinding")
        and "burnin" not in d["metadata"]["name"]
    ]
    pod = one(off, "DaemonSet", "-agent")["spec"]["template"]["spec"]
    assert (
        pod["automountServiceAccountToken"] is False
        and "--node-condition" not in agent_container(off)["args"]
    )
    assert "nodeCondition" in helm_error({"agent": {"nodeCondition": {"enabled": "yes"}}})
