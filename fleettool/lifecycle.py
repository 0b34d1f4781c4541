"""Node lifecycle: healthy -> suspect -> cordoned -> in-repair -> burn-in -> healthy, or -> rma.

Only the transitions below are valid; each is recorded with who, when and why (node_audit). Side effects on the
scheduler are explicit: the caller passes what to run (kubectl cordon/uncordon, scontrol drain/resume) and the
commands are argv lists built from a validated node name, never a shell string.

A node goes back into service (to healthy from cordoned or burn-in) only with proof: a burn-in run whose every
row PASSed (SKIPPED rows aside), newer than the node was last taken out of service (cordoned, in repair, RMA).
Without one, `force` with a reason returns it anyway, and the audit trail says it was forced.
"""

from __future__ import annotations

import subprocess

from fleettool.burnin.dispatch import ToolMissing, require_tool, validate_node
from fleettool.store import Store
from fleettool.store.burnin import burnin_runs
from fleettool.store.nodes import (
    NodeState,
    Transition,
    node_audit,
    node_state,
    record_transition,
    taken_out_at,
)

STATES = ("healthy", "suspect", "cordoned", "in-repair", "burn-in", "rma")
TRANSITIONS: dict[str, set[str]] = {
    "healthy": {"suspect", "cordoned"},
    "suspect": {"healthy", "cordoned"},
    "cordoned": {"in-repair", "burn-in", "healthy", "rma"},
    "in-repair": {"burn-in", "rma"},
    "burn-in": {"healthy", "in-repair", "rma"},
    "rma": {"in-repair"},  # the replacement part is back: repair, then prove it
}
# what each target state means for the schedulers
K8S = {"cordoned": "cordon", "healthy": "uncordon"}
SLURM = {"cordoned": "drain", "in-repair": "drain", "rma": "drain", "healthy": "resume"}


class TransitionError(ValueError):
    pass


OUT_OF_SERVICE = ("cordoned", "in-repair", "burn-in", "rma")
TAKEN_OUT = ("cordoned", "in-repair", "rma")  # the moves a return must be proven after


def passing_burnin(store: Store, node: str) -> tuple[dict[str, object] | None, str]:
    """The newest PASS burn-in run of the node since it was last taken out of service, or None and why not."""
    since = taken_out_at(store, node, TAKEN_OUT)
    runs = burnin_runs(store, node, since)
    for run in runs:
        verdicts = set(run["verdicts"]) - {"SKIPPED"}  # type: ignore[arg-type]
        if verdicts == {"PASS"}:
            return run, ""
    after = f" since it was taken out of service ({since:%Y-%m-%d %H:%M:%S} UTC)" if since else ""
    if not runs:
        return None, f"{node} has no burn-in{after}"
    last = runs[0]
    got = "/".join(str(v) for v in last["verdicts"])  # type: ignore[union-attr]
    return None, f"{node} has no PASS burn-in{after}: the last, {last['run_id']}, was {got}"


__all__ = ["STATES", "TRANSITIONS", "NodeState", "ToolMissing", "TransitionError", "transition"]

# which option asks for each tool (for the message when it is missing)
OPTION = {"kubectl": "--k8s", "scontrol": "--slurm"}


def current(store: Store, node: str) -> NodeState:
    """The node's lifecycle state (healthy when it never moved)."""
    return node_state(store, node) or NodeState(node, "healthy", None, None, None)


def _purpose(argv: list[str], node: str) -> str:
    """'--slurm to drain gpu-17': the option that asked for a command, and what it does."""
    verb = next((a.split("=", 1)[1] for a in argv if a.startswith("state=")), argv[1])
    return f"{OPTION.get(argv[0], argv[0])} to {verb} {node}"


def side_effect_argv(node: str, to: str, *, k8s: bool, slurm: bool, reason: str) -> list[list[str]]:
    validate_node(node)
    cmds: list[list[str]] = []
    if k8s and to in K8S:
        cmds.append(["kubectl", K8S[to], node])
    if slurm and to in SLURM:
        if SLURM[to] == "drain":
            cmds.append(
                ["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason or 'fleettool'}"]
            )
        else:
            cmds.append(["scontrol", "update", f"nodename={node}", "state=resume"])
    return cmds


def transition(
    store: Store,
    node: str,
    to: str,
    *,
    who: str,
    reason: str,
    now: float,
    k8s: bool = False,
    slurm: bool = False,
    run: bool = True,
    force: bool = False,
) -> NodeState:
    """Move a node to `to` if the lifecycle allows it; run the asked-for side effects first (a failed cordon
    leaves the state unchanged), then record the transition. Back into service needs a PASS burn-in since the
    node was taken out, or `force` with a reason (recorded as forced)."""
    validate_node(node)
    if to not in STATES:
        raise TransitionError(f"unknown state {to!r} (one of {', '.join(STATES)})")
    cur = current(store, node)
    if to not in TRANSITIONS[cur.state]:
        allowed = ", ".join(sorted(TRANSITIONS[cur.state]))
        raise TransitionError(f"{node} is {cur.state}: it can go to {allowed}, not {to}")
    if to == "healthy" and cur.state in OUT_OF_SERVICE:
        proof, why = passing_burnin(store, node)
        if proof is not None:
            reason = (reason + " " if reason else "") + f"(burn-in {proof['run_id']} PASS)"
        elif not force:
            raise TransitionError(
                f"{why}; run `fleettool burnin --node {node}`, or return it with --force -m REASON"
            )
        elif not reason.strip():
            raise TransitionError(f"{why}: --force needs a reason (-m)")
        else:
            reason = f"forced without a PASS burn-in ({why}): {reason}"
    cmds = side_effect_argv(node, to, k8s=k8s, slurm=slurm, reason=reason)
    if run:  # every tool present before any runs: a missing scontrol must not leave kubectl's cordon alone
        for argv in cmds:
            require_tool(argv[0], f"{_purpose(argv, node)}; nothing was changed")
    done = []
    for argv in cmds:
        if run:
            try:
                p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            except subprocess.TimeoutExpired:
                raise TransitionError(
                    f"{' '.join(argv)} did not finish in 60 s; state left {cur.state}"
                ) from None
            except OSError as e:
                raise TransitionError(
                    f"{' '.join(argv)}: {e.strerror or e}; state left {cur.state}"
                ) from None
            if p.returncode != 0:
                raise TransitionError(
                    f"{' '.join(argv)} failed ({p.returncode}): {(p.stderr or p.stdout).strip()[:200]}"
                )
        done.append(" ".join(argv))
    return record_transition(store, Transition(now, node, cur.state, to, who, reason, "; ".join(done)))


def audit(store: Store, node: str) -> list[dict[str, object]]:
    """Every transition of the node, oldest first."""
    return node_audit(store, node)
