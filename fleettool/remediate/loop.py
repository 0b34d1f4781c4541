"""The remediation loop: the blast guard, then the episode and its audit trail, each rung's steps, the wait for a
rebooted node, the proof, and on a pass the undo steps (untaint / resume) and the lifecycle back to healthy; on a
failed step or proof the next rung, never a return. Nothing is returned on an exit code alone."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fleettool.remediate import plan as plans
from fleettool.remediate import reset
from fleettool.remediate.ladder import Choice
from fleettool.remediate.model import Plan, Proof, Rung, Step, Via, next_rung
from fleettool.remediate.outcome import Outcome
from fleettool.remediate.runner import NodeRunner, RunResult
from fleettool.store import Store
from fleettool.store.remediations import (
    Remediation,
    log_remediation,
    new_remediation,
    update_remediation,
)

BOOT_ID = ("cat", "/proc/sys/kernel/random/boot_id")


@dataclass(frozen=True)
class LoopOptions:
    who: str
    quiet_s: float = 600.0
    drain_timeout_s: float = 600.0
    boot_timeout_s: float = 1200.0
    per_rack: int = 1
    fleet_pct: float = 5.0
    plan: plans.Options = field(default_factory=plans.Options)
    burnin_args: tuple[str, ...] = ()


def refusal(store: Store, node: str, opts: LoopOptions, now: float) -> Outcome | None:
    """The blast guard and the storm check (guard.py): a refusal names the reason and the open remediations."""
    from fleettool.remediate import guard

    r = guard.storm_refusal(store, node) or guard.check(
        store, node, limits=guard.GuardLimits(per_rack=opts.per_rack, fleet_pct=opts.fleet_pct), now=now
    )
    if r is None:
        return None
    return Outcome("refused", r.reason, open=tuple(r.open))  # the reason names the open episodes / incidents


def guard_line(store: Store, node: str, opts: LoopOptions) -> str:
    """The blast guard's scopes for the plan: 'rack r07: 0 of 1 open; fleet: 2 of 4 open (40 nodes)' + notes."""
    from fleettool.remediate import guard

    sc = guard.scopes(store, node, guard.GuardLimits(per_rack=opts.per_rack, fleet_pct=opts.fleet_pct))
    parts = []
    if sc["rack"] is not None:
        parts.append(f"rack {sc['rack']}: {sc['open']['rack']} open of {sc['caps']['rack']}")
    n = sc["fleet_nodes"]
    parts.append(
        f"fleet: {sc['open']['fleet']} open of {sc['caps']['fleet']} ({n} node{'' if n == 1 else 's'})"
    )
    return "; ".join(parts + list(sc["notes"]))


class Episode:
    """One remediation's run: the store row, the audit trail and the clock."""

    def __init__(
        self,
        store: Store,
        runner: NodeRunner,
        choice: Choice,
        opts: LoopOptions,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
    ) -> None:
        self.store, self.runner, self.choice, self.opts = store, runner, choice, opts
        self.clock, self.sleep = clock, sleep
        self.rid = ""
        self.undo: list[tuple[Step, Step]] = []  # (the step that took something out, its undo)
        self.ran: set[tuple[str, ...]] = set()
        self.took_node_out = False
        self.last_boot_read: RunResult | None = None

    def log(
        self, kind: str, name: str, rung: Rung | None, ok: bool | None, detail: str = "", **fig: Any
    ) -> None:
        log_remediation(
            self.store, self.rid, self.clock(), kind, name, rung=str(rung) if rung else None, ok=ok,
            detail=detail, figures=fig or None,
        )  # fmt: skip

    def step_result(self, rung: Rung, name: str, r: RunResult, ok: bool) -> None:
        self.log("step", name, rung, ok, r.excerpt(), argv=list(r.argv), rc=r.rc, seconds=round(r.seconds, 3))

    def run_step(self, rung: Rung, s: Step) -> RunResult:
        how = self.runner.here if s.where == "here" else self.runner.on_node
        r = how(s.argv, timeout_s=s.timeout_s, stdin=s.stdin)
        self.step_result(rung, s.name, r, r.rc in s.ok_rc)
        return r

    # ---- lifecycle ----
    def lifecycle(self, to: str, reason: str) -> None:
        from fleettool.lifecycle import TransitionError, current, transition

        node = self.runner.node
        cur = current(self.store, node).state
        if cur == to:
            return
        try:
            if to == "rma" and cur in ("healthy", "suspect"):
                transition(
                    self.store,
                    node,
                    "cordoned",
                    who=self.opts.who,
                    reason=reason,
                    now=self.clock(),
                    run=False,
                )
            transition(self.store, node, to, who=self.opts.who, reason=reason, now=self.clock(), run=False)
            self.log("note", f"lifecycle {cur} -> {to}", None, True, reason)
        except TransitionError as e:
            self.log("note", f"lifecycle {cur} -> {to}", None, False, str(e))

    # ---- boot ----
    def boot_id(self) -> str | None:
        r = self.runner.on_node(BOOT_ID, timeout_s=30)
        self.last_boot_read = r
        return r.stdout.strip() or None if r.rc == 0 else None

    def wait_boot(self, rung: Rung, before: str | None) -> bool:
        t0 = self.clock()
        deadline = t0 + self.opts.boot_timeout_s
        poll = min(10.0, max(0.05, self.opts.boot_timeout_s / 20))
        while True:
            now_id = self.boot_id()
            if now_id is not None and now_id != before:
                self.log(
                    "step", "node back (boot_id changed)", rung, True, f"{before} -> {now_id}",
                    boot_id_before=before, boot_id_after=now_id, waited_s=round(self.clock() - t0, 3),
                )  # fmt: skip
                return True
            if self.clock() >= deadline:
                self.log(
                    "step", "node back (boot_id changed)", rung, False,
                    f"boot_id still {now_id or 'unreadable'} after {self.opts.boot_timeout_s:g} s (--boot-timeout)",
                    boot_id_before=before, boot_id_after=now_id,
                )  # fmt: skip
                return False
            self.sleep(poll)

    # ---- one rung ----
    def run_rung(self, p: Plan) -> tuple[bool, str]:
        """Run the rung's steps; (ok, why not)."""
        rung, gpu = p.rung, p.gpu
        if rung in plans.NODE_RUNGS:
            self.took_node_out = True
            self.lifecycle("cordoned", f"remediation {self.rid}: {rung}")
        before = self.boot_id() if rung in plans.NODE_RUNGS else None
        if rung is Rung.REBOOT and before is None and p.via in (Via.SSH, Via.LOCAL):
            # the reboot itself goes over the same ssh: a node that cannot even print its boot id cannot be
            # rebooted this way (an unresolvable or dead host made ssh's 255 look like the reboot dropping it)
            r = self.last_boot_read
            self.log(
                "step", "read the boot id", rung, False, r.excerpt() if r else "", rc=r.rc if r else None
            )
            why = " ".join((r.excerpt() if r else "").split())[:200]
            return (
                False,
                f"{p.node} is unreachable over ssh ({why or 'its boot id could not be read'}): not rebooted",
            )
        acts = plans.action_steps(rung, p.via, p.node, gpu, "", self.runner, self.opts.plan)
        action_names = {s.name for s in acts}
        for s in p.steps:
            if rung is Rung.RESET and s.name in action_names:
                continue  # the reset's node steps run below, as one
            if s.argv in self.ran and s.undo is not None:
                continue  # already taken out by a lower rung
            todo: tuple[Step, ...] = (s,)
            if rung is Rung.POWER_CYCLE and s.name in action_names:  # Redfish: what the BMC allows, read now
                from fleettool.remediate.bmc import BmcError

                try:
                    todo, read = plans.bmc_steps(s, p.node, self.runner, self.opts.plan)
                except BmcError as e:
                    self.log("step", "read the BMC's reset types", rung, False, str(e))
                    return False, str(e)
                if read:
                    self.log("step", "read the BMC's reset types", rung, True, read)
            for t in todo:
                r = self.run_step(rung, t)
                if r.rc not in t.ok_rc:
                    return False, f"{t.name} failed (exit {r.rc}): {' '.join(r.excerpt().split())[:300]}"
                self.ran.add(t.argv)
                if t.undo is not None:
                    self.undo.append((t, t.undo))
        if rung is Rung.RESET:
            assert gpu is not None
            out = reset.run_reset(
                self.runner, gpu, drain_timeout_s=self.opts.drain_timeout_s, uuid=self.choice.uuid,
                record=lambda name, r: self.step_result(rung, name, r, r.rc == 0),
                clock=self.clock, sleep=self.sleep, poll_s=min(5.0, max(0.05, self.opts.drain_timeout_s / 10)),
            )  # fmt: skip
            if not out.ok:
                self.log("note", "reset failed", rung, False, out.detail)
            return out.ok, out.detail
        if rung in plans.NODE_RUNGS:
            if not self.wait_boot(rung, before):
                return (
                    False,
                    f"{p.node} did not come back within {self.opts.boot_timeout_s:g} s (--boot-timeout)",
                )
            if gpu is not None:
                listed, r = reset.gpu_listed(self.runner, gpu, self.choice.uuid)
                self.step_result(rung, f"GPU {gpu} listed after the {rung}", r, listed)
                if not listed:
                    return False, f"GPU {gpu} is still lost after the {rung} (nvidia-smi -L does not list it)"
        return True, ""

    def prove(self, rung: Rung, since: float) -> Proof:
        from fleettool.remediate.proof import ProofContext, prove

        ctx = ProofContext(
            runner=self.runner, store=self.store, node=self.runner.node, gpu=self.choice.gpu, since=since,
            before_fault=self.choice.paged_at, quiet_s=self.opts.quiet_s,
            whole_node=rung in plans.NODE_RUNGS, burnin_args=self.opts.burnin_args,
            clock=self.clock, sleep=self.sleep,
        )  # fmt: skip
        proof = prove(ctx)
        for part in proof.parts:
            self.log("proof", part.name, rung, part.ok, part.detail, **part.figures)
        return proof

    def drained_by_another(self, taker: Step, undo: Step) -> str | None:
        """Before a Slurm resume: why not, when the node is drained now for a reason that is not ours (someone
        drained it since: theirs to lift, Soperator's rule), or its state cannot be read."""
        if self.runner.via is not Via.SLURM or "state=resume" not in undo.argv:
            return None
        from fleettool.remediate.slurm import SlurmError, may_resume, slurm_node

        ours = next((a.split("=", 1)[1] for a in taker.argv if a.startswith("reason=")), "")
        try:
            now = slurm_node(self.runner, self.runner.node)
        except SlurmError as e:
            return f"not resumed: {e}"
        if may_resume(now, ours):
            return None
        return (
            f"not resumed: {self.runner.node} is {now.state} with another reason now ({now.reason!r}, not ours: "
            f"{ours!r}): whoever drained it lifts that drain"
        )

    def resolve_alerts(self, rung: Rung) -> int:
        """The firing alerts that asked for this remediation end with its proof (closed_by `proof rem-...`, a
        'resolve' row naming the episode), as an alert resolved by hand does: the proof is the evidence that the
        fault is gone, so the node's GpuHealthy condition and the next remediate see it healthy."""
        from fleettool.engine.silences import acknowledge

        n, now = 0, self.clock()
        for a in self.choice.alerts:
            try:
                acknowledge(
                    self.store, str(a["alert_id"]), now=now, until=now + 3650 * 86400.0, who=self.opts.who,
                    reason=f"remediation {self.rid}: {rung} proven", kind="resolve", closed_by=f"proof {self.rid}",
                )  # fmt: skip
            except KeyError:
                continue
            self.log("return", f"alert {a['alert_id']} resolved", rung, True, str(a.get("rule", "")))
            n += 1
        return n

    def put_back(self, rung: Rung) -> bool:
        ok = True
        done: set[tuple[str, ...]] = set()
        for taker, u in reversed(self.undo):
            if u.argv in done:
                continue  # the drain and the reboot both resume the node: once
            done.add(u.argv)
            theirs = self.drained_by_another(taker, u)
            if theirs:
                self.log("return", u.name, rung, False, theirs)
                ok = False
                continue
            how = self.runner.here if u.where == "here" else self.runner.on_node
            r = how(u.argv, timeout_s=u.timeout_s, stdin=u.stdin)
            good = r.rc in u.ok_rc
            self.log("return", u.name, rung, good, r.excerpt(), argv=list(r.argv), rc=r.rc)
            ok = ok and good
        return ok


def run(
    store: Store,
    first: Plan,
    choice: Choice,
    runner: NodeRunner,
    opts: LoopOptions,
    *,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome:
    """Guard, record, climb the ladder from `first.rung` until a proof passes or RMA (module docstring)."""
    refused = refusal(store, first.node, opts, clock())
    if refused is not None:
        return refused
    ep = Episode(store, runner, choice, opts, clock, sleep)
    worst = choice.alerts[0] if choice.alerts else {}
    ep.rid = new_remediation(
        store,
        Remediation(
            node=first.node, gpu=first.gpu, rung=str(first.rung), via=str(first.via), who=opts.who,
            reason=first.why, started=clock(), paged_at=choice.paged_at, uuid=choice.uuid,
            incident_id=choice.incident_id, alert_id=worst.get("alert_id"), rule=worst.get("rule"),
        ),
    )  # fmt: skip
    ep.log("plan", str(first.rung), first.rung, None, first.why, plan=plans.to_dict(first, opts.plan))
    ep.log("guard", "blast guard", None, True, "no limit reached; no job-teardown storm")
    out = Outcome("failed", "", ep.rid)
    try:
        return _climb(ep, out, first)
    except (
        BaseException
    ) as e:  # a missing tool, an interrupt: the episode stops where it was, the node stays out
        update_remediation(store, ep.rid, state="stopped", ended=clock(), outcome=f"stopped: {e}")
        raise


def _climb(ep: Episode, out: Outcome, first: Plan) -> Outcome:
    store, runner, opts, choice, clock = ep.store, ep.runner, ep.opts, ep.choice, ep.clock
    p: Plan | None = first
    while p is not None:
        rung = p.rung
        out.rung = rung
        out.rungs.append(str(rung))
        update_remediation(store, ep.rid, rung=str(rung), state="running")
        ep.log("rung", str(rung), rung, None, p.why)
        if rung is Rung.RMA:
            return _rma(ep, out)
        blocked = plans.can_run(rung, p.via, opts.plan)
        if blocked:
            ep.log("note", f"{rung} cannot run", rung, False, blocked)
            update_remediation(store, ep.rid, state="stopped", ended=clock(), outcome=blocked)
            out.state, out.message = "stopped", f"{ep.rid}: stopped at {rung}: {blocked}; the node stays out"
            return out
        ok, why = ep.run_rung(p)
        if ok:
            update_remediation(store, ep.rid, state="proving")
            proof = ep.prove(rung, clock())
            if proof.passed:
                return _proven(ep, out, rung, proof)
            failed = "; ".join(f"{x.name}: {x.detail}" for x in proof.failed())
            why = "proof failed: " + (failed or "a part that must pass was not judged")
        ep.log("note", f"{rung} not proven", rung, False, why)
        up = next_rung(rung)
        p = plans.for_rung(p, up, runner, opts.plan, choice.alerts, choice.uuid) if up is not None else None
    return out  # not reached: RMA ends the loop


def _proven(ep: Episode, out: Outcome, rung: Rung, proof: Proof) -> Outcome:
    returned = ep.put_back(rung)
    if ep.took_node_out and returned:  # a node still tainted or drained is not healthy, whatever the proof
        ep.lifecycle("healthy", f"remediation {ep.rid}: {rung} proven")
    parts = ", ".join(f"{x.name} {'ok' if x.ok else 'n/a' if x.ok is None else 'FAIL'}" for x in proof.parts)
    if not returned:
        msg = f"{rung} proven ({parts}) but putting it back failed: see the audit trail"
        update_remediation(ep.store, ep.rid, state="proven", ended=ep.clock(), outcome=msg)
        out.state, out.message = "failed", f"{ep.rid}: {msg}"
        return out
    resolved = ep.resolve_alerts(rung)
    msg = f"{rung} proven ({parts}); returned to service" + (
        f"; {resolved} alert{'s' if resolved != 1 else ''} it answered resolved by the proof"
        if resolved
        else ""
    )
    update_remediation(ep.store, ep.rid, state="proven", ended=ep.clock(), outcome=msg)
    out.state, out.message = "proven", f"{ep.rid}: {msg}"
    return out


def _rma(ep: Episode, out: Outcome) -> Outcome:
    node = ep.runner.node
    ep.lifecycle("rma", f"remediation {ep.rid}: every rung failed")
    bundle = f"fleettool node {node} rma --bundle FILE"
    msg = f"every rung failed: {node} goes to RMA; collect the evidence with `{bundle}`"
    ep.log("note", "rma", Rung.RMA, False, msg, bundle_command=bundle)
    update_remediation(ep.store, ep.rid, state="failed", ended=ep.clock(), outcome=msg)
    out.state, out.message = "failed", f"{ep.rid}: {msg}"
    return out
