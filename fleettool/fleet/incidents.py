"""Incidents across the fleet: every node's alerts folded together with the cluster's topology, jobs, lifecycle
and silences (what each agent exports beside its alerts), so one fault that hit many nodes is one incident
(`fleettool fleet incidents`, `fleettool tui --fleet`).

Incremental: a local cache directory mirrors the segments the fold reads. Its manifest (`manifest.json`) holds each
segment's path, size and modification time as the location listed them; a run lists the location (one listing
per table), copies only the segments that are new or whose size or time changed (an export rewrote them), removes
the ones the location no longer has (a daily segment replacing its hours, an exporter gone), then folds over the
local copies. The fold itself is of every alert each time, as in the agent (an incident is the whole set's truth);
`paged.json` keeps the ids of incidents that paged, so `page` stays true on later runs, as it does in a store.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fleettool.fleet.location import Location, open_location
from fleettool.fleet.read import open_fleet, segment_infos
from fleettool.fleet.segments import SERIES, SNAPSHOTS
from fleettool.store import Store

# what the fold reads (fleettool.incidents.inputs): the alerts with their GPUs (PCI ids, drivers), topology, jobs,
# the lifecycle's audit trail and silences (planned work)
FOLD_TABLES = ("alerts", "gpus", "node_topology", "jobs", "node_audit", "silences")
_CHUNK = 1 << 20


@dataclass
class SyncReport:
    read: int = 0  # segments copied this run (new or rewritten)
    kept: int = 0  # segments already in the cache, unchanged
    dropped: int = 0  # cached segments the location no longer has
    bytes: int = 0  # bytes copied

    def line(self, cache: Path) -> str:
        total = self.read + self.kept
        gone = f", {self.dropped} gone" if self.dropped else ""
        return (
            f"read {self.read} of {total} segments ({self.kept} cached{gone}, {self.bytes} bytes) via {cache}"
        )


def default_cache(url: str) -> Path:
    """~/.cache/fleettool/fleet/<hash of the location> (XDG_CACHE_HOME honoured)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "fleettool" / "fleet" / hashlib.sha256(url.encode()).hexdigest()[:16]


def _relative(loc: Location, path: str) -> str:
    root = loc.root.rstrip("/") + "/" if loc.root else ""
    return path[len(root) :] if root and path.startswith(root) else path.lstrip("/")


def _copy(loc: Location, path: str, dest: Path) -> int:
    """Copy one segment to dest, whole or not at all (a hidden temporary name, then a rename)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".tmp-{uuid.uuid4().hex}.parquet"
    n = 0
    try:
        with loc.fs.open_input_stream(path) as src, open(tmp, "wb") as out:
            while chunk := src.read(_CHUNK):
                out.write(chunk)
                n += len(chunk)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return n


def sync(loc: Location, cache: Path, tables: tuple[str, ...]) -> SyncReport:
    """Bring the cache's copy of `tables` up to the location's segments; what was read."""
    mirror = cache / "segments"
    manifest_path = cache / "manifest.json"
    cache.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, list[int]] = {}
    if manifest_path.exists():
        try:
            manifest = json.loads(manifest_path.read_text())
        except ValueError:
            manifest = {}  # a torn manifest: everything is read again
    rep = SyncReport()
    seen: set[str] = set()
    for table in tables:
        for f in segment_infos(loc, table):
            rel = _relative(loc, f.path)
            seen.add(rel)
            stamp = [int(f.size or 0), int(f.mtime_ns or 0)]
            if manifest.get(rel) == stamp and (mirror / rel).exists():
                rep.kept += 1
                continue
            rep.bytes += _copy(loc, f.path, mirror / rel)
            rep.read += 1
            manifest[rel] = stamp
    for rel in [r for r in manifest if r.split("/", 1)[0] in tables and r not in seen]:
        (mirror / rel).unlink(missing_ok=True)
        del manifest[rel]
        rep.dropped += 1
    tmp = cache / f".manifest-{uuid.uuid4().hex}.json"
    tmp.write_text(json.dumps(manifest, separators=(",", ":")))
    os.replace(tmp, manifest_path)
    return rep


def fold(store: Store, cache: Path | None = None) -> int:
    """Fold the store's alerts into incidents and store them; with a cache, an incident that paged on an earlier
    run keeps page = true. The incidents written."""
    from fleettool.incidents.fold import fold_incidents
    from fleettool.incidents.inputs import load
    from fleettool.store.incidents import replace_incidents

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
    loc: Location, *, cache: Path | None = None, judge: Callable[[Store], object] | None = None
) -> tuple[Store, SyncReport | None]:
    """The fleet as one store whose incidents tables hold the fleet-wide fold: of the agents' exported alerts,
    or, given `judge` (what replaces the store's alerts with the rules' over every node's data, from the CLI:
    the engine sits above this layer), of the alerts it writes; then every table is read, into memory. With a
    cache, only segments new since the last run are read from the location."""
    tables = (*SERIES, *SNAPSHOTS) if judge is not None else FOLD_TABLES
    rep = None
    src: Location = loc
    if cache is not None:
        rep = sync(loc, cache, tables)
        src = open_location(str(cache / "segments"), create=True)
    store = open_fleet(src, tables=tables, materialize=judge is not None)
    try:
        if judge is not None:
            judge(store)
        fold(store, cache)
    except BaseException:
        store.close()
        raise
    return store, rep


def open_fleet_folded(url: str) -> Store:
    """Every table of the fleet location (what the TUI reads) with its incidents folded: the TUI's fleet source."""
    store = open_fleet(url)
    try:
        fold(store)
    except BaseException:
        store.close()
        raise
    return store
