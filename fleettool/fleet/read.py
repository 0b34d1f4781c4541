"""Read a fleet location as one store, so the rules engine, `fleettool fleet alerts` and the TUI run unchanged
over the whole fleet. Every table is the union of its segments (hive partitions date=/node=/exporter= in the
paths; hidden and temporary files skipped): DuckDB's own Parquet reader for a directory (parallel, with
row-group pruning), the Arrow dataset of pyarrow's S3 client for object storage.

`materialize=True` loads the series into the in-memory database first: one read of the segments, then every
rule runs on native tables (what fleet-wide evaluation wants: 30-odd rules each scanning the same data).
"""

from __future__ import annotations

import pyarrow.dataset as ds
import pyarrow.fs as pafs

from fleettool.fleet.location import Location, open_location
from fleettool.fleet.segments import SERIES, SNAPSHOTS
from fleettool.store import Store
from fleettool.store.attach import attach, dataset_source, parquet_source, source_columns


class FleetError(ValueError):
    """A fleet location that does not exist, is not a directory, or holds no segments."""


def check_fleet(url: str) -> Location:
    """The location, for a reader: FleetError when it is missing or nothing was exported there (one listing
    of its top level, however big the fleet). Other OSErrors (S3 unreachable, permissions) pass through."""
    try:
        loc = open_location(url, create=False)
    except (FileNotFoundError, NotADirectoryError) as e:
        raise FleetError(str(e)) from None
    tables = set(SERIES) | set(SNAPSHOTS)
    try:
        top = loc.fs.get_file_info(pafs.FileSelector(loc.root, allow_not_found=True))
    except FileNotFoundError:
        top = []
    if not any(f.type == pafs.FileType.Directory and f.base_name in tables for f in top):
        raise FleetError(
            f"{url}: no fleettool segments there (expected {', '.join(sorted(tables)[:3])}, ... directories; "
            "agents write them with --export-to, or fleettool export --to)"
        )
    return loc


def segment_infos(loc: Location, table: str) -> list[pafs.FileInfo]:
    """The segments a reader reads for `table` (path, size, mtime): hidden and temporary files skipped, and a
    partition's hourly segments once its daily one is there."""
    base = loc.path(table)
    if loc.fs.get_file_info(base).type != pafs.FileType.Directory:
        return []
    sel = pafs.FileSelector(base, recursive=True)
    found = [
        f
        for f in loc.fs.get_file_info(sel)
        if f.type == pafs.FileType.File
        and f.path.endswith(".parquet")
        and not f.base_name.startswith((".", "_"))
    ]
    compacted = {f.path.rsplit("/", 1)[0] for f in found if f.path.endswith("-day.parquet")}
    # a daily segment replaces the hourly ones of its partition (they may linger after a crash mid-compaction)
    keep = [f for f in found if f.path.endswith("-day.parquet") or f.path.rsplit("/", 1)[0] not in compacted]
    return sorted(keep, key=lambda f: f.path)


def _files(loc: Location, table: str) -> list[str]:
    return [f.path for f in segment_infos(loc, table)]


# snapshot tables every exporter writes its own copy of (each agent reads the cluster's topology and sacct):
# one row per key, the newest word first (a job that one exporter saw end, its state by the latest sacct)
_ONE_PER = {
    "node_topology": ("node, key", "updated DESC NULLS LAST"),
    "jobs": ("job_id, start_time", "end_time IS NULL, end_time DESC, state"),
    "silences": ("silence_id", "created DESC NULLS LAST"),
}


def _one_per_key(table: str, src: str, have: set[str]) -> str:
    if table not in _ONE_PER:
        return src
    key, newest = _ONE_PER[table]
    cols = {c.strip() for c in key.split(",")} | {c.split()[0] for c in newest.split(",")}
    if not cols <= have:
        return src
    return f"(SELECT * FROM {src} QUALIFY row_number() OVER (PARTITION BY {key} ORDER BY {newest}) = 1)"


def open_fleet(
    url: str | Location, *, tables: tuple[str, ...] | None = None, materialize: bool = False
) -> Store:
    loc = open_location(url, create=False) if isinstance(url, str) else url
    store = Store(":memory:")
    keep: list[object] = []
    store._fleet_datasets = keep  # type: ignore[attr-defined]  # the Arrow datasets live as long as the store
    local = isinstance(loc.fs, pafs.LocalFileSystem)
    for table in tables or (*SERIES, *SNAPSHOTS):
        files = _files(loc, table)
        if not files:
            continue
        if local:
            src = parquet_source(files)
            have = source_columns(store, src)
        else:
            dset = ds.dataset(files, filesystem=loc.fs, format="parquet")
            keep.append(dset)
            src = dataset_source(store, table, dset)
            have = set(dset.schema.names)
        # alerts: a real table, fleet-wide evaluation writes alerts into it. Series are clustered by metric,
        # as an agent's store is: every rule filters on one metric and DuckDB's zone maps then skip the rest
        order = "metric, node, gpu" if table in ("samples", "samples_1m") else ""
        src = _one_per_key(table, src, have)
        # the alerts and the small snapshots are copied in: the fold writes beside them, and topology files
        # given to a fleet command are added to the exported topology and jobs
        copy = table in ("alerts", *_ONE_PER, "node_audit") or materialize
        attach(store, table, src, have=have, copy=copy, order_by=order)
    return store
