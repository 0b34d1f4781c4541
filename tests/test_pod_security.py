"""The Pod Security check (tests/pod_security.py) can fail: one pod that meets Restricted, and for every control of
the document one change that breaks exactly that control at the level that forbids it (and not below). The check
is then applied to what is deployed: tests/test_deploy.py (kustomize) and tests/test_helm_chart.py (the chart)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.pod_security import least_level, namespace_level, violations


def good_pod() -> dict[str, Any]:
    """A pod that meets Restricted, field by field."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "ok",
            "annotations": {"container.apparmor.security.beta.kubernetes.io/app": "runtime/default"},
        },
        "spec": {
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
                "sysctls": [{"name": "net.ipv4.ip_local_port_range", "value": "1024 65535"}],
                "seLinuxOptions": {"type": "container_t"},
            },
            "containers": [
                {
                    "name": "app",
                    "image": "x",
                    "ports": [{"name": "http", "containerPort": 8080}],
                    "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}},
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                        "procMount": "Default",
                        "appArmorProfile": {"type": "RuntimeDefault"},
                    },
                }
            ],
            "initContainers": [
                {
                    "name": "init",
                    "image": "x",
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                        "seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"},
                    },
                }
            ],
            "volumes": [
                {"name": "tmp", "emptyDir": {}},
                {"name": "cfg", "configMap": {"name": "c"}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "d"}},
            ],
        },
    }


def _c(p: dict[str, Any]) -> dict[str, Any]:
    return p["spec"]["containers"][0]  # type: ignore[no-any-return]


def _sc(p: dict[str, Any]) -> dict[str, Any]:
    return _c(p)["securityContext"]  # type: ignore[no-any-return]


Mutation = Callable[[dict[str, Any]], None]

# (control, the lowest level that forbids it, the change)
BASELINE_BREAKS: list[tuple[str, Mutation]] = [
    ("HostProcess", lambda p: p["spec"]["securityContext"].update(windowsOptions={"hostProcess": True})),
    ("HostProcess", lambda p: _sc(p).update(windowsOptions={"hostProcess": True})),
    ("Host Namespaces", lambda p: p["spec"].update(hostNetwork=True)),
    ("Host Namespaces", lambda p: p["spec"].update(hostPID=True)),
    ("Host Namespaces", lambda p: p["spec"].update(hostIPC=True)),
    (
        "Privileged Containers",
        lambda p: p["spec"]["initContainers"][0]["securityContext"].update(privileged=True),
    ),
    ("Capabilities", lambda p: _sc(p)["capabilities"].update(add=["SYSLOG"])),
    ("HostPath Volumes", lambda p: p["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/var"}})),
    ("Host Ports", lambda p: _c(p)["ports"][0].update(hostPort=9400)),
    ("Host Probes / Lifecycle Hooks", lambda p: _c(p)["livenessProbe"]["httpGet"].update(host="10.0.0.1")),
    (
        "Host Probes / Lifecycle Hooks",
        lambda p: _c(p).update(lifecycle={"preStop": {"tcpSocket": {"port": 1, "host": "169.254.169.254"}}}),
    ),
    ("AppArmor", lambda p: _sc(p).update(appArmorProfile={"type": "Unconfined"})),
    (
        "AppArmor",
        lambda p: p["metadata"]["annotations"].update(
            {"container.apparmor.security.beta.kubernetes.io/app": "unconfined"}
        ),
    ),
    ("SELinux", lambda p: p["spec"]["securityContext"].update(seLinuxOptions={"type": "spc_t"})),
    ("SELinux", lambda p: _sc(p).update(seLinuxOptions={"user": "system_u"})),
    ("SELinux", lambda p: _sc(p).update(seLinuxOptions={"role": "sysadm_r"})),
    ("/proc Mount Type", lambda p: _sc(p).update(procMount="Unmasked")),
    ("Seccomp", lambda p: p["spec"]["securityContext"].update(seccompProfile={"type": "Unconfined"})),
    (
        "Sysctls",
        lambda p: p["spec"]["securityContext"]["sysctls"].append({"name": "kernel.msgmax", "value": "1"}),
    ),
]
RESTRICTED_BREAKS: list[tuple[str, Mutation]] = [
    (
        "Volume Types",
        lambda p: p["spec"]["volumes"].append({"name": "n", "nfs": {"server": "s", "path": "/"}}),
    ),
    ("Privilege Escalation", lambda p: _sc(p).pop("allowPrivilegeEscalation")),
    ("Privilege Escalation", lambda p: _sc(p).update(allowPrivilegeEscalation=True)),
    ("Running as Non-root", lambda p: p["spec"]["securityContext"].pop("runAsNonRoot")),
    ("Running as Non-root", lambda p: _sc(p).update(runAsNonRoot=False)),
    (
        "Running as Non-root user",
        lambda p: p["spec"]["initContainers"][0]["securityContext"].update(runAsUser=0),
    ),
    ("Seccomp", lambda p: p["spec"]["securityContext"].pop("seccompProfile")),
    ("Capabilities", lambda p: _sc(p)["capabilities"].update(drop=["NET_RAW"])),
    ("Capabilities", lambda p: _sc(p)["capabilities"].update(add=["NET_BIND_SERVICE", "CHOWN"])),
]


def test_the_good_pod_meets_restricted() -> None:
    assert violations(good_pod(), "restricted") == []
    assert least_level(good_pod()) == "restricted"


@pytest.mark.parametrize(("control", "mutate"), BASELINE_BREAKS, ids=[c for c, _ in BASELINE_BREAKS])
def test_each_baseline_control_rejects_a_bad_pod(control: str, mutate: Mutation) -> None:
    pod = good_pod()
    mutate(pod)
    found = violations(pod, "baseline")
    assert [v.control for v in found] == [control], [str(v) for v in found]
    # Restricted is Baseline and more: the same break, sometimes also named by a Restricted control (a hostPath is
    # also not among the Volume Types; an added SYSLOG is also not NET_BIND_SERVICE)
    assert control in {v.control for v in violations(pod, "restricted")}
    assert violations(pod, "privileged") == []
    assert least_level(pod) == "privileged"


@pytest.mark.parametrize(("control", "mutate"), RESTRICTED_BREAKS, ids=[c for c, _ in RESTRICTED_BREAKS])
def test_each_restricted_control_rejects_a_bad_pod(control: str, mutate: Mutation) -> None:
    pod = good_pod()
    mutate(pod)
    found = violations(pod, "restricted")
    assert found and {v.control for v in found} == {control}, [str(v) for v in found]
    assert violations(pod, "baseline") == []  # Baseline allows it: the control is Restricted's own
    assert least_level(pod) == "baseline"


def test_every_control_of_the_document_is_exercised() -> None:
    baseline = {
        "HostProcess",
        "Host Namespaces",
        "Privileged Containers",
        "Capabilities",
        "HostPath Volumes",
        "Host Ports",
        "Host Probes / Lifecycle Hooks",
        "AppArmor",
        "SELinux",
        "/proc Mount Type",
        "Seccomp",
        "Sysctls",
    }
    restricted = {
        "Volume Types",
        "Privilege Escalation",
        "Running as Non-root",
        "Running as Non-root user",
        "Seccomp",
        "Capabilities",
    }
    assert {c for c, _ in BASELINE_BREAKS} == baseline
    assert {c for c, _ in RESTRICTED_BREAKS} == restricted


def test_container_level_settings_stand_in_for_pod_level_ones() -> None:
    pod = good_pod()
    pod["spec"]["securityContext"] = {}  # nothing at pod level: every container says it itself
    for c in pod["spec"]["containers"] + pod["spec"]["initContainers"]:
        c["securityContext"].update(runAsNonRoot=True, seccompProfile={"type": "RuntimeDefault"})
    assert violations(pod, "restricted") == []
    pod["spec"]["containers"][0]["securityContext"].pop("seccompProfile")
    assert [v.control for v in violations(pod, "restricted")] == ["Seccomp"]


def test_ephemeral_containers_are_checked_too() -> None:
    pod = good_pod()
    debug = copy.deepcopy(pod["spec"]["initContainers"][0])
    debug.update(name="debug")
    debug["securityContext"]["privileged"] = True
    pod["spec"]["ephemeralContainers"] = [debug]
    assert [str(v) for v in violations(pod, "baseline")] == [
        "Privileged Containers: spec.ephemeralContainers[debug].securityContext.privileged=True"
    ]


def test_windows_pods_are_exempt_from_the_linux_only_restricted_controls() -> None:
    pod = good_pod()
    pod["spec"]["os"] = {"name": "windows"}
    pod["spec"]["securityContext"].pop("seccompProfile")
    _sc(pod).pop("allowPrivilegeEscalation")
    _sc(pod).pop("capabilities")
    assert violations(pod, "restricted") == []
    pod["spec"]["os"] = {"name": "linux"}
    assert {v.control for v in violations(pod, "restricted")} == {
        "Seccomp",
        "Privilege Escalation",
        "Capabilities",
    }


def test_workloads_are_checked_through_their_pod_template() -> None:
    bad = good_pod()
    bad["spec"]["hostNetwork"] = True
    tpl = {"metadata": bad["metadata"], "spec": bad["spec"]}
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "d"}, "spec": {"template": tpl}}
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "c"},
        "spec": {"jobTemplate": {"spec": {"template": tpl}}},
    }
    for obj in (ds, cron):
        assert [v.control for v in violations(obj, "baseline")] == ["Host Namespaces"]
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {}}
    assert violations(svc, "restricted") == []  # makes no pod


def test_levels_and_namespace_labels() -> None:
    ns = {
        "kind": "Namespace",
        "metadata": {"name": "n", "labels": {"pod-security.kubernetes.io/enforce": "baseline"}},
    }
    assert namespace_level(ns) == "baseline"
    assert namespace_level({"kind": "Namespace", "metadata": {"name": "n"}}) == "privileged"
    with pytest.raises(ValueError, match="unknown Pod Security level"):
        namespace_level(
            {
                "kind": "Namespace",
                "metadata": {"name": "n", "labels": {"pod-security.kubernetes.io/enforce": "strict"}},
            }
        )
    with pytest.raises(ValueError, match="unknown Pod Security level"):
        violations(good_pod(), "strict")
