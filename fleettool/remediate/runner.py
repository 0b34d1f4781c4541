"""Run a command on the node a plan is for, or here, with a bound; keep what it printed for the audit trail.

On the node: here itself (via local), over ssh (via ssh and slurm: a drained Slurm node runs no new srun), or with
`kubectl exec` in the fleettool agent's pod on the node (via k8s; the pod found by its label and spec.nodeName).
Every command is an argv list; ssh joins its arguments into a remote shell string, so each is quoted with
shlex.quote. A tool that is not installed is ToolMissing before anything runs; a command past its bound is
killed and reported as timed out (rc None), never waited on forever.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from dataclasses import dataclass

from fleettool.burnin.dispatch import require_tool, validate_node
from fleettool.remediate.model import Via

AGENT_LABEL = "app.kubernetes.io/name=fleettool-agent"
EXCERPT = 2000  # characters of output kept in the audit trail


@dataclass(frozen=True)
class RunResult:
    argv: tuple[str, ...]  # as run (with the transport's prefix)
    rc: int | None  # None: killed at its bound
    stdout: str
    stderr: str
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.rc is None

    def excerpt(self) -> str:
        """What it printed, stdout then stderr, cut to EXCERPT characters (the audit trail's copy)."""
        out = (self.stdout.strip() + ("\n" + self.stderr.strip() if self.stderr.strip() else "")).strip()
        return out if len(out) <= EXCERPT else out[: EXCERPT - 15] + " ...[cut]"


class NodeRunner:
    """Commands for one node through one via. `ssh`/`kubectl`: the executables (tests put stand-ins on PATH)."""

    def __init__(
        self,
        node: str,
        via: Via,
        *,
        ssh: str = "ssh",
        kubectl: str = "kubectl",
        namespace: str = "fleettool",
    ) -> None:
        self.node = validate_node(node)
        self.via = via
        self.ssh = ssh
        self.kubectl = kubectl
        self.namespace = namespace
        self._pod: str | None = None

    def node_argv(self, argv: list[str] | tuple[str, ...]) -> list[str]:
        """The argv that runs `argv` on the node through this via."""
        if self.via is Via.LOCAL:
            return list(argv)
        if self.via in (Via.SSH, Via.SLURM):
            return [self.ssh, "-o", "BatchMode=yes", "--", self.node, " ".join(shlex.quote(a) for a in argv)]
        return [self.kubectl, "exec", "-n", self.namespace, self.agent_pod(), "--", *argv]

    def agent_pod(self) -> str:
        """The agent pod on the node (kubectl get pods -l ... --field-selector spec.nodeName=NODE)."""
        if self._pod is None:
            r = self.here(
                [
                    self.kubectl, "get", "pods", "-n", self.namespace, "-l", AGENT_LABEL,
                    "--field-selector", f"spec.nodeName={self.node}",
                    "-o", "jsonpath={.items[0].metadata.name}",
                ],
                timeout_s=60,
            )  # fmt: skip
            name = r.stdout.strip()
            if r.rc != 0 or not name:
                raise RuntimeError(
                    f"no fleettool agent pod on {self.node} in namespace {self.namespace} "
                    f"({(r.stderr or r.stdout).strip()[:200] or 'none listed'})"
                )
            self._pod = name
        return self._pod

    def on_node(
        self, argv: list[str] | tuple[str, ...], *, timeout_s: float = 120, stdin: str | None = None
    ) -> RunResult:
        return self._run(self.node_argv(argv), timeout_s, stdin)

    def here(
        self, argv: list[str] | tuple[str, ...], *, timeout_s: float = 120, stdin: str | None = None
    ) -> RunResult:
        return self._run(list(argv), timeout_s, stdin)

    def _run(self, argv: list[str], timeout_s: float, stdin: str | None) -> RunResult:
        require_tool(argv[0], f"fleettool remediate --via {self.via} on {self.node}")
        t0 = time.monotonic()
        try:
            p = subprocess.run(
                argv,
                input=stdin,
                stdin=subprocess.DEVNULL if stdin is None else None,
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
            return RunResult(
                tuple(argv), None, out, err + f"\n(killed after {timeout_s:g} s)", time.monotonic() - t0
            )
        return RunResult(tuple(argv), p.returncode, p.stdout, p.stderr, time.monotonic() - t0)
