"""The proof that closes a rung: four parts, each judged from what the node says now, never from a command's exit
code alone, each with the figures the audit trail keeps.

1. recovery-action (proof_smi.py): `nvidia-smi -q -i N` lists the GPU and its recovery action is None (a driver
   before R565 prints no such line: unjudged, said so); a GPU that is not listed is lost.
2. xid-quiet (proof_xid.py): no new XID on the GPU (any GPU for the whole node) from `since` for `quiet_s`, read
   from the node's kernel log with fleettool's own parser and from the store's events; waits out the window,
   fails at the first XID.
3. burnin (proof_burnin.py): `fleettool burnin --gpus N --tests gemm,hbm[,allreduce]` on the node, stored so the
   lifecycle's `return` sees it; every GEMM and HBM row PASS (WARN is no pass: floors are strict).
4. nvlink (proof_smi.py): `nvidia-smi nvlink -s` counts the active links against the GPU's own count before the
   fault; where the whole node was taken out and it has peers, the burn-in's all-reduce (the NCCL loopback) PASS.

A lost GPU ends the proof at part 1 and a new XID at part 2: the later parts are recorded as not run (ok None),
and `Proof.passed` is False because the quiet window and the burn-in must pass.
"""

from __future__ import annotations

from fleettool.remediate.model import PROOF_PARTS, Proof, ProofPart
from fleettool.remediate.proof_burnin import burnin_part
from fleettool.remediate.proof_context import ProofContext, node_gpus
from fleettool.remediate.proof_smi import nvlink_part, recovery_action_part
from fleettool.remediate.proof_xid import xid_quiet_part

__all__ = ["ProofContext", "node_gpus", "prove"]


def _not_run(name: str, why: str) -> ProofPart:
    return ProofPart(name, None, f"not run: {why}")


def prove(ctx: ProofContext) -> Proof:
    """Judge the four parts (PROOF_PARTS, in order); see the module docstring."""
    parts: list[ProofPart] = [recovery_action_part(ctx)]
    if parts[0].ok is False and parts[0].figures.get("lost"):
        why = f"{parts[0].detail}"
        parts += [_not_run(n, why) for n in PROOF_PARTS[1:]]
        return Proof(tuple(parts))
    parts.append(xid_quiet_part(ctx))
    if parts[1].ok is False:
        parts.append(_not_run("burnin", "a new XID in the quiet window"))
        report = None
    else:
        part, report = burnin_part(ctx)
        parts.append(part)
    parts.append(nvlink_part(ctx, report))
    return Proof(tuple(parts))
