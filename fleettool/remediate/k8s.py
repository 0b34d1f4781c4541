"""The Kubernetes steps of a plan (via k8s): each one a `kubectl` argv run here, with the step that undoes it.

Taking one GPU out of scheduling:
- where the cluster serves DRA device taints (`kubectl api-resources --api-group=resource.k8s.io` lists
  devicetaintrules): a DeviceTaintRule (KEP-5055; resource.k8s.io/v1beta2, served from Kubernetes 1.36 and still
  in 1.37, where v1 is added) that taints the one device of NVIDIA's DRA driver: driver `gpu.nvidia.com`, pool =
  the node's name, device `gpu-N`, as the driver publishes its ResourceSlices (kubernetes-sigs/dra-driver-nvidia-gpu#719
  shows one: spec.pool.name the node's name, devices gpu-0.. each with a `uuid` attribute). The selector of the
  served versions has only driver, pool and device (v1alpha3's CEL selectors on the uuid attribute are gone), and
  the driver's device names follow its enumeration order, which can shift when a GPU drops out
  (kubernetes-sigs/dra-driver-nvidia-gpu#427): the UUID goes into the taint's value and the rule's labels so what
  was meant is on record. Effect NoSchedule (no new claim gets the device); NoExecute only where the plan evicts
  (the DRA eviction controller deletes the pods using it). Undo: `kubectl delete devicetaintrule NAME`.
- elsewhere: a node taint `fleettool.io/gpu-unhealthy=N:NoSchedule` (the device plugin has no per-GPU taint: the
  node takes no new pod that does not tolerate it) plus the node condition GpuHealthy=False. Undo: the taint
  removed (the same argv with a trailing '-') and GpuHealthy=True with reason ProofPassed.

The node condition is written to the node's status subresource with a strategic merge patch (conditions merge by
`type`, so the kubelet's own are untouched), as node-problem-detector writes its conditions.

The whole node: `kubectl cordon` plus the condition. A reboot: a Job pinned to the node (nodeName, so it runs on
a cordoned node) in the agent's namespace (Pod Security privileged: the Job is root on the node, which is why the
RBAC that may create it is a separate ClusterRole bound to nothing by default, deploy/kubernetes/remediator.yaml),
running `nsenter -t 1 -m -u -i -n -p -- systemctl reboot` in the host's namespaces.

Manifests go on stdin as JSON (YAML 1.1 would read a namespace named `y` or `no` as a bool). Pure: no I/O here
but has_dra's one kubectl call through the runner.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from fleettool.burnin.dispatch import validate_node
from fleettool.remediate.model import Step
from fleettool.remediate.runner import NodeRunner

DRA_GROUP = "resource.k8s.io"
DTR_API_VERSION = "resource.k8s.io/v1beta2"
NVIDIA_DRA_DRIVER = "gpu.nvidia.com"
TAINT_KEY = "fleettool.io/gpu-unhealthy"
CONDITION = "GpuHealthy"
REASON_DOWN = "GpuRemediation"  # set by `fleettool remediate` while the GPU or node is out
REASON_PROVEN = "ProofPassed"  # set when the rung's proof passed
REBOOT_COMMAND = ("nsenter", "-t", "1", "-m", "-u", "-i", "-n", "-p", "--", "systemctl", "reboot")


def has_dra(runner: NodeRunner) -> bool:
    """Whether the cluster serves DRA device taints (DeviceTaintRule); False when kubectl fails."""
    r = runner.here([runner.kubectl, "api-resources", f"--api-group={DRA_GROUP}", "-o", "name"], timeout_s=60)
    names = {line.strip().split(".", 1)[0] for line in r.stdout.splitlines()}
    return r.rc == 0 and "devicetaintrules" in names


def label_value(text: str) -> str:
    """`text` as a label value (63 characters of [A-Za-z0-9._-], alphanumeric at both ends)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63].strip("-_.")


def rule_name(node: str, gpu: int) -> str:
    """The DeviceTaintRule's name: one per node and GPU (a DNS subdomain), so the undo names it."""
    base = f"fleettool-{node.lower()}-gpu{gpu}"
    if len(base) <= 253:
        return base
    return f"fleettool-{hashlib.sha256(node.encode()).hexdigest()[:16]}-gpu{gpu}"


def device_taint_rule(
    node: str, gpu: int, uuid: str | None, reason: str, *, effect: str = "NoSchedule"
) -> dict[str, Any]:
    """The DeviceTaintRule that takes GPU `gpu` of `node` (NVIDIA's DRA driver) out of scheduling."""
    if effect not in ("NoSchedule", "NoExecute"):
        raise ValueError(f"invalid device taint effect {effect!r}: NoSchedule or NoExecute")
    labels = {"app.kubernetes.io/managed-by": "fleettool", "fleettool.io/node": label_value(node)}
    if uuid:
        labels["fleettool.io/gpu-uuid"] = label_value(uuid)
    return {
        "apiVersion": DTR_API_VERSION,
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": rule_name(node, gpu),
            "labels": labels,
            "annotations": {"fleettool.io/reason": reason},
        },
        "spec": {
            "deviceSelector": {"driver": NVIDIA_DRA_DRIVER, "pool": node, "device": f"gpu-{gpu}"},
            "taint": {"key": TAINT_KEY, "value": label_value(uuid or f"gpu-{gpu}"), "effect": effect},
        },
    }


def condition_patch(status: bool, reason: str, message: str) -> str:
    """The strategic merge patch of the node's status that sets the GpuHealthy condition."""
    cond = {"type": CONDITION, "status": "True" if status else "False", "reason": reason, "message": message}
    return json.dumps({"status": {"conditions": [cond]}}, separators=(",", ":"))


def condition_step(node: str, reason: str) -> Step:
    """GpuHealthy=False with the reason (undo: GpuHealthy=True, ProofPassed)."""
    up = _patch_status(node, condition_patch(True, REASON_PROVEN, f"fleettool: proof passed ({reason})"))
    down = _patch_status(node, condition_patch(False, REASON_DOWN, f"fleettool remediate: {reason}"))
    return Step(f"condition {CONDITION}=False", down, where="here", timeout_s=60, undo=_named(up, "True"))


def _patch_status(node: str, patch: str) -> tuple[str, ...]:
    return ("kubectl", "patch", "node", node, "--subresource=status", "--type=strategic", "-p", patch)


def _named(argv: tuple[str, ...], status: str) -> Step:
    return Step(f"condition {CONDITION}={status}", argv, where="here", timeout_s=60)


def take_out_gpu_steps(
    node: str, gpu: int, uuid: str | None, reason: str, *, dra: bool, evict: bool = False
) -> tuple[Step, ...]:
    """GPU `gpu` of `node` out of scheduling: a DeviceTaintRule (dra; NoExecute when `evict`), else a node
    taint and the GpuHealthy condition. Each step carries its undo."""
    validate_node(node)
    if gpu < 0:
        raise ValueError(f"invalid GPU index {gpu}")
    what = f"GPU {gpu} of {node}" + (f" ({uuid})" if uuid else "")
    if dra:
        rule = device_taint_rule(node, gpu, uuid, reason, effect="NoExecute" if evict else "NoSchedule")
        name = rule["metadata"]["name"]
        undo = Step(
            f"delete devicetaintrule {name}",
            ("kubectl", "delete", "devicetaintrule", name, "--ignore-not-found"),
            where="here",
            timeout_s=60,
        )
        return (
            Step(
                f"devicetaintrule {name}",
                ("kubectl", "apply", "-f", "-"),
                where="here",
                takes_out=what,
                stdin=json.dumps(rule, indent=1),
                timeout_s=60,
                undo=undo,
            ),
        )
    taint = f"{TAINT_KEY}={gpu}:NoSchedule"
    return (
        Step(
            f"taint {taint}",
            ("kubectl", "taint", "nodes", node, taint, "--overwrite"),
            where="here",
            takes_out=f"{what}: the node takes no new pod",
            timeout_s=60,
            undo=Step(
                f"untaint {taint}",
                ("kubectl", "taint", "nodes", node, taint + "-"),
                where="here",
                timeout_s=60,
            ),
        ),
        condition_step(node, reason),
    )


def take_out_node_steps(node: str, reason: str) -> tuple[Step, ...]:
    """The whole node out of scheduling: cordon and the GpuHealthy condition (undo: uncordon, condition True)."""
    validate_node(node)
    return (
        Step(
            "cordon",
            ("kubectl", "cordon", node),
            where="here",
            takes_out=f"node {node}",
            timeout_s=60,
            undo=Step("uncordon", ("kubectl", "uncordon", node), where="here", timeout_s=60),
        ),
        condition_step(node, reason),
    )


def reboot_job(node: str, reason: str, *, image: str, namespace: str) -> dict[str, Any]:
    """A Job pinned to `node` that reboots it from the host's namespaces (privileged, hostPID)."""
    validate_node(node)
    labels = {"app.kubernetes.io/name": "fleettool-reboot", "fleettool.io/node": label_value(node)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            # a new name per run (created, never applied): an earlier reboot's Job is never taken for this one
            "generateName": "fleettool-reboot-",
            "namespace": namespace,
            "labels": labels,
            "annotations": {"fleettool.io/reason": reason},
        },
        "spec": {
            "backoffLimit": 0,  # a reboot is tried once; the loop judges it by the node's boot id
            "ttlSecondsAfterFinished": 3600,
            "activeDeadlineSeconds": 600,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeName": node,  # bypasses the scheduler: runs on the cordoned node
                    "hostPID": True,  # nsenter -t 1: the host's init
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "tolerations": [{"operator": "Exists"}],  # every taint, ours and NoExecute ones included
                    "priorityClassName": "system-node-critical",
                    "containers": [
                        {
                            "name": "reboot",
                            "image": image,
                            "command": list(REBOOT_COMMAND),
                            "securityContext": {"privileged": True, "runAsUser": 0},
                            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                        }
                    ],
                },
            },
        },
    }


def reboot_steps(node: str, reason: str, *, image: str, namespace: str) -> tuple[Step, ...]:
    """Reboot `node` with a Job in `namespace` (the agent's, which admits privileged pods)."""
    job = reboot_job(node, reason, image=image, namespace=namespace)
    return (
        Step(
            "reboot job",
            ("kubectl", "create", "-f", "-"),
            where="here",
            takes_out=f"node {node} (reboot)",
            stdin=json.dumps(job, indent=1),
            timeout_s=60,
        ),
    )
