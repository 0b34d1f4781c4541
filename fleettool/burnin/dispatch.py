"""Run a burn-in on another node: over ssh, through Slurm (`srun -w NODE`), or as a Kubernetes Job pinned to
the node (`kubernetes.io/hostname`), optionally cordoning it first and uncordoning it after a pass. The remote
side runs `fleettool burnin --node NODE --json` and its JSON comes back into the local store.

Node names are validated (RFC 1123 host names) and never pasted into a local shell string: every command is an
argv list. ssh joins its arguments into a remote shell command, so each is quoted with shlex.quote as well.
"""

from __future__ import annotations

import json
import re
import secrets
import shlex
import shutil
import subprocess
import time
from typing import Any

from fleettool.burnin.report import NotAReport, from_dict

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
    namespace: str = "fleettool-burnin",
    gpus: int = 8,
    name: str | None = None,
) -> dict[str, Any]:
    """A Job pinned to the node, requesting its GPUs, running the burn-in once. Its name is new for every run
    (job_name): a Job of an earlier run, kept an hour for its logs, is never read as this run's result.

    The pod meets Pod Security `restricted`, so it runs in a namespace that enforces it (deploy/'s
    fleettool-burnin): whoever may create Jobs there cannot make a privileged pod, i.e. root on a node. The GPUs
    come from the device plugin (the nvidia.com/gpu resource, which restricted allows); the burn-in needs no
    capability, no host path and no API token."""
    validate_node(node)
    jname = name or job_name(node)
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
                    "automountServiceAccountToken": False,  # the burn-in calls no Kubernetes API
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 65532,
                        "runAsGroup": 65532,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
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


def job_name(node: str, now: float | None = None) -> str:
    """fleettool-burnin-<node>-<unix time, hex><4 random hex>: unique per run, at most 63 characters (a DNS
    label), sortable by start within a node."""
    stamp = f"{int(time.time() if now is None else now):08x}{secrets.token_hex(2)}"
    base = f"fleettool-burnin-{node.lower().replace('.', '-')}"[: 63 - len(stamp) - 1].rstrip("-")
    return f"{base}-{stamp}"


def job_outcome(status: dict[str, Any]) -> str | None:
    """'Complete' or 'Failed' once a Job has finished (its conditions, else its pod counts), None while it runs."""
    for c in status.get("conditions") or []:
        if c.get("type") in ("Complete", "Failed") and str(c.get("status")) == "True":
            return str(c["type"])
    if status.get("succeeded"):
        return "Complete"
    if status.get("failed"):
        return "Failed"
    return None


def run_argv(argv: list[str], timeout_s: float) -> dict[str, Any]:
    """Run a remote burn-in command and return its JSON report; DispatchError when it gives none, or JSON that is
    not a burn-in report (report.from_dict says what is wrong where)."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError as e:
        raise ToolMissing(argv[0], "the remote burn-in") from e
    except subprocess.TimeoutExpired as e:
        raise DispatchError(f"{argv[0]} timed out after {timeout_s:g}s") from e
    try:
        doc = json.loads(p.stdout)
    except json.JSONDecodeError:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
        raise DispatchError(
            f"{' '.join(argv[:3])}...: exit {p.returncode}, no JSON report ({tail[0]})"
        ) from None
    try:  # its shape checked here, so a wrong one is this error (no verdict), never a crash storing it
        from_dict(doc)
    except NotAReport as e:
        raise DispatchError(
            f"{' '.join(argv[:3])}...: exit {p.returncode}, its JSON is not a burn-in report: {e}"
        ) from None
    return dict(doc)


def run_k8s(
    job: dict[str, Any], timeout_s: float, kubectl: str = "kubectl", poll_s: float = 2.0
) -> dict[str, Any]:
    """Create the Job (never apply: a name taken is an error, not an old run's result), poll it until it has
    finished, then read the burn-in's JSON from its logs. A burn-in that FAILs exits 1 and its Job is Failed:
    its report is read all the same; a Job with no report, or still running at the timeout, is a DispatchError
    naming it."""
    ns = job["metadata"]["namespace"]
    name = job["metadata"]["name"]
    made = subprocess.run(
        [kubectl, "create", "-f", "-"], input=json.dumps(job), text=True, capture_output=True
    )
    if made.returncode != 0:
        why = (made.stderr or made.stdout).strip().splitlines()[-1:] or [f"exit {made.returncode}"]
        raise DispatchError(f"kubectl create job/{name} in {ns}: {why[0]}")
    deadline = time.monotonic() + timeout_s
    outcome = None
    while outcome is None:
        got = subprocess.run(
            [kubectl, "-n", ns, "get", f"job/{name}", "-o", "json"], capture_output=True, text=True
        )
        if got.returncode == 0:
            try:
                outcome = job_outcome(dict(json.loads(got.stdout).get("status") or {}))
            except json.JSONDecodeError:
                outcome = None
        if outcome is None:
            if time.monotonic() >= deadline:
                raise DispatchError(
                    f"job/{name} in {ns} has not finished after {timeout_s:g}s "
                    f"(kubectl -n {ns} describe job/{name}); it is left to run"
                )
            time.sleep(poll_s)
    return run_argv([kubectl, "-n", ns, "logs", f"job/{name}"], 120)


def cordon(node: str, on: bool, kubectl: str = "kubectl") -> None:
    validate_node(node)
    subprocess.run(
        [kubectl, "cordon" if on else "uncordon", node], check=True, capture_output=True, text=True
    )
