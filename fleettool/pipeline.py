"""The headless pipeline: collected data -> store -> rules -> alerts, one path for every caller.

`fleettool replay` and `fleettool demo` (`replay`), the agent's flush (`Pipeline.write`, then
`Pipeline.evaluate_due`) and the tests all take it; the CLI only parses options and prints what it returns.

- `Pipeline.write` stores one collection (samples, events, GPU inventory, pod uses) in one transaction and
  gives events that name only a PCI id (kernel lines) their GPU from the inventory.
- `Pipeline.evaluate` judges the whole store in its own time and writes the alerts (replay, demo);
  `Pipeline.evaluate_due` runs the agent's incremental scheduler (the rules due now, over their lookback).
- `replay` ingests a recording (fleettool.ingest: each file read through the collectors' own conversions),
  evaluates it and lists the alerts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleettool.collectors.base import Collected
from fleettool.engine.evaluate import Incident, data_range, evaluate_rule, fold, write_alerts
from fleettool.engine.evaluate import evaluate as evaluate_store
from fleettool.engine.incremental import RuleScheduler
from fleettool.engine.rules import Rule
from fleettool.ingest.report import FAILED, IGNORED, PARTIAL, READ, SKIPPED, FileReport, IngestOptions
from fleettool.recording.times import file_time
from fleettool.store import Store
from fleettool.store.alerts import list_alerts
from fleettool.store.incidents import incident_of_alerts

# what replay lists of each alert (text and --json)
REPLAY_ALERT_FIELDS = (
    "alert_id",
    "severity",
    "category",
    "node",
    "gpu",
    "action",
    "state",
    "first_seen",
    "last_seen",
    "summary",
    "runbook",
)
# what the agent keeps of its node's firing alerts, for /metrics
AGENT_ALERT_FIELDS = ("rule", "severity", "category", "action", "gpu", "alert_id")


@contextlib.contextmanager
def _transaction(store: Store) -> Iterator[None]:
    """One transaction: committed when the block ends, rolled back (and the error raised) when it fails."""
    store.begin()
    try:
        yield
        store.commit()
    except BaseException:
        with contextlib.suppress(Exception):  # the transaction may already be gone with the error
            store.rollback()
        raise


class Pipeline:
    """Write collections into one open store and evaluate the rules over it."""

    def __init__(
        self, store: Store, rules: list[Rule] | None = None, *, scheduler: RuleScheduler | None = None
    ) -> None:
        self.store = store
        self.rules = rules or []
        self.scheduler = scheduler

    def write(self, c: Collected, seen_ts: float) -> int:
        """Store one collection in one transaction (GPUs seen at `seen_ts`); rows written (samples + events).
        On an error the transaction is rolled back and the error raised: nothing of the collection is kept."""
        store = self.store
        with _transaction(store):
            n = store.write_samples(c.samples)
            n += store.write_events(c.events)
            store.upsert_gpus(c.gpus, seen_ts)
            store.record_pods(c.pods)
            if any(e.gpu is None and (e.pci_bus_id or e.uuid) for e in c.events):
                # kernel lines name a PCI id; the inventory knows its index. Only then: an agent event names
                # neither, and the join costs the agent's 16 MB flush (it ran out of memory on a replayed store)
                store.resolve_event_gpus()
        return n

    def evaluate(self, now: float | None = None) -> list[Incident]:
        """The rules over the store's data in its own time (its first to its last timestamp); the incidents
        are written as alerts in one transaction. A store whose events are all untimed (a plain dmesg has
        only the uptime since boot) has no time range, so the engine would see nothing: it is judged at the
        one instant `now` (replay passes the newest of the files' times), so an XID 79 still raises."""
        store = self.store
        if data_range(store) is not None:
            incidents = evaluate_store(store, self.rules)
        elif now is not None and store.scalar("SELECT count(*) FROM events WHERE ts IS NULL"):
            findings = []
            for r in self.rules:
                findings.extend(evaluate_rule(store, r, now, now))
            incidents = fold(findings, now)
        else:
            incidents = []
        with _transaction(store):
            write_alerts(store, incidents)
        return incidents

    def evaluate_due(self, now: float, *, urgent: bool = False, final: bool = False) -> int:
        """The agent's incremental evaluation: the scheduler's rules due at `now` (and, `urgent`, its event and
        instant rules whether due or not), over their lookback, in one transaction (rolled back and raised on
        an error). Alerts written; 0 without a scheduler."""
        if self.scheduler is None:
            return 0
        with _transaction(self.store):
            return self.scheduler.run(self.store, now, urgent=urgent, final=final)

    def firing_alerts(self, node: str) -> list[dict[str, Any]]:
        """The node's firing alerts (AGENT_ALERT_FIELDS and the incident_id each is a member of, or None), in
        triage order."""
        rows = list_alerts(self.store, state="firing", node=node)
        inc = incident_of_alerts(self.store) if rows else {}
        return [
            {**{k: r[k] for k in AGENT_ALERT_FIELDS}, "incident_id": inc.get(r["alert_id"], (None,))[0]}
            for r in rows
        ]


@dataclass
class ReplayResult:
    """What a replay read (one FileReport per file, in path order) and the alerts it raised."""

    reports: list[FileReport]
    incidents: list[Incident] = field(default_factory=list)
    alerts: list[dict[str, Any]] = field(default_factory=list)  # REPLAY_ALERT_FIELDS, triage order
    evaluated: bool = False  # False when nothing was recognised: the rules were not run

    def having(self, status: str) -> list[FileReport]:
        return [r for r in self.reports if r.status == status]

    @property
    def read(self) -> list[FileReport]:
        """Files stored, whole or partial."""
        return [r for r in self.reports if r.status in (READ, PARTIAL)]

    @property
    def seen(self) -> list[FileReport]:
        """Recognised files ignored because they were already ingested."""
        return [r for r in self.reports if r.status == IGNORED and r.recognised]

    @property
    def failed(self) -> list[FileReport]:
        return self.having(FAILED)

    @property
    def skipped(self) -> list[FileReport]:
        return self.having(SKIPPED)

    @property
    def partial(self) -> list[FileReport]:
        return self.having(PARTIAL)

    @property
    def recognised(self) -> bool:
        """Anything in the recording fleettool reads (stored now, before, or failing)."""
        return bool(self.read or self.seen or self.failed)


def replay(store: Store, src: Path, opts: IngestOptions, rules: list[Rule]) -> ReplayResult:
    """Ingest the recording at `src` into `store`, evaluate the rules over it, and list the alerts. When
    nothing in it is recognised, nothing is evaluated (`evaluated` is False). OSError from reading `src`
    (a directory that cannot be walked) is raised."""
    from fleettool.ingest.run import ingest  # numpy and Arrow: replay's, never loaded by the agent's flush

    result = ReplayResult(ingest(store, src, opts))
    if not result.recognised:
        return result
    newest = max((file_time(Path(r.path), opts.at)[0] for r in result.reports if r.events), default=0.0)
    if data_range(store) is not None:  # Pipeline.evaluate's judgement, two rules at a time (same incidents)
        result.incidents = evaluate_store(store, rules, workers=2)
        with _transaction(store):
            write_alerts(store, result.incidents)
    else:
        result.incidents = Pipeline(store, rules).evaluate(now=newest)
    result.alerts = [{k: a[k] for k in REPLAY_ALERT_FIELDS} for a in list_alerts(store)]
    result.evaluated = True
    return result
