"""The agent's probes, served on its metrics port: /healthz (liveness) and /readyz (readiness).

Liveness is "the loop is going round". A healthy loop finishes a tick every interval; it is reported stuck when
the last tick ended more than `tick_bound_s` ago:

    tick_bound_s = max(3 x interval, 10 s) + watchdog x collectors

Three missed ticks is not jitter, and the 10 s floor keeps a sub-second interval from failing the probe over a
GC pause or a slow disk; on top of that, the longest a tick may take while working as designed: every collector
hanging at once, each held `watchdog` before the watchdog marks it hung and the loop moves on. With the defaults
(1 s, 5 s, three collectors) that is 25 s, which a kubelet probing every 10 s, three failures in a row, turns into
a restart after about a minute of a loop that has stopped.

A flush runs inside the loop (the store write, the rules, hourly retention and the fleet export), so no tick ends
while one runs. It counts as progress for up to FLUSH_BOUND_S: retention and the export are due at the first
flush after a start, so a bound shorter than the slowest of them would restart the agent into the same flush
forever (a crash loop); a flush past ten minutes is taken for hung.

Readiness is "this agent's data can be trusted to be kept, and judged": the first collection is done, NVML
answers (a collector that reports its source's availability, the nvml one, has started; the agent stays alive
and retries it, but a node whose NVML cannot load collects no GPU data and is not ready), the store
is healthy (not damaged, its rules and checkpoints run), and the store takes the flushes, or the rows wait in the
buffer within --max-buffer. Once the buffer is full and rows are dropped
(counted in agent_dropped_rows_total) it is not ready until a flush reaches the store again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Protocol

from fleettool.agent.config import AgentConfig, AgentStats

if TYPE_CHECKING:
    from fleettool.engine.rules import Rule

# The store is judged after every flush (agent/flush.py): a damaged file, a failing rule evaluation or a failing
# checkpoint set agent_store_healthy to 0, make the agent not ready, and put the rule set's AgentStoreUnhealthy
# alert on /metrics from memory: an agent whose store cannot be read cannot evaluate that alert from the store.
STORE_HEALTHY = "agent_store_healthy"
STORE_RULE = "AgentStoreUnhealthy"

FLUSH_BOUND_S = 600.0
MIN_TICK_BOUND_S = 10.0


class Loop(Protocol):
    """What the probes read of the agent (fleettool.agent.loop.Agent)."""

    cfg: AgentConfig
    stats: AgentStats
    started_mono: float
    last_tick_mono: float | None
    flushing_since: float | None
    dropped_at_last_flush: int

    @property
    def runners(self) -> Mapping[str, object]: ...

    def mono(self) -> float: ...


def tick_bound_s(cfg: AgentConfig, collectors: int) -> float:
    return max(3 * cfg.interval_s, MIN_TICK_BOUND_S) + cfg.watchdog_s * collectors


def liveness(ag: Loop) -> tuple[bool, str]:
    now = ag.mono()
    if ag.flushing_since is not None:
        busy = now - ag.flushing_since
        if busy > FLUSH_BOUND_S:
            return (
                False,
                f"a flush has run for {busy:.0f}s (bound {FLUSH_BOUND_S:.0f}s): the loop is stuck in it",
            )
        return True, f"flushing for {busy:.1f}s"
    bound = tick_bound_s(ag.cfg, len(ag.runners))
    if ag.last_tick_mono is None:
        since = now - ag.started_mono
        if since > bound:
            return False, f"no tick since the start {since:.0f}s ago (bound {bound:.0f}s)"
        return True, f"starting ({since:.1f}s)"
    since = now - ag.last_tick_mono
    if since > bound:
        return False, f"last tick {since:.0f}s ago (bound {bound:.0f}s): the loop has stopped"
    return True, f"last tick {since:.1f}s ago (bound {bound:.0f}s)"


def store_alert(rules: Iterable[Rule]) -> dict[str, object]:
    """The AgentStoreUnhealthy alert as /metrics lists a firing alert (pipeline.AGENT_ALERT_FIELDS), from the
    rule set's own rule when it has one (its severity, category, action), else as the built-in rule says."""
    for r in rules:
        if r.alert == STORE_RULE:
            return {
                "rule": r.alert,
                "severity": getattr(r.severity, "value", r.severity),
                "category": getattr(r.category, "value", r.category),
                "action": getattr(r.action, "value", r.action),
                "gpu": None,
            }
    return {"rule": STORE_RULE, "severity": "critical", "category": "agent", "action": "none", "gpu": None}


def missing_sources(ag: Loop) -> list[str]:
    """The node-level sources the agent runs a collector for and cannot reach now (NVML that cannot load: a
    collector that reports its availability, ReportsAvailability, with its reason), as 'nvml: <reason>'."""
    out = []
    for cid, runner in ag.runners.items():
        c = getattr(runner, "collector", None)
        reason = getattr(c, "reason", None)
        if getattr(c, "availability_metric", None) and reason:
            out.append(f"{cid}: {reason}")
    return out


def readiness(ag: Loop) -> tuple[bool, str]:
    if ag.last_tick_mono is None:
        return False, "the first collection has not finished"
    if missing := missing_sources(ag):  # alive (it retries), but collecting no GPU data: not ready
        return False, f"no GPU data: {'; '.join(missing)}; the agent retries it"
    st = ag.stats
    if st.store_error is not None:
        db = ag.cfg.db
        return False, (
            f"the store cannot be judged, alerting from it is off ({st.store_error}); "
            f"run `fleettool store check --db {db}`"
        )
    dropped = st.dropped_rows - ag.dropped_at_last_flush
    if st.last_flush_error is not None and dropped > 0:
        return False, (
            f"the store is not writable ({st.last_flush_error}) and the buffer is full: "
            f"{dropped} rows dropped since the last flush"
        )
    if st.last_flush_error is not None:
        return True, f"buffering: the last flush failed ({st.last_flush_error}); nothing dropped yet"
    if ag.cfg.db is not None and st.flushes == 0:
        return True, "collecting; the first flush is still to come"
    return True, f"{st.ticks} ticks, {st.flushes} flushes"
