"""Read fleettool's own events (the `events.jsonl` of a recording: NVML's errors and events, the agent's health)
into the store, each line through formats.fleettool_events. A line that is no such event is named (file:line)
and skipped; the events keep their node, GPU, UUID, PCI id, code, source and time as the agent had them."""

from __future__ import annotations

from pathlib import Path

from fleettool.formats.errors import ParseIssue
from fleettool.formats.fleettool_events import parse_event
from fleettool.ingest.report import FileReport, IngestOptions
from fleettool.model import Event
from fleettool.recording.files import iter_lines
from fleettool.store import Store


def read_fleettool_events(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    events: list[Event] = []
    for lineno, line in enumerate(iter_lines(path), 1):
        if not line.strip():
            continue
        try:
            ev = parse_event(line)
        except ValueError as e:
            rep.issues.append(ParseIssue(str(path), lineno, f"not a fleettool event: {e}"))
            continue
        events.append(ev)
        rep.nodes.add(ev.node)
        if ev.ts is None:
            rep.untimed += 1
        else:
            rep.t_min = ev.ts if rep.t_min is None else min(rep.t_min, ev.ts)
            rep.t_max = ev.ts if rep.t_max is None else max(rep.t_max, ev.ts)
    rep.events += store.write_events(events)
    timed = len(events) - rep.untimed
    parts = [f"{timed} at the agent's time (unix seconds)"] if timed else []
    if rep.untimed:
        parts.append(f"{rep.untimed} with no time")
    rep.time_source = "; ".join(parts) or None
