"""Is each GPU the burn-in's alone? A GPU that another process is using measures that process's load as well
as its own: its figures are not the GPU's, so its results are INCONCLUSIVE (naming the PIDs), never FAIL
(nor PASS). A wrong result stays FAIL (evidence corruption=True): another process cannot change our bits.

The processes come from the GPU source (NVML's running-process lists, compute and graphics; the fake GPU
source plays them for tests), read once before the first test and by the telemetry watcher while each watched
test (GEMM, HBM) runs. This run's own PID and its descendants are not "another process".

NVML names processes by PID in the host's PID namespace. Before the tests this run holds no context, so
every listed process is someone else's. During a test, a PID that is not ours counts only where NVML also
lists this run's own PID on that GPU (so its PIDs and ours are the same namespace's); in a container it does
not, and those PIDs (this run's own among them) are reported as unattributed, with no verdict changed.
Without a source that lists processes (the CPU backend, NVML that did not open) the check is not made, and
the `exclusive` row says so (SKIPPED).
"""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

from fleettool.burnin.verdict import Result, Verdict
from fleettool.sources.base import GpuProcess, GpuSource, ProcessLister, SourceError

TEST = "exclusive"  # the row that reports the check


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state; comm may hold ") "


def is_ours(pid: int, me: int | None = None) -> bool:
    """This process, or one it started (the all-reduce workers), as this PID namespace sees them."""
    me = os.getpid() if me is None else me
    seen: set[int] = set()
    while pid > 1 and pid not in seen:
        if pid == me:
            return True
        seen.add(pid)
        parent = _parent(pid)
        if parent is None:
            return False
        pid = parent
    return False


def describe(procs: list[GpuProcess]) -> str:
    def one(p: GpuProcess) -> str:
        mem = f", {p.used_memory_bytes / 2**20:.0f} MiB" if p.used_memory_bytes is not None else ""
        return f"PID {p.pid} ({p.kind}{mem})"

    return ", ".join(one(p) for p in procs)


class BusyCheck:
    """The check for one run: `before()` once, `observe()` after each watched test, `apply()` to each step's
    results, then `result()` (the exclusive row) and `as_dict()` (the report's `busy`)."""

    def __init__(self, source: GpuSource | None, gpus: list[int], why_not: str = "") -> None:
        self.lister = source if isinstance(source, ProcessLister) else None
        self.gpus = gpus
        self.why_not = why_not
        if self.lister is None and not why_not:
            self.why_not = "the GPU source cannot list processes"
        if not gpus and not why_not:
            self.why_not = "no GPU index to check"
        self.before: dict[int, list[GpuProcess]] = {}
        self.during: dict[int, list[GpuProcess]] = {}
        self.unattributed: dict[int, list[GpuProcess]] = {}
        self.errors: dict[int, str] = {}
        self.step_during: dict[int, list[GpuProcess]] = {}
        self.step_seen: dict[int, set[int]] = {}

    @property
    def checked(self) -> bool:
        return self.lister is not None and bool(self.gpus) and not self.why_not

    def before_tests(self, now: float) -> None:
        """Every process on each GPU before the tests touch them, but this run's own."""
        if not self.checked:
            return
        assert self.lister is not None
        for g in self.gpus:
            try:
                others = [p for p in self.lister.running_processes(g, now) if not is_ours(p.pid)]
            except SourceError as e:
                self.errors[g] = str(e)
                continue
            if others:
                self.before[g] = others

    def begin_step(self) -> None:
        self.step_during = {}
        self.step_seen = {}  # GPU -> every PID this step's watches saw (where a list was read)

    def observe(
        self, seen: dict[int, dict[int, GpuProcess]], self_seen: set[int], listed: set[int] | None = None
    ) -> None:
        """A watched test's sightings (GPU -> PID -> process), the GPUs on which NVML listed this run's own
        PID, and those whose list was read at all. A PID that is not ours and was not there before is another
        process where our PID was listed too, else unattributed."""
        for g in listed if listed is not None else set(seen):
            self.step_seen.setdefault(g, set()).update(seen.get(g, {}))
        for g, procs in seen.items():
            before = {p.pid for p in self.before.get(g, [])}
            foreign = [p for pid, p in sorted(procs.items()) if pid not in before and not is_ours(pid)]
            for into in [self.during, self.step_during] if g in self_seen else [self.unattributed]:
                have = {p.pid for p in into.get(g, [])}
                into.setdefault(g, []).extend(p for p in foreign if p.pid not in have)

    def _others(self, r: Result) -> list[tuple[str, list[GpuProcess]]]:
        """The other processes on r's GPU (any GPU, for a node-level test) during r's step: those there
        before the tests, unless this step's watch no longer saw them, and those that appeared."""
        gpus = self.gpus if r.gpu is None else [r.gpu]
        out = []
        for g in gpus:
            watched = self.step_seen.get(g)
            still = [p for p in self.before.get(g, []) if watched is None or p.pid in watched]
            if still:
                out.append((f"GPU {g} before the test", still))
            if self.step_during.get(g):
                out.append((f"GPU {g} during the test", self.step_during[g]))
        return out

    def apply(self, results: list[Result]) -> None:
        """One step's results: a result whose GPU (for a node-level test, any GPU) had another process on it
        before or during the step is INCONCLUSIVE, unless it found corruption (FAIL stays)."""
        for r in results:
            if r.verdict == Verdict.SKIPPED or r.test == TEST:
                continue
            others = self._others(r)
            if not others:
                continue
            procs = [p for _, ps in others for p in ps]
            r.evidence["busy_pids"] = sorted({p.pid for p in procs})
            r.evidence["other_processes"] = [asdict(p) for p in procs]
            where = "; ".join(f"{when}: {describe(ps)}" for when, ps in others)
            if r.verdict == Verdict.FAIL and r.evidence.get("corruption"):
                r.reason += f"; the GPU was also busy ({where})"
            elif r.verdict != Verdict.INCONCLUSIVE:
                measured = f" (measured: {r.reason})" if r.reason else ""
                r.verdict = Verdict.INCONCLUSIVE
                r.reason = f"busy with another process, {where}: the figures measure its load too{measured}"

    def result(self, node: str) -> Result:
        """The exclusive row: PASS (no other process seen), INCONCLUSIVE (another process, PIDs named) or
        SKIPPED (the check could not be made, and why)."""
        ev = self.as_dict()
        if not self.checked:
            why = f"not checked for other processes on the GPUs: {self.why_not}"
            return Result(node, None, TEST, Verdict.SKIPPED, reason=why, evidence=ev)
        busy = [
            f"GPU {g} {when}: {describe(ps)}"
            for g in self.gpus
            for when, ps in (("before the tests", self.before.get(g)), ("during them", self.during.get(g)))
            if ps
        ]
        errors = [f"GPU {g}: processes could not be listed ({e})" for g, e in sorted(self.errors.items())]
        notes = [
            f"GPU {g}: {describe(ps)} appeared during the tests, unattributed (NVML did not list this run's own "
            f"PID there: another PID namespace, as in a container; they may be this run's own)"
            for g, ps in sorted(self.unattributed.items())
        ]
        if busy:
            reason = "busy with another process: " + "; ".join(busy + errors + notes)
            return Result(node, None, TEST, Verdict.INCONCLUSIVE, reason=reason, evidence=ev)
        if len(self.errors) == len(self.gpus):
            return Result(node, None, TEST, Verdict.SKIPPED, reason="; ".join(errors), evidence=ev)
        clean = [g for g in self.gpus if g not in self.errors]
        reason = f"no other process on GPU {', '.join(map(str, clean))} before or during the tests"
        verdict = Verdict.WARN if errors else Verdict.PASS  # some GPUs could not be checked
        return Result(node, None, TEST, verdict, reason="; ".join([reason, *errors, *notes]), evidence=ev)

    def as_dict(self) -> dict[str, Any]:
        """The report's `busy` (JSON): whether the check was made (else why not), and per GPU the other
        processes seen before and during the tests, the unattributed ones and the GPUs that could not say."""

        def procs(d: dict[int, list[GpuProcess]]) -> dict[str, list[dict[str, Any]]]:
            return {str(g): [asdict(p) for p in ps] for g, ps in sorted(d.items())}

        return {
            "checked": self.checked,
            "why_not": self.why_not or None,
            "gpus": self.gpus,
            "before": procs(self.before),
            "during": procs(self.during),
            "unattributed": procs(self.unattributed),
            "errors": {str(g): e for g, e in sorted(self.errors.items())},
        }
