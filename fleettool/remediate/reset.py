"""The reset rung on the node: wait for the GPU's processes to end (within a bound), persistence mode off, stop
the services that hold the GPU where they are active, `nvidia-smi -r -i N`, and put back exactly the services it
stopped, whether or not the reset worked.

The reset failed when any of these failed, when nvidia-smi refused it ("In use by another client"), or when the
GPU is still not listed by `nvidia-smi -L` afterwards; the tool's own words go to the audit trail.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fleettool.remediate.model import Step
from fleettool.remediate.runner import NodeRunner, RunResult

# the services that keep a GPU open (NVIDIA's reset guidance: stop them before nvidia-smi -r), in stop order
HOLDERS = ("nvidia-persistenced", "nvidia-dcgm", "dcgm-exporter", "nvidia-fabricmanager")


def apps_argv(gpu: int) -> tuple[str, ...]:
    return ("nvidia-smi", "--query-compute-apps=pid,process_name", "--format=csv,noheader", "-i", str(gpu))


def plan_steps(gpu: int) -> tuple[Step, ...]:
    """The reset rung's node steps as the plan prints them (run by run_reset, not one by one)."""
    return (
        Step(f"wait for GPU {gpu}'s processes to end", apps_argv(gpu), takes_out=f"GPU {gpu}'s running work"),
        Step(f"persistence mode off on GPU {gpu}", ("nvidia-smi", "-i", str(gpu), "-pm", "0")),
        Step(
            "stop the services holding the GPU, those active",
            ("systemctl", "stop", *HOLDERS),
            takes_out="GPU services (" + ", ".join(HOLDERS) + ") while the reset runs",
        ),
        Step(f"reset GPU {gpu}", ("nvidia-smi", "-r", "-i", str(gpu)), takes_out=f"GPU {gpu}"),
        Step("restore the services it stopped", ("systemctl", "start", "...")),
    )


@dataclass
class ResetOutcome:
    ok: bool
    detail: str  # why it failed (the tool's words), or what was done
    results: list[tuple[str, RunResult]] = field(default_factory=list)  # (step name, result), in order


def gpu_listed(runner: NodeRunner, gpu: int, uuid: str | None = None) -> tuple[bool, RunResult]:
    """Whether `nvidia-smi -L` lists GPU `gpu` (by its UUID where known)."""
    r = runner.on_node(["nvidia-smi", "-L"], timeout_s=60)
    if r.rc != 0:
        return False, r
    lines = [ln for ln in r.stdout.splitlines() if ln.strip().startswith("GPU ")]
    if uuid:
        return any(uuid in ln for ln in lines), r
    return any(ln.strip().startswith(f"GPU {gpu}:") for ln in lines), r


def run_reset(
    runner: NodeRunner,
    gpu: int,
    *,
    drain_timeout_s: float,
    uuid: str | None = None,
    record: Callable[[str, RunResult], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    poll_s: float = 5.0,
) -> ResetOutcome:
    out = ResetOutcome(False, "")

    def run(name: str, argv: list[str] | tuple[str, ...], timeout_s: float = 120) -> RunResult:
        r = runner.on_node(argv, timeout_s=timeout_s)
        out.results.append((name, r))
        if record is not None:
            record(name, r)
        return r

    # 1. the GPU's work ends within the bound
    deadline = clock() + drain_timeout_s
    while True:
        r = run(f"GPU {gpu}'s processes", apps_argv(gpu), 60)
        if r.rc != 0:
            return _fail(out, f"could not list GPU {gpu}'s processes", r)
        pids = [ln.split(",")[0].strip() for ln in r.stdout.splitlines() if ln.strip()]
        if not pids:
            break
        if clock() >= deadline:
            procs = "; ".join(ln.strip() for ln in r.stdout.splitlines() if ln.strip())
            out.detail = (
                f"GPU {gpu} still runs PIDs {', '.join(pids)} after the drain timeout "
                f"({drain_timeout_s:g} s): {procs}"
            )
            return out
        sleep(min(poll_s, max(0.0, deadline - clock())))
    # 2. persistence mode off
    r = run(f"persistence mode off on GPU {gpu}", ["nvidia-smi", "-i", str(gpu), "-pm", "0"])
    if r.rc != 0:
        return _fail(out, "persistence mode off failed", r)
    # 3. stop what holds the GPU, only what was running
    stopped: list[str] = []
    try:
        for svc in HOLDERS:
            a = run(f"is {svc} active", ["systemctl", "is-active", svc], 30)
            if a.rc == 0 and a.stdout.strip() == "active":
                s = run(f"stop {svc}", ["systemctl", "stop", svc], 120)
                if s.rc != 0:
                    return _fail(out, f"systemctl stop {svc} failed", s)
                stopped.append(svc)
        # 4. the reset itself
        r = run(f"reset GPU {gpu}", ["nvidia-smi", "-r", "-i", str(gpu)], 300)
        words = r.excerpt()
        if r.rc != 0 or "in use by another client" in words.lower():
            return _fail(out, f"nvidia-smi -r -i {gpu} failed", r)
    finally:
        # 5. put back exactly what it stopped, in reverse, whether or not the reset worked
        for svc in reversed(stopped):
            s = run(f"start {svc}", ["systemctl", "start", svc], 120)
            if s.rc != 0 and out.ok:
                out.ok = False
    listed, lr = gpu_listed(runner, gpu, uuid)
    out.results.append(("GPU listed after the reset", lr))
    if record is not None:
        record("GPU listed after the reset", lr)
    if not listed:
        return _fail(out, f"GPU {gpu} is not listed by nvidia-smi -L after the reset: still lost", lr)
    bad = [n for n, x in out.results if n.startswith("start ") and x.rc != 0]
    if bad:
        out.ok = False
        out.detail = f"the reset ran but {', '.join(bad)} failed: the services are not all back"
        return out
    out.ok = True
    out.detail = f"GPU {gpu} reset" + (f"; restarted {', '.join(stopped)}" if stopped else "")
    return out


def _fail(out: ResetOutcome, what: str, r: RunResult) -> ResetOutcome:
    out.ok = False
    rc = "killed at its bound" if r.rc is None else f"exit {r.rc}"
    out.detail = f"{what} ({rc}): {' '.join(r.excerpt().split())[:400]}"
    return out
