"""The Slurm steps of remediation: drain a node with a reason in Soperator's style that carries the incident id,
resume it, reboot it through slurmctld (`scontrol reboot ASAP nextstate=DOWN`), and read its state back.

The reason. Soperator (nebius/soperator) reads a drain reason by its bracketed prefix: `[hardware_problem]` is
"reserved for tooling outside the operator" and makes it treat the node as unhealthy (internal/consts/slurm.go,
SlurmHardwareReasonHC); it matches prefixes by substring, so the details must hold no other prefix and no
"Kill task failed"; `sinfo -R` shows only the first 20 characters. So: `[hardware_problem] XID 79 GPU 3 incident
inc-...`, short, one line, no '=' and no brackets in the details, cut to REASON_MAX characters with the incident id
kept whole.

Why nextstate=DOWN and not RESUME: with RESUME slurmctld resumes the node as soon as slurmd registers after the
boot ("the node's reason and DRAIN state will be cleared", scontrol(1)), before any proof ran, so jobs could land on
a GPU that is still broken. With DOWN "the node will remain in a down state after rebooting" (reason + " : reboot
complete"), and only the proof's pass resumes it (the step's undo).

What slurmctld does with the reboot (seen on a one-node Slurm 22.05, tests/test_remediate_slurm.py): the node
shows IDLE+DRAIN+REBOOT_REQUESTED with NextState=DOWN, then DOWN+DRAIN+REBOOT_ISSUED once slurmd ran
RebootProgram (reason + " : reboot issued"); it comes back only when slurmd registers with a boot time after the
request (a slurmd restart without a reboot does not count); past ResumeTimeout it is DOWN with "reboot timed out".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fleettool.burnin.dispatch import validate_node
from fleettool.remediate.model import Step
from fleettool.remediate.runner import NodeRunner

PREFIX = "[hardware_problem]"  # Soperator's SlurmHardwareReasonHC
REASON_MAX = 120  # characters: short enough for sinfo/exporter labels, long enough for the incident id
# Soperator's prefixes and Kill-task reason: none may appear in the details (it matches by substring)
_RESERVED = re.compile(
    r"\[(?:user|node|hardware|software)_problem\]|\[compute_maintenance\]|kill task failed", re.I
)


def _clean(text: str) -> str:
    """One line, no '=' (scontrol's key=value), no brackets, none of Soperator's prefixes."""
    text = _RESERVED.sub(" ", text)
    text = re.sub(r"[=\[\]\r\n\t\"']", " ", text)
    return " ".join(text.split())


def drain_reason(what: str, gpu: int | None, incident_id: str | None) -> str:
    """`[hardware_problem] XID 79 GPU 3 incident inc-...`: what failed, the GPU, the incident; cut to REASON_MAX
    characters by shortening `what`, never the incident id."""
    tail = (f" GPU {gpu}" if gpu is not None else "") + (
        f" incident {_clean(incident_id)}" if incident_id else ""
    )
    room = REASON_MAX - len(PREFIX) - 1 - len(tail)
    body = _clean(what) or "gpu fault"
    if len(body) > room:
        body = body[: max(room - 3, 1)].rstrip() + "..."
    return f"{PREFIX} {body}{tail}"[:REASON_MAX]


def resume_step(node: str) -> Step:
    """Back into scheduling: `scontrol update nodename=N state=resume`."""
    validate_node(node)
    return Step(
        name=f"resume {node} in Slurm",
        argv=("scontrol", "update", f"nodename={node}", "state=resume"),
        where="here",
        timeout_s=60,
    )


def drain_step(node: str, reason: str) -> Step:
    """Out of scheduling: `scontrol update nodename=N state=drain reason=...` (an argv: the reason needs no
    quoting). Running jobs finish; no new one starts. Its undo is resume_step."""
    validate_node(node)
    return Step(
        name=f"drain {node} in Slurm",
        argv=("scontrol", "update", f"nodename={node}", "state=drain", f"reason={_one_line(reason)}"),
        where="here",
        takes_out=f"node {node} (Slurm: no new jobs)",
        timeout_s=60,
        undo=resume_step(node),
    )


def reboot_step(node: str, reason: str) -> Step:
    """`scontrol reboot ASAP nextstate=DOWN reason=... N`: slurmctld drains the node, reboots it (RebootProgram
    through slurmd) once its jobs ended, and leaves it DOWN after the boot (module docstring: why not RESUME). The
    undo, run only when the proof passed, resumes it."""
    validate_node(node)
    return Step(
        name=f"reboot {node} through Slurm",
        argv=("scontrol", "reboot", "ASAP", "nextstate=DOWN", f"reason={_one_line(reason)}", node),
        where="here",
        takes_out=f"node {node} (Slurm: drained, rebooted once its jobs end, DOWN until the proof passes)",
        timeout_s=60,
        undo=resume_step(node),
    )


def _one_line(reason: str) -> str:
    return " ".join(reason.split())[:REASON_MAX] or "fleettool"


@dataclass(frozen=True)
class SlurmNode:
    """A node as `scontrol show node -o` prints it: State (IDLE+DRAIN+REBOOT_ISSUED), its base state and flags,
    Reason (without slurmctld's ' [user@time]' suffix), NextState ('' when none)."""

    state: str
    reason: str
    next_state: str

    @property
    def base(self) -> str:
        return self.state.split("+")[0]

    @property
    def flags(self) -> frozenset[str]:
        return frozenset(self.state.split("+")[1:])

    @property
    def reboot(self) -> str:
        """Where a reboot through Slurm stands: 'requested' (waiting for jobs), 'issued' (RebootProgram ran,
        waiting for slurmd to register after the boot), 'timed out' (past ResumeTimeout: DOWN), 'back' (in
        service: no DRAIN, not DOWN), or '' (none of these: drained, down for another reason)."""
        if "REBOOT_REQUESTED" in self.flags:
            return "requested"
        if "REBOOT_ISSUED" in self.flags:
            return "issued"
        if self.base == "DOWN" and "reboot timed out" in self.reason:
            return "timed out"
        if self.base in ("IDLE", "MIXED", "ALLOCATED") and not self.flags & {"DRAIN", "NOT_RESPONDING"}:
            return "back"
        return ""


def may_resume(node: SlurmNode, reason: str) -> bool:
    """Whether resuming puts back only what this remediation took out: the node is neither drained nor down, or
    its reason is still the one we set (slurmctld appends ' : reboot issued', ' : reboot complete'). A drain or
    a DOWN someone else set since (another reason) is theirs to lift: Soperator's rule too (undrain only when the
    current reason starts with the check's own)."""
    if "DRAIN" not in node.flags and node.base != "DOWN":
        return True
    return node.reason.startswith(_one_line(reason))


class SlurmError(RuntimeError):
    pass


_FIELD = re.compile(r"(?:^| )([A-Za-z][A-Za-z0-9_/:]*)=")


def parse_show_node(text: str) -> dict[str, str]:
    """`scontrol show node -o NODE`'s one line as {key: value}; a value runs to the next ' Key=' (Reason holds
    spaces)."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    marks = list(_FIELD.finditer(line))
    out: dict[str, str] = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(line)
        out[m.group(1)] = line[m.end() : end].strip()
    return out


def slurm_node(runner: NodeRunner, node: str) -> SlurmNode:
    """The node's Slurm state, read here with `scontrol show node -o N`; SlurmError when scontrol fails or
    prints no State."""
    validate_node(node)
    r = runner.here(["scontrol", "show", "node", "-o", node], timeout_s=30)
    fields = parse_show_node(r.stdout) if r.rc == 0 else {}
    if "State" not in fields:
        why = "timed out" if r.rc is None else (r.stderr or r.stdout).strip()[:200] or f"rc {r.rc}"
        raise SlurmError(f"scontrol show node -o {node}: {why}")
    reason = re.sub(r"\s*\[[^\]]*@[^\]]*\]$", "", fields.get("Reason", ""))
    nxt = fields.get("NextState", "")
    return SlurmNode(fields["State"], reason, "" if nxt in ("", "None", "(null)") else nxt)


def node_slurm_state(runner: NodeRunner, node: str) -> str:
    """The node's State as Slurm prints it (IDLE, IDLE+DRAIN, DOWN+DRAIN+REBOOT_ISSUED, ...)."""
    return slurm_node(runner, node).state
