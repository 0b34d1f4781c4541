"""The plan of one rung for one via: its steps (the scheduler's, from k8s.py / slurm.py / bmc.py, and the node's),
what each takes out of service, and the proof that will close it. Printing it runs nothing."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from fleettool.remediate import reset
from fleettool.remediate.model import PROOF_PARTS, RECOVERY_ACTIONS, Plan, Rung, Step, Via
from fleettool.remediate.runner import NodeRunner

PROOF_WORDS = {
    "recovery-action": "the GPU's recovery action is None (nvidia-smi -q)",
    "xid-quiet": "no new XID on the node for the quiet window after the rung",
    "burnin": "a per-GPU burn-in, GEMM and HBM, at the SKU's floors (all-reduce too when the node was out)",
    "nvlink": "the NVLink active-link count back to what it was before the fault",
}
# rungs that take the whole node out (and so wait for it to come back)
NODE_RUNGS = (Rung.REBOOT, Rung.POWER_CYCLE)
K8S_REBOOT_IMAGE = "fleettool"  # the agent's own image (deploy/kubernetes/agent-daemonset.yaml)


@dataclass(frozen=True)
class Options:
    """What the command line gave the plan."""

    bmc: str | None = None
    bmc_method: str = "ipmi"
    bmc_user: str | None = None
    bmc_netrc: str | None = None  # Redfish: curl's netrc (None: $FLEETTOOL_BMC_NETRC, else ~/.netrc)
    bmc_settle_s: float = 15.0  # Redfish without PowerCycle: the wait between ForceOff and On
    k8s_image: str = K8S_REBOOT_IMAGE
    dra: bool | None = None  # None: ask the cluster (k8s.has_dra) when the plan is built


def what_failed(alerts: tuple[dict[str, Any], ...], recovery_action: int | None) -> str:
    """The words of a drain reason or taint: the worst alert's rule and GPU, else the recovery action."""
    if alerts:
        return str(alerts[0]["rule"])
    if recovery_action is not None:
        return f"recovery action {RECOVERY_ACTIONS.get(recovery_action, recovery_action)}"
    return "fleettool remediate"


def reason_for(via: Via, what: str, gpu: int | None, incident_id: str | None) -> str:
    if via is Via.SLURM:
        from fleettool.remediate.slurm import drain_reason

        return drain_reason(what, gpu, incident_id)
    return (
        f"{what}"
        + (f" GPU {gpu}" if gpu is not None else "")
        + (f" incident {incident_id}" if incident_id else "")
    )


def take_out_steps(
    rung: Rung, via: Via, node: str, gpu: int | None, uuid: str | None, reason: str, runner: NodeRunner,
    opts: Options,
) -> tuple[Step, ...]:  # fmt: skip
    """The scheduler steps that take the GPU (reset) or the node (reboot, power-cycle) out, each with its undo."""
    if via is Via.SLURM:
        from fleettool.remediate.slurm import drain_step

        return (drain_step(node, reason),)
    if via is Via.K8S:
        import fleettool.remediate.k8s as k8s

        if rung is Rung.RESET and gpu is not None:
            dra = opts.dra if opts.dra is not None else k8s.has_dra(runner)
            return tuple(k8s.take_out_gpu_steps(node, gpu, uuid, reason, dra=dra))
        return tuple(k8s.take_out_node_steps(node, reason))
    return ()


def action_steps(
    rung: Rung, via: Via, node: str, gpu: int | None, reason: str, runner: NodeRunner, opts: Options
) -> tuple[Step, ...]:
    """The rung's own steps (after the take-out)."""
    if rung is Rung.RESET:
        return reset.plan_steps(gpu) if gpu is not None else ()
    if rung is Rung.REBOOT:
        if via is Via.SLURM:
            from fleettool.remediate.slurm import reboot_step

            return (reboot_step(node, reason),)
        if via is Via.K8S:
            import fleettool.remediate.k8s as k8s

            return tuple(k8s.reboot_steps(node, reason, image=opts.k8s_image, namespace=runner.namespace))
        # ssh drops the connection as the node goes down: 255 is ssh's own exit then
        return (Step("reboot the node", ("systemctl", "reboot"), takes_out=f"node {node}", ok_rc=(0, 255)),)
    if rung is Rung.POWER_CYCLE:
        if not opts.bmc:
            return ()
        from fleettool.remediate.bmc import REDFISH_PLANNED, power_cycle_step

        step = power_cycle_step(
            node, opts.bmc, method=opts.bmc_method, user=opts.bmc_user, netrc=opts.bmc_netrc
        )
        if opts.bmc_method == "redfish":  # nothing asked of the BMC here: the printed plan runs nothing
            step = replace(
                step, name=f"{REDFISH_PLANNED}: {node} (Redfish ComputerSystem.Reset, BMC {opts.bmc})"
            )
        return (step,)
    return ()


def bmc_steps(step: Step, node: str, runner: NodeRunner, opts: Options) -> tuple[tuple[Step, ...], str]:
    """The power-cycle rung's BMC step as run, and what was read for it (the audit trail's line). ipmitool: the
    planned step. Redfish: the system's Reset action read from the BMC now (a GET: its target and allowed
    ResetTypes), then PowerCycle, or ForceOff, a settle, On (bmc.redfish_power_cycle_steps). BmcError: the GET
    failed, or the BMC allows no power cycle (one line naming the BMC and the values it allows)."""
    if opts.bmc_method != "redfish" or not opts.bmc:
        return (step,), ""
    from fleettool.remediate import bmc

    info = bmc.redfish_reset_info(runner, opts.bmc, netrc=opts.bmc_netrc)
    read = f"BMC {opts.bmc}: Reset target {info.target}; ResetType@Redfish.AllowableValues " + (
        ", ".join(info.allowable) if info.allowable is not None else "not listed"
    )
    return bmc.redfish_power_cycle_steps(
        node, opts.bmc, info, netrc=opts.bmc_netrc, settle_s=opts.bmc_settle_s
    ), read


def can_run(rung: Rung, via: Via, opts: Options) -> str | None:
    """Why this rung cannot run as asked (None: it can)."""
    if rung in NODE_RUNGS and via is Via.LOCAL:
        return (
            f"the {rung} rung cannot be driven from the node itself (--via local): run `fleettool remediate` "
            "from another host with --via ssh, slurm or k8s"
        )
    if rung is Rung.POWER_CYCLE and not opts.bmc:
        return "the power-cycle rung needs the node's BMC: --bmc HOST [--bmc-method ipmi|redfish]"
    return None


def build(
    node: str,
    gpu: int | None,
    rung: Rung,
    via: Via,
    why: str,
    runner: NodeRunner,
    *,
    opts: Options,
    alerts: tuple[dict[str, Any], ...] = (),
    incident_id: str | None = None,
    recovery_action: int | None = None,
    uuid: str | None = None,
) -> Plan:
    what = what_failed(alerts, recovery_action)
    reason = reason_for(via, what, gpu, incident_id)
    steps: tuple[Step, ...] = ()
    if rung is not Rung.RMA:
        steps = take_out_steps(rung, via, node, gpu, uuid, reason, runner, opts) + action_steps(
            rung, via, node, gpu, reason, runner, opts
        )
    takes_out = tuple(dict.fromkeys(s.takes_out for s in steps if s.takes_out))
    if rung is Rung.RMA:
        takes_out = (f"node {node} until the part is replaced",)
    return Plan(
        node=node,
        gpu=gpu,
        rung=rung,
        via=via,
        why=why,
        steps=steps,
        takes_out=takes_out,
        proof=() if rung is Rung.RMA else PROOF_PARTS,
        incident_id=incident_id,
        alert_ids=tuple(str(a["alert_id"]) for a in alerts),
        recovery_action=recovery_action,
    )


def for_rung(
    plan: Plan, rung: Rung, runner: NodeRunner, opts: Options, alerts: tuple[Any, ...], uuid: str | None
) -> Plan:
    """The same episode's plan for a higher rung."""
    return replace(
        build(
            plan.node, plan.gpu, rung, plan.via, plan.why, runner, opts=opts, alerts=alerts,
            incident_id=plan.incident_id, recovery_action=plan.recovery_action, uuid=uuid,
        ),
        why=plan.why + f"; climbed to {rung}",
    )  # fmt: skip


def to_dict(plan: Plan, opts: Options | None = None) -> dict[str, Any]:
    def step(s: Step) -> dict[str, Any]:
        return {
            "name": s.name,
            "argv": list(s.argv),
            "where": s.where,
            "takes_out": s.takes_out,
            "undo": step(s.undo) if s.undo is not None else None,
        }

    blocked = can_run(plan.rung, plan.via, opts or Options())
    return {
        "node": plan.node,
        "gpu": plan.gpu,
        "rung": str(plan.rung),
        "via": str(plan.via),
        "why": plan.why,
        "incident_id": plan.incident_id,
        "alert_ids": list(plan.alert_ids),
        "recovery_action": plan.recovery_action,
        "steps": [step(s) for s in plan.steps],
        "takes_out": list(plan.takes_out),
        "proof": [{"part": p, "checks": PROOF_WORDS[p]} for p in plan.proof],
        "blocked": blocked,
    }


def render(plan: Plan, opts: Options | None = None) -> str:
    lines = [
        f"remediate {plan.node}" + (f" GPU {plan.gpu}" if plan.gpu is not None else "")
        + f": rung {plan.rung}, via {plan.via}",
        f"  why: {plan.why}",
    ]  # fmt: skip
    if plan.incident_id:
        lines.append(f"  incident: {plan.incident_id}")
    blocked = can_run(plan.rung, plan.via, opts or Options())
    if blocked:
        lines.append(f"  cannot run: {blocked}")
    lines.append("  steps:")
    for i, s in enumerate(plan.steps, 1):
        where = "here" if s.where == "here" else "on the node"
        out = f"  [takes out: {s.takes_out}]" if s.takes_out else ""
        lines.append(f"    {i}. {s.name} ({where}): {' '.join(s.argv)}{out}")
    if plan.rung is Rung.RMA:
        lines.append(
            f"    1. lifecycle {plan.node} -> rma; the evidence bundle: fleettool node {plan.node} rma --bundle FILE"
        )
    undo = [s.undo for s in plan.steps if s.undo is not None]
    if undo:
        lines.append("  put back only when the proof passes:")
        lines.extend(f"    - {u.name}: {' '.join(u.argv)}" for u in undo)
    lines.append("  takes out of service: " + ("; ".join(plan.takes_out) or "nothing"))
    if plan.proof:
        lines.append("  proof that closes it (every part recorded with its figures):")
        lines.extend(f"    - {p}: {PROOF_WORDS[p]}" for p in plan.proof)
    lines.append("  on a failed step or proof: the next rung (reset -> reboot -> power-cycle -> rma)")
    return "\n".join(lines)
