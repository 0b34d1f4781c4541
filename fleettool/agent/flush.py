"""The agent's flush: its buffer into the store in one transaction, then the rules, the fleet export and
retention, each after the write has committed, so a failure of any of them never writes the batch twice.

The file is opened for the flush only (readers open it between flushes). A flush that cannot get the file
(locked, disk full) keeps the buffer for the next one. An urgent flush (an XID, a GPU fallen off the bus, a
double-bit error count that moved) is made at once rather than on the timer, and judges the event rules and the
instant rules (threshold rules without `for`) there and then, so the alert is in the store and on /metrics
within a second of the kernel line.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from fleettool.agent.config import AgentConfig, AgentStats, Buffer
from fleettool.agent.health import STORE_HEALTHY, store_alert
from fleettool.collectors.base import Collected
from fleettool.model import Event, EventKind
from fleettool.store import Store, StoreDamaged, StoreError
from fleettool.store.connection import is_damage, is_out_of_memory
from fleettool.store.incidents import incident_counts
from fleettool.store.remediations import open_remediations

if TYPE_CHECKING:
    from fleettool.agent.topology import TopologyRefresh
    from fleettool.engine.incremental import RuleScheduler
    from fleettool.pipeline import Pipeline


class Agent(Protocol):
    """What a flush reads and updates of the agent (fleettool.agent.loop.Agent)."""

    cfg: AgentConfig
    stats: AgentStats
    buf: Buffer
    scheduler: RuleScheduler | None
    open_alerts: list[dict[str, object]]
    incidents: dict[tuple[str, str, str], int]
    remediations: dict[tuple[str, str], int]
    latest: dict[tuple[str, int | None, str | None, str], float]
    clock: Callable[[], float]
    _last_export: float
    _last_retention: float
    topology: TopologyRefresh | None

    def log(self, msg: str) -> None: ...

    def retention_now(self) -> float: ...


# events judged the moment they arrive (the event rules' kinds)
# flushed at once whatever the rules (the line must reach the store); the kinds the event rules read are added
# (RuleScheduler.event_kinds: GSP's rate-limit lines waited for the rule's 5-minute cadence)
URGENT_EVENT_KINDS = frozenset(
    k.value for k in (EventKind.XID, EventKind.SXID, EventKind.FELL_OFF_BUS, EventKind.GSP_TIMEOUT)
)


def due(now: float, last: float, every: float) -> bool:
    """Whether a periodic job is due: `every` seconds since `last`, or the clock stepped back past `last`
    (a step back of an hour must not hold the job for an hour)."""
    elapsed = now - last
    return elapsed >= every or elapsed < 0


def _first_line(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def flush_buffer(ag: Agent, *, final: bool = False, urgent: bool = False) -> bool:
    cfg, stats = ag.cfg, ag.stats
    if cfg.db is None or (not ag.buf.rows() and not ag.buf.gpus):
        return True
    now = ag.clock()
    try:
        # the schema is created on the first flush only: a later open just checks its version
        store = Store(cfg.db, wait_s=5.0 if final else 0.2, migrate=stats.flushes == 0)
        store.limit_resources(cfg.duckdb_memory, cfg.duckdb_threads)
    except StoreError as e:
        _flush_failed(ag, e)
        return False
    from fleettool.pipeline import Pipeline

    pipe = Pipeline(store, scheduler=ag.scheduler)
    try:
        buf = ag.buf
        c = Collected(samples=buf.samples, events=buf.events, gpus=list(buf.gpus.values()), pods=buf.pods)
        n = pipe.write(c, now)
        # a kernel line's time is boot time + its uptime, which can read a few ms past this clock: judge up to
        # it (at most 5 s ahead), or the event would fall outside the window until the next timed evaluation
        newest = max((e.ts for e in buf.events if e.ts is not None), default=now)
        judged_at = min(max(now, newest), now + 5.0)
    except Exception as e:  # disk full, I/O error: the transaction rolled back; keep the buffer
        store.close()
        _flush_failed(ag, e)
        return False
    # committed: from here on nothing may keep the buffer, or the next flush would write it twice
    ag.buf = Buffer()
    stats.flushes += 1
    stats.flushed_rows += n
    if urgent:
        stats.urgent_flushes += 1
    if stats.last_flush_error is not None:
        ag.log("store writable again")
        stats.last_flush_error = None
    trouble: str | None = None
    checkpoint: str | None = None
    try:
        trouble = _after_write(ag, pipe, store, judged_at, urgent, final)
        checkpoint = _checkpoint(store)
    finally:
        with contextlib.suppress(Exception):  # the checkpoint said what closing would
            store.close()
    if checkpoint is not None:  # the rows are in the WAL, not in the file: no success claimed
        stats.flush_failures += 1
        ag.log(f"{checkpoint} (the write-ahead log grows)")
    _store_health(ag, trouble or checkpoint)
    return checkpoint is None


def _checkpoint(store: Store) -> str | None:
    """Fold the WAL into the file now (closing the file would, silently): the error's first line, or None.
    Another connection of this process in a write is not a failure; the next flush checkpoints."""
    try:
        store.execute("CHECKPOINT")
    except Exception as e:
        msg = _first_line(e)
        return None if "cannot checkpoint: there are other" in msg.lower() else f"checkpoint failed: {msg}"
    return None


def _store_health(ag: Agent, trouble: str | None) -> None:
    """The store judged after a flush: `trouble` (a damaged file, failing rules, a failing checkpoint) makes
    the agent not ready (health.readiness), sets agent_store_healthy to 0 and serves the rule set's
    AgentStoreUnhealthy alert from memory, since the alerts in the store cannot be trusted to be evaluated."""
    st, healthy = ag.stats, 0.0 if trouble else 1.0
    # on /metrics only (Prometheus' copy of the rule reads it there): a row for a store that cannot be judged
    # would only wait in the buffer, and a healthy flush must leave the buffer empty
    ag.latest[(STORE_HEALTHY, None, None, "")] = healthy
    alert = store_alert(ag.scheduler.rules if ag.scheduler is not None else [])
    others = [a for a in ag.open_alerts if a.get("rule") != alert["rule"]]
    if trouble is None:
        if st.store_error is not None:
            ag.log("the store is healthy again")
        st.store_error = None
        ag.open_alerts = others
        return
    if trouble != st.store_error:
        ag.log(f"the store cannot be judged, alerting from it is off: {trouble}")
    st.store_error = trouble
    ag.open_alerts = [alert, *others]


def _after_write(
    ag: Agent, pipe: Pipeline, store: Store, now: float, urgent: bool, final: bool = False
) -> str | None:
    """The rules, the export and retention after a committed write; the rules' failure, if they failed."""
    cfg = ag.cfg
    failed = None
    if ag.topology is not None:  # before the rules: they judge with the topology as it is now
        try:
            ag.topology.store(store)
        except Exception as e:  # a topology write that fails never costs the samples (committed above)
            with contextlib.suppress(Exception):
                store.rollback()
            ag.log(f"storing topology failed: {_first_line(e)}")
    if ag.scheduler is not None:
        try:  # the pipeline rolls back a failed evaluation
            try:
                pipe.evaluate_due(now, urgent=urgent, final=final)
            except Exception as e:  # DuckDB's memory limit met (a reader's query counts too): once more
                if not is_out_of_memory(e):
                    raise
                ag.log(f"rule evaluation met the store's memory limit ({cfg.duckdb_memory}); tried again")
                pipe.evaluate_due(now, urgent=urgent, final=final)
            ag.open_alerts = pipe.firing_alerts(cfg.node)
            ag.incidents = incident_counts(store)
        except Exception as e:  # a broken rule must not stop collection; it makes the agent not ready
            failed = f"rule evaluation failed: {_first_line(e)}"
            ag.log(failed)
    try:  # the open remediations (`fleettool remediate` writes them), for /metrics, rules or not
        ag.remediations = dict(Counter((r["node"], r["rung"]) for r in open_remediations(store)))
    except Exception as e:  # /metrics keeps the last count
        ag.log(f"reading the open remediations failed: {_first_line(e)}")
    if cfg.export_to and due(now, ag._last_export, cfg.export_every_s):
        ag._last_export = now
        try:
            from fleettool.fleet.location import open_location
            from fleettool.fleet.segments import export

            export(store, open_location(cfg.export_to), cfg.node, now)
        except Exception as e:  # the store keeps everything; the next export catches up
            ag.log(f"export to {cfg.export_to} failed: {_first_line(e)}")
    if due(now, ag._last_retention, cfg.retention_every_s):
        ag._last_retention = now
        try:
            store.apply_retention(ag.retention_now(), cfg.raw_keep_s, cfg.rollup_keep_s)
        except Exception as e:  # rolled back; the data stays raw until the next try
            ag.stats.retention_failures += 1
            with contextlib.suppress(Exception):
                store.rollback()
            ag.log(f"retention failed (raw samples kept): {_first_line(e)}")
    return failed


def _flush_failed(ag: Agent, e: Exception) -> None:
    stats = ag.stats
    stats.flush_failures += 1
    msg = _first_line(e)
    if msg != stats.last_flush_error:
        ag.log(f"flush failed, keeping {ag.buf.rows()} rows in memory: {msg}")
        ag.buf.events.append(
            Event(ag.clock(), ag.cfg.node, EventKind.AGENT.value, f"flush failed: {msg}", source="agent")
        )
    stats.last_flush_error = msg
    if isinstance(e, StoreDamaged) or is_damage(e):
        _store_health(ag, f"the database is damaged: {msg}")
