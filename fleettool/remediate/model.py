"""The words of remediation: the ladder's rungs, how commands reach a node, the steps of a plan, and the parts of
the proof that close a rung. Pure data: no I/O here."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

# NVML's recovery action -> the words nvidia-smi -q prints for it ("GPU Recovery Action : None"): the NVML event
# source's table, re-exported for ladder.py and plan.py
from fleettool.sources.nvml_events import RECOVERY_ACTIONS as RECOVERY_ACTIONS


class Rung(StrEnum):
    """The ladder, lowest first: each rung takes out more than the one below, and is tried when it fails."""

    RESET = "reset"  # one GPU: out of scheduling, its work drained, persistence off, nvidia-smi -r -i N
    REBOOT = (
        "reboot"  # the node: scontrol reboot ASAP nextstate=DOWN, or a reboot Job / the cluster's operator
    )
    POWER_CYCLE = "power-cycle"  # the node through its BMC: ipmitool chassis power cycle, or Redfish Reset
    RMA = "rma"  # nothing more to try: a bundle of the evidence for the vendor; the node stays out


LADDER: tuple[Rung, ...] = (Rung.RESET, Rung.REBOOT, Rung.POWER_CYCLE, Rung.RMA)


def next_rung(rung: Rung) -> Rung | None:
    """The rung above `rung` (None above RMA)."""
    i = LADDER.index(rung)
    return LADDER[i + 1] if i + 1 < len(LADDER) else None


class Via(StrEnum):
    """How the plan reaches the node and its scheduler."""

    LOCAL = "local"  # node commands run here (this host is the node); no scheduler
    SSH = "ssh"  # node commands over ssh; no scheduler
    SLURM = (
        "slurm"  # scheduler Slurm (scontrol here); node commands over ssh (a drained node runs no new srun)
    )
    K8S = (
        "k8s"  # scheduler Kubernetes (kubectl here); node commands with kubectl exec in the agent's pod on it
    )


@dataclass(frozen=True)
class Step:
    """One command of a rung. where: 'node' (through the via's transport) or 'here' (a scheduler or BMC tool on
    this host). takes_out: what it takes out of service ('' when nothing). stdin: text fed to it (a manifest for
    `kubectl apply -f -`). undo: the step that puts back what this one took out (run when the rung is proven).
    ok_rc: the exit codes that mean it worked."""

    name: str
    argv: tuple[str, ...]
    where: str = "node"
    takes_out: str = ""
    stdin: str | None = None
    timeout_s: float = 120.0
    ok_rc: tuple[int, ...] = (0,)
    undo: Step | None = None


# the proof's parts, in the order they are judged
PROOF_PARTS = ("recovery-action", "xid-quiet", "burnin", "nvlink")


@dataclass(frozen=True)
class ProofPart:
    """One part of a proof. ok: True passed, False failed, None did not apply (detail says why: no NVLink on a
    PCIe card). figures: what was measured, for the audit trail (counts, times, TFLOP/s, link counts)."""

    name: str
    ok: bool | None
    detail: str
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Proof:
    parts: tuple[ProofPart, ...]

    @property
    def passed(self) -> bool:
        """No part failed, and the XID quiet window and the burn-in passed (they always apply): a proof where
        nothing could be judged never passes. The recovery action may be None only where the driver does not
        report one (before R565: nvidia-smi -q has no "GPU Recovery Action"), NVLink only where the GPU has none."""
        by = {p.name: p for p in self.parts}
        must = ("xid-quiet", "burnin")
        return all(p.ok is not False for p in self.parts) and all(
            by.get(n) is not None and by[n].ok is True for n in must
        )

    def failed(self) -> list[ProofPart]:
        return [p for p in self.parts if p.ok is False]


@dataclass(frozen=True)
class Plan:
    """What `remediate` will do: the rung, why it was chosen (a sentence naming the alerts and recovery action),
    its steps, what they take out of service, and the proof that closes it."""

    node: str
    gpu: int | None
    rung: Rung
    via: Via
    why: str
    steps: tuple[Step, ...]
    takes_out: tuple[str, ...]
    proof: tuple[str, ...] = PROOF_PARTS
    incident_id: str | None = None
    alert_ids: tuple[str, ...] = ()
    recovery_action: int | None = None
