"""Run a burn-in on another node: over ssh, through Slurm (`srun -w NODE`), or as a Kubernetes Job pinned to
the node (`kubernetes.io/hostname`), optionally cordoning it first and uncordoning it after a pass. The remote
side runs `fleettool burnin --node NODE --json` and its JSON comes back into the local store.

Node names are validated (RFC 1123 host names) and never pasted into a local shell string: every command is an
argv list. ssh joins its arguments into a remote shell command, so each is quoted with shlex.quote as well.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from typing import Any

_NODE = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)


class DispatchError(RuntimeError):
    pass


class ToolMissing(DispatchError):
    """An external command (ssh, srun, kubectl, scontrol, dcgmi) is not installed: nothing was run."""

    def __init__(self, tool: str, needed_by: str) -> None:
        super().__init__(f"{tool}: not found on PATH (needed by {needed_by})")
        self.tool = tool
        self.needed_by = needed_by


def require_tool(tool: str, needed_by: str) -> str:
    """The path of `tool`, or ToolMissing naming it and what needs it."""
    found = shutil.which(tool)
    if found is None:
        raise ToolMissing(tool, needed_by)
    return found


def validate_node(name: str) -> str:
    if not isinstance(name, str) or not _NODE.fullmatch(name):
        raise ValueError(f"invalid node name {name!r}: expected a host name (letters, digits, '-', '.')")
    return name


def remote_args(node: str, passthrough: list[str]) -> list[str]:
    return ["fleettool", "burnin", "--node", node, "--json", "--no-store", *passthrough]


def ssh_argv(node: str, passthrough: list[str], ssh: str = "ssh") -> list[str]:
    validate_node(node)
    remote = " ".join(shlex.quote(a) for a in remote_args(node, passthrough))
    return [ssh, "-o", "BatchMode=yes", "--", node, remote]


def slurm_argv(node: str, passthrough: list[str], partition: str | None = None) -> list[str]:
    validate_node(node)
    argv = ["srun", "-w", node, "-N", "1", "-n", "1", "--exclusive"]
    if partition:
        argv += ["-p", partition]
    return [*argv, *remote_args(node, passthrough)]


def k8s_job(
    node: str,
    passthrough: list[str],
    *,
    image: str,
    namespace: str = "fleettool",
    gpus: int = 8,
    name: str | None = None,
) -> dict[str, Any]:
    """A Job pinned to the node, requesting its GPUs, running the burn-in once."""
    validate_node(node)
    jname = name or f"fleettool-burnin-{node.replace('.', '-')}"[:63].rstrip("-")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": jname,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "fleettool-burnin", "fleettool.io/node": node[:63]},
        },
        "spec": {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": 3600,
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "fleettool-burnin"}},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    # the node is cordoned during a burn-in: tolerate that taint
                    "tolerations": [
                        {
                            "key": "node.kubernetes.io/unschedulable",
                            "operator": "Exists",
                            "effect": "NoSchedule",
                        },
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                    ],
                    "containers": [
                        {
                            "name": "burnin",
                            "image": image,
                            "args": remote_args(node, passthrough)[1:],
                            "command": ["fleettool"],
                            "resources": {"limits": {"nvidia.com/gpu": gpus}},
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "runAsNonRoot": True,
                                "runAsUser": 65532,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                        }
                    ],
                    "volumes": [{"name": "tmp", "emptyDir": {}}],
                },
            },
        },
    }


def run_argv(argv: list[str], timeout_s: float) -> dict[str, Any]:
    """Run a remote burn-in command and return its JSON report."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError as e:
        raise ToolMissing(argv[0], "the remote burn-in") from e
    except subprocess.TimeoutExpired as e:
        raise DispatchError(f"{argv[0]} timed out after {timeout_s:g}s") from e
    try:
        return dict(json.loads(p.stdout))
    except json.JSONDecodeError:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
        raise DispatchError(
            f"{' '.join(argv[:3])}...: exit {p.returncode}, no JSON report ({tail[0]})"
        ) from None


def run_k8s(job: dict[str, Any], timeout_s: float, kubectl: str = "kubectl") -> dict[str, Any]:
    ns = job["metadata"]["namespace"]
    name = job["metadata"]["name"]
    subprocess.run(
        [kubectl, "apply", "-f", "-"], input=json.dumps(job), text=True, check=True, capture_output=True
    )
    subprocess.run(
        [
            kubectl,
            "-n",
            ns,
            "wait",
            "--for=condition=complete",
            "--for=condition=failed",
            f"job/{name}",
            f"--timeout={int(timeout_s)}s",
        ],
        capture_output=True,
        text=True,
    )
    return run_argv([kubectl, "-n", ns, "logs", f"job/{name}"], 120)


def cordon(node: str, on: bool, kubectl: str = "kubectl") -> None:
    validate_node(node)
    subprocess.run(
        [kubectl, "cordon" if on else "uncordon", node], check=True, capture_output=True, text=True
    )
