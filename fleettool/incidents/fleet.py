"""Incidents across a fleet location: every node's alerts folded together with the cluster's topology, jobs,
lifecycle and silences (what each agent exports beside its alerts), so one fault that hit many nodes is one
incident (`fleettool fleet incidents`, `fleettool tui --fleet`).

Incremental through fleettool.fleet.cache: only segments new or rewritten since the last run are read from the
location. The fold itself is of every alert each time, as in the agent (an incident is the whole set's truth);
`paged.json` in the cache keeps the ids of incidents that paged, so `page` stays true on later runs, as it does
in a store.
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path

from fleettool.fleet.cache import SyncReport, sync
from fleettool.fleet.location import Location, open_location
from fleettool.fleet.read import open_fleet
from fleettool.fleet.segments import SERIES, SNAPSHOTS
from fleettool.incidents.fold import fold_incidents
from fleettool.incidents.inputs import load
from fleettool.store import Store
from fleettool.store.incidents import replace_incidents

# what the fold reads (fleettool.incidents.inputs): the alerts with their GPUs (PCI ids, drivers), topology, jobs,
# the lifecycle's audit trail and silences (planned work)
FOLD_TABLES = ("alerts", "gpus", "node_topology", "jobs", "node_audit", "silences")


def fold(store: Store, cache: Path | None = None) -> int:
    """Fold the store's alerts into incidents and store them; with a cache, an incident that paged on an earlier
    run keeps page = true. The incidents written."""
    records = fold_incidents(*load(store))
    if cache is None:
        return replace_incidents(store, records)
    paged_path = cache / "paged.json"
    paged: set[str] = set()
    if paged_path.exists():
        try:
            paged = set(json.loads(paged_path.read_text()))
        except ValueError:
            paged = set()
    records = [dataclasses.replace(r, page=True) if r.incident_id in paged else r for r in records]
    paged |= {r.incident_id for r in records if r.page}
    tmp = cache / f".paged-{uuid.uuid4().hex}.json"
    tmp.write_text(json.dumps(sorted(paged)))
    os.replace(tmp, paged_path)
    return replace_incidents(store, records)


def open_fleet_incidents(
    loc: Location,
    *,
    cache: Path | None = None,
    prepare: Callable[[Store], object] | None = None,
    judge: Callable[[Store], object] | None = None,
) -> tuple[Store, SyncReport | None]:
    """The fleet as one store whose incidents tables hold the fleet-wide fold: of the agents' exported alerts,
    or, given `judge` (what replaces the store's alerts with the rules' over every node's data, from the CLI:
    the engine sits above this layer), of the alerts it writes; then every table is read, into memory. With a
    cache, only segments new since the last run are read from the location. `prepare` runs on the store first
    (topology files given on the command line)."""
    tables = (*SERIES, *SNAPSHOTS) if judge is not None else FOLD_TABLES
    rep = None
    src: Location = loc
    if cache is not None:
        rep = sync(loc, cache, tables)
        src = open_location(str(cache / "segments"), create=True)
    store = open_fleet(src, tables=tables, materialize=judge is not None)
    try:
        if prepare is not None:
            prepare(store)
        if judge is not None:
            judge(store)
        fold(store, cache)
    except BaseException:
        store.close()
        raise
    return store, rep


def open_fleet_folded(url: str, prepare: Callable[[Store], object] | None = None) -> Store:
    """Every table of the fleet location (what the TUI reads) with its incidents folded: the TUI's fleet source.
    `prepare` runs on the store first (the TUI's --topology files)."""
    store = open_fleet(url)
    try:
        if prepare is not None:
            prepare(store)
        fold(store)
    except BaseException:
        store.close()
        raise
    return store
