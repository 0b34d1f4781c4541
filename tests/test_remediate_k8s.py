"""The Kubernetes steps of remediation (fleettool/remediate/k8s.py): each step's kubectl argv, its undo, and every
manifest checked as the API server would check it offline (Kubernetes' own OpenAPI schemas through
kubernetes-validate, strict: an unknown field is refused; the Pod Security Standards of the agent's namespace).
has_dra runs against the kubectl stand-in (tests/standin.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from fleettool.remediate import k8s
from fleettool.remediate.model import Step, Via
from fleettool.remediate.runner import NodeRunner
from tests import standin
from tests.deploy_render import validate
from tests.pod_security import violations

UUID = (
    "GPU-60191ee1-f437-565c-ab0f-914032019dc5"  # a UUID as NVIDIA's DRA driver publishes it (dra-driver #427)
)
# `kubectl api-resources --api-group=resource.k8s.io -o name`: one resource.group per line. With device taints
# served (Kubernetes 1.36+, DRADeviceTaints) the list holds devicetaintrules; a 1.32-1.35 cluster without the
# feature lists the other four (https://kubernetes.io/docs/concepts/resource-management/dynamic-resource-allocation/)
WITH_TAINTS = (
    "deviceclasses.resource.k8s.io\ndevicetaintrules.resource.k8s.io\nresourceclaims.resource.k8s.io\n"
    "resourceclaimtemplates.resource.k8s.io\nresourceslices.resource.k8s.io\n"
)
WITHOUT_TAINTS = (
    "deviceclasses.resource.k8s.io\nresourceclaims.resource.k8s.io\nresourceclaimtemplates.resource.k8s.io\n"
    "resourceslices.resource.k8s.io\n"
)
REFUSED = (
    "The connection to the server localhost:8080 was refused - did you specify the right host or port?\n"
)


def _runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reply: dict[str, Any]) -> NodeRunner:
    bin_dir = tmp_path / "bin"
    standin.install(
        bin_dir,
        {"phase": "start", "rules": [{"tool": "kubectl", "match": "^api-resources", "replies": [reply]}]},
    )
    for k, v in standin.env(bin_dir).items():
        monkeypatch.setenv(k, v)
    return NodeRunner("gpu-17", Via.K8S, kubectl=str(bin_dir / "kubectl"))


@pytest.mark.parametrize(
    ("reply", "want"),
    [
        ({"stdout": WITH_TAINTS}, True),
        ({"stdout": WITHOUT_TAINTS}, False),
        ({"stdout": "", "stderr": REFUSED, "rc": 1}, False),
        ({"stdout": WITH_TAINTS, "rc": 1}, False),  # kubectl failed: what it printed is not trusted
    ],
)
def test_has_dra_asks_kubectl_for_device_taint_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reply: dict[str, Any], want: bool
) -> None:
    runner = _runner(tmp_path, monkeypatch, reply)
    assert k8s.has_dra(runner) is want
    (call,) = standin.calls(tmp_path / "bin")
    assert call["args"] == ["api-resources", "--api-group=resource.k8s.io", "-o", "name"]


def _manifest(step: Step) -> dict[str, Any]:
    assert step.stdin is not None
    return dict(json.loads(step.stdin))


def test_a_gpu_out_of_scheduling_with_a_device_taint_rule() -> None:
    (step,) = k8s.take_out_gpu_steps("gpu-17", 3, UUID, "XID 79 GPU 3 incident inc-42", dra=True)
    assert step.argv == ("kubectl", "apply", "-f", "-") and step.where == "here"
    assert step.takes_out == f"GPU 3 of gpu-17 ({UUID})"
    rule = _manifest(step)
    assert rule["apiVersion"] == "resource.k8s.io/v1beta2" and rule["kind"] == "DeviceTaintRule"
    assert rule["metadata"]["name"] == "fleettool-gpu-17-gpu3"
    assert rule["metadata"]["labels"]["fleettool.io/gpu-uuid"] == UUID
    assert rule["metadata"]["annotations"]["fleettool.io/reason"] == "XID 79 GPU 3 incident inc-42"
    # NVIDIA's DRA driver: driver gpu.nvidia.com, the node's name as the pool, devices gpu-0, gpu-1, ...
    assert rule["spec"] == {
        "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "gpu-17", "device": "gpu-3"},
        "taint": {"key": "fleettool.io/gpu-unhealthy", "value": UUID, "effect": "NoSchedule"},
    }
    assert validate([rule]) == 1  # the published schema of resource.k8s.io/v1beta2, unknown fields refused
    v1 = dict(rule, apiVersion="resource.k8s.io/v1")  # the same object is valid as GA (1.37)
    assert validate([v1]) == 1
    assert step.undo is not None
    assert step.undo.argv == (
        "kubectl",
        "delete",
        "devicetaintrule",
        "fleettool-gpu-17-gpu3",
        "--ignore-not-found",
    )
    assert step.undo.where == "here" and step.undo.undo is None
    # where the plan evicts: NoExecute (the eviction controller deletes the pods using the device)
    (evict,) = k8s.take_out_gpu_steps("gpu-17", 3, None, "r", dra=True, evict=True)
    rule = _manifest(evict)
    assert rule["spec"]["taint"] == {
        "key": "fleettool.io/gpu-unhealthy",
        "value": "gpu-3",
        "effect": "NoExecute",
    }
    assert "fleettool.io/gpu-uuid" not in rule["metadata"]["labels"]
    assert validate([rule]) == 1


# A ResourceSlice of NVIDIA's DRA driver as a cluster served it (the fields a DeviceTaintRule selects on, and the
# uuid attribute), from kubernetes-sigs/dra-driver-nvidia-gpu#719 (AKS, driver 580.95.05):
# https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/issues/719
AKS_SLICE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceSlice",
    "spec": {
        "driver": "gpu.nvidia.com",
        "nodeName": "aks-gpupool-15127565-vmss000002",
        "pool": {"generation": 1, "name": "aks-gpupool-15127565-vmss000002", "resourceSliceCount": 1},
        "devices": [
            {
                "name": "gpu-1",
                "attributes": {
                    "productName": {"string": "NVIDIA A100 80GB PCIe"},
                    "type": {"string": "gpu"},
                    "uuid": {"string": "GPU-13719f71-412c-d11e-b236-a262f530a4fc"},
                },
            }
        ],
    },
}


def _selected(rule: dict[str, Any], slices: list[dict[str, Any]]) -> list[str]:
    """The devices' UUIDs a DeviceTaintRule selects (driver, pool, device: every criterion set must match)."""
    sel = rule["spec"]["deviceSelector"]
    return [
        d["attributes"]["uuid"]["string"]
        for s in slices
        for d in s["spec"]["devices"]
        if sel.get("driver", s["spec"]["driver"]) == s["spec"]["driver"]
        and sel.get("pool", s["spec"]["pool"]["name"]) == s["spec"]["pool"]["name"]
        and sel.get("device", d["name"]) == d["name"]
    ]


def test_the_rule_selects_the_gpu_in_a_real_resource_slice() -> None:
    node, uuid = "aks-gpupool-15127565-vmss000002", "GPU-13719f71-412c-d11e-b236-a262f530a4fc"
    (step,) = k8s.take_out_gpu_steps(node, 1, uuid, "XID 79 GPU 1", dra=True)
    assert _selected(_manifest(step), [AKS_SLICE]) == [uuid]
    # another GPU of the node, or the same index on another node: not selected
    (other,) = k8s.take_out_gpu_steps(node, 0, None, "r", dra=True)
    assert _selected(_manifest(other), [AKS_SLICE]) == []
    (elsewhere,) = k8s.take_out_gpu_steps("aks-gpupool-15127565-vmss000003", 1, None, "r", dra=True)
    assert _selected(_manifest(elsewhere), [AKS_SLICE]) == []


def test_the_schema_check_refuses_what_the_api_server_refuses() -> None:
    (step,) = k8s.take_out_gpu_steps("gpu-17", 3, UUID, "r", dra=True)
    rule = _manifest(step)
    bad = copy.deepcopy(rule)
    bad["spec"]["deviceSelector"]["uuid"] = UUID  # no such selector field in the served versions
    with pytest.raises(Exception, match="uuid"):
        validate([bad])
    bad = copy.deepcopy(rule)
    del bad["spec"]["taint"]  # required
    with pytest.raises(Exception, match="taint"):
        validate([bad])
    with pytest.raises(ValueError, match="PreferNoSchedule"):
        k8s.device_taint_rule("gpu-17", 3, UUID, "r", effect="PreferNoSchedule")


def test_without_dra_a_node_taint_and_the_gpu_healthy_condition() -> None:
    taint, cond = k8s.take_out_gpu_steps("gpu-17", 3, UUID, "XID 79 GPU 3 incident inc-42", dra=False)
    assert taint.argv == (
        "kubectl", "taint", "nodes", "gpu-17", "fleettool.io/gpu-unhealthy=3:NoSchedule", "--overwrite",
    )  # fmt: skip
    assert taint.undo is not None
    assert taint.undo.argv == (
        "kubectl",
        "taint",
        "nodes",
        "gpu-17",
        "fleettool.io/gpu-unhealthy=3:NoSchedule-",
    )
    assert taint.takes_out.startswith("GPU 3 of gpu-17")
    assert cond.argv[:6] == ("kubectl", "patch", "node", "gpu-17", "--subresource=status", "--type=strategic")
    assert cond.argv[6] == "-p"
    assert json.loads(cond.argv[7]) == {
        "status": {
            "conditions": [
                {
                    "type": "GpuHealthy",
                    "status": "False",
                    "reason": "GpuRemediation",
                    "message": "fleettool remediate: XID 79 GPU 3 incident inc-42",
                }
            ]
        }
    }
    assert cond.undo is not None
    assert cond.undo.argv[:7] == cond.argv[:7]
    (up,) = json.loads(cond.undo.argv[7])["status"]["conditions"]
    assert (up["type"], up["status"], up["reason"]) == ("GpuHealthy", "True", "ProofPassed")
    assert all(s.where == "here" for s in (taint, cond, taint.undo, cond.undo))
    # the patch is a valid NodeCondition (the Node schema, strict)
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-17"}}
    for patch in (cond.argv[7], cond.undo.argv[7]):
        assert validate([{**node, **json.loads(patch)}]) == 1


def test_the_whole_node_is_cordoned_with_the_condition() -> None:
    cordon, cond = k8s.take_out_node_steps("gpu-17", "XID 79 GPU 3 incident inc-42")
    assert cordon.argv == ("kubectl", "cordon", "gpu-17") and cordon.takes_out == "node gpu-17"
    assert cordon.undo is not None and cordon.undo.argv == ("kubectl", "uncordon", "gpu-17")
    assert json.loads(cond.argv[7])["status"]["conditions"][0]["status"] == "False"
    assert (
        cond.undo is not None and json.loads(cond.undo.argv[7])["status"]["conditions"][0]["status"] == "True"
    )


def test_the_reboot_job() -> None:
    (step,) = k8s.reboot_steps(
        "gpu-17",
        "reset refused: In use by another client",
        image="ghcr.io/fleettool/fleettool:0.1.0",
        namespace="fleettool",
    )
    assert step.argv == ("kubectl", "create", "-f", "-") and step.where == "here" and step.undo is None
    assert step.takes_out == "node gpu-17 (reboot)"
    job = _manifest(step)
    assert job["kind"] == "Job" and job["metadata"]["namespace"] == "fleettool"
    assert job["metadata"]["generateName"] == "fleettool-reboot-" and "name" not in job["metadata"]
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeName"] == "gpu-17" and pod["hostPID"] is True and pod["restartPolicy"] == "Never"
    (c,) = pod["containers"]
    assert c["command"] == ["nsenter", "-t", "1", "-m", "-u", "-i", "-n", "-p", "--", "systemctl", "reboot"]
    assert c["securityContext"]["privileged"] is True
    assert job["spec"]["backoffLimit"] == 0
    assert validate([job]) == 1
    # the agent's namespace is `privileged`: admitted there; Baseline (any other namespace) refuses it
    assert violations(job, "privileged") == []
    assert {v.control for v in violations(job, "baseline")} == {"Host Namespaces", "Privileged Containers"}


def test_bad_input_is_refused_before_any_step() -> None:
    for bad in ("gpu 17", "-gpu", "a;reboot", ""):
        with pytest.raises(ValueError, match="invalid node name"):
            k8s.take_out_gpu_steps(bad, 0, None, "r", dra=True)
        with pytest.raises(ValueError, match="invalid node name"):
            k8s.take_out_node_steps(bad, "r")
        with pytest.raises(ValueError, match="invalid node name"):
            k8s.reboot_steps(bad, "r", image="i", namespace="fleettool")
    with pytest.raises(ValueError, match="GPU index"):
        k8s.take_out_gpu_steps("gpu-17", -1, None, "r", dra=False)
