"""A stored recording judged as the agent judges it (`fleettool replay DIR --as-agent`).

`fleettool replay` judges a recording whole, in one evaluation over its whole time. The agent judges the same
data as it arrives: its flush (agent/flush.py) runs the RuleScheduler (engine/incremental.py) after each write,
the due rules at their cadence, every `flush_s` (default 60 s) and at once, with the event and instant rules,
when an event of URGENT_EVENT_KINDS arrives or a metric an instant rule watches changes value. `judge` replays
that on a simulated clock over the recording's own event time, from its first to its last timestamp:

- the first flush follows the agent's first tick (the start), then one every `flush_s`, and a final one when
  the agent stops (at a down's start and at the recording's end), each judging at its own time;
- an urgent flush at each urgent event's time, and at the tick where a watched metric's value changed from the
  previous sample of its series since the agent started (a restarted agent knows no previous value);
- each evaluation sees only data with ts <= its time (every rule kind bounds its reads by the window's end);
- `downs` (offset from the start, duration): the agent stops at start + offset and restarts after the
  duration. While down nothing is evaluated and the samples it would have collected are not there (dropped from
  the store); kernel-log events are kept, read from the ring buffer's backlog at the restart, which flushes
  them at once. The restart starts a fresh RuleScheduler, as a new process does, over the same store.

The alerts are written to the store as the agent writes them; the caller lists them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from fleettool.agent.flush import URGENT_EVENT_KINDS
from fleettool.engine.evaluate import data_range
from fleettool.engine.incremental import RuleScheduler
from fleettool.engine.rules import Rule
from fleettool.pipeline import Pipeline
from fleettool.store import Store
from fleettool.store.values import db_time


@dataclass
class AgentRun:
    """What a judgement as the agent did."""

    flushes: int = 0  # flushes that judged (timer, urgent and final)
    urgent_flushes: int = 0
    evaluations: int = 0  # flushes in which the scheduler had rules due
    restarts: int = 0
    dropped_samples: int = 0  # samples of the downs' spans, dropped from the store
    start: float | None = None  # the recording's first and last timestamp (None: nothing timed)
    end: float | None = None


def _epoch(v: dt.datetime) -> float:
    return v.replace(tzinfo=dt.timezone.utc).timestamp()


def parse_down(text: str) -> tuple[float, float]:
    """`--down FROM+DURATION` (e.g. 2h+30m) -> (offset from the recording's start, duration) in seconds;
    ValueError saying what is wrong."""
    from fleettool.units import parse_duration

    frm, plus, dur = text.partition("+")
    try:
        if not plus:
            raise ValueError
        got = parse_duration(frm), parse_duration(dur)
    except ValueError:
        raise ValueError(
            f"not FROM+DURATION: {text!r} (e.g. 2h+30m: down 2 hours into the recording, for 30 minutes)"
        ) from None
    if got[1] <= 0:
        raise ValueError(f"a down of no time: {text!r}")
    return got


def down_spans(start: float, end: float, downs: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The downs as absolute [from, to) spans within [start, end], in order, overlapping ones merged."""
    spans: list[tuple[float, float]] = []
    for off, dur in sorted(downs):
        a, b = start + off, min(start + off + dur, end)
        if dur <= 0 or a >= end:
            continue
        if spans and a <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], b))
        else:
            spans.append((a, b))
    return spans


def _urgent_events(store: Store, kinds: frozenset[str], lo: float, hi: float) -> list[float]:
    """Times of the events of `kinds` (those the agent flushes at once for), with lo <= ts <= hi."""
    rows = store.query(
        "SELECT DISTINCT ts FROM events WHERE kind IN (SELECT unnest(?)) AND ts >= ? AND ts <= ? ORDER BY ts",
        [sorted(kinds), db_time(lo), db_time(hi)],
    )
    return [_epoch(r["ts"]) for r in rows]


def _metric_changes(store: Store, metrics: frozenset[str], lo: float, hi: float) -> list[float]:
    """Times at which a watched metric's series changed value since the agent started at `lo` (the agent's
    `latest` starts empty: a series' first sample is never a change)."""
    if not metrics:
        return []
    rows = store.query(
        """SELECT DISTINCT ts FROM (
             SELECT ts, value, lag(value) OVER (PARTITION BY node, gpu, uuid, metric, sub ORDER BY ts) AS prev
             FROM samples WHERE metric IN (SELECT unnest(?)) AND ts >= ? AND ts <= ?)
           WHERE prev IS NOT NULL AND prev <> value ORDER BY ts""",
        [sorted(metrics), db_time(lo), db_time(hi)],
    )
    return [_epoch(r["ts"]) for r in rows]


def judge(
    store: Store,
    rules: list[Rule],
    *,
    flush_s: float = 60.0,
    downs: Sequence[tuple[float, float]] = (),
) -> AgentRun:
    """Judge the store's data as the agent would have while collecting it (module docstring); the alerts go to
    the store. `downs`: (offset from the data's start, duration) in seconds."""
    if flush_s <= 0:
        raise ValueError(f"flush interval must be positive, not {flush_s}")
    run = AgentRun()
    rng = data_range(store)
    if rng is None:
        return run
    t0, t1 = rng
    run.start, run.end = t0, t1
    spans = down_spans(t0, t1, downs)
    if spans:
        store.begin()
        try:
            for a, b in spans:
                run.dropped_samples += store.drop_samples_between(a, b)
            store.commit()
        except BaseException:
            store.rollback()
            raise
    ups: list[tuple[float, float, float | None]] = []  # (start, stop, the downtime's start before it)
    lo, came_back = t0, None
    for a, b in spans:
        if a > lo:
            ups.append((lo, a, came_back))
        lo, came_back = b, a
    if lo <= t1:
        ups.append((lo, t1, came_back))
    for lo, hi, down_since in ups:
        run.restarts += down_since is not None
        _segment(store, rules, lo, hi, flush_s, down_since, run)
    return run


def _segment(
    store: Store,
    rules: list[Rule],
    lo: float,
    hi: float,
    flush_s: float,
    down_since: float | None,
    run: AgentRun,
) -> None:
    """One life of the agent, from its start at `lo` to its stop at `hi`: a fresh scheduler, its flushes
    (`down_since`: when the agent went down before this start, None for the first start)."""
    sched = RuleScheduler(list(rules))
    pipe = Pipeline(store, scheduler=sched)
    urgent_kinds = URGENT_EVENT_KINDS | sched.event_kinds()
    moments: dict[float, bool] = {}  # flush time -> urgent
    k = 0
    while lo + k * flush_s < hi:
        moments[lo + k * flush_s] = False
        k += 1
    moments[hi] = False  # the final flush when the agent stops
    if down_since is not None:  # the kernel log's backlog of the downtime, read at the start: flushed at once
        moments[lo] = bool(_urgent_events(store, urgent_kinds, down_since, lo))
    for t in _urgent_events(store, urgent_kinds, lo, hi) + _metric_changes(
        store, sched.instant_metrics(), lo, hi
    ):
        moments[t] = True
    for now in sorted(moments):
        urgent = moments[now]
        before = sched.evaluations
        pipe.evaluate_due(now, urgent=urgent, final=now == hi)
        run.flushes += 1
        run.urgent_flushes += urgent
        run.evaluations += sched.evaluations - before
