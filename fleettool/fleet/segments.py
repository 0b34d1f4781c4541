"""Export the store as Parquet segments, safely.

Layout: <root>/<table>/date=YYYY-MM-DD/node=<node>/<table>-<node>-<hour>.parquet for time series (samples,
samples_1m, events), one segment per node and whole hour; and <root>/<table>/node=<node>/<table>-<node>.parquet
snapshots for state that changes (alerts, gpus, nccl runs and rows, burn-in results):
<root>/<table>/exporter=<who>/<table>-<who>.parquet, replaced whole at each export.

Safety: a segment is visible whole or not at all. A directory gets a hidden temporary file renamed over the
final name (atomic on POSIX and NFS); object storage gets one PUT/multipart upload that is only visible once
complete. Readers skip names starting with '.' or '_'. Only whole hours are exported, named by the hour, and the
store remembers per table the last hour exported only after its segment is written: a crash mid-export loses
nothing (the next export writes the same hour again, to the same name, with the same rows).
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from fleettool.fleet.location import Location
from fleettool.store import Store
from fleettool.store.meta import get_meta, set_meta

SERIES = {"samples": "ts", "samples_1m": "minute", "events": "ts"}
SNAPSHOTS = ("alerts", "gpus", "nccl_runs", "nccl_rows", "burnin_results")
HOUR = 3600


@dataclass
class ExportReport:
    segments: int = 0
    rows: int = 0
    bytes: int = 0
    by_table: dict[str, int] = field(default_factory=dict)


def _hour(t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(t // HOUR * HOUR, tz=dt.timezone.utc).replace(tzinfo=None)


ROW_GROUP = 16384  # rows are sorted by metric: a row group holds about one metric, so readers skip the others


def write_atomic(loc: Location, path: str, table: pa.Table) -> int:
    """Write one Parquet file so that readers see all of it or nothing."""
    parent = path.rsplit("/", 1)[0]
    loc.fs.create_dir(parent, recursive=True)
    if isinstance(loc.fs, pafs.LocalFileSystem):
        tmp = f"{parent}/.tmp-{uuid.uuid4().hex}.parquet"
        pq.write_table(
            table, tmp, filesystem=loc.fs, compression="zstd", compression_level=6, row_group_size=ROW_GROUP
        )
        loc.fs.move(tmp, path)
    else:  # object storage: the object appears only when its upload completes
        pq.write_table(
            table, path, filesystem=loc.fs, compression="zstd", compression_level=6, row_group_size=ROW_GROUP
        )
    return int(loc.fs.get_file_info(path).size or 0)


def export(
    store: Store,
    loc: Location,
    exporter: str,
    now: float | None = None,
    *,
    include_current_hour: bool = False,
) -> ExportReport:
    """Export every whole hour not exported yet, then the snapshots (the whole table, named after the exporting
    node or store, replaced each time). Idempotent."""
    now = time.time() if now is None else now
    cutoff = (now // HOUR + (1 if include_current_hour else 0)) * HOUR
    rep = ExportReport()
    for table, tcol in SERIES.items():
        wm_key = f"export:{table}:{loc.url}"
        wm = get_meta(store, wm_key)
        lo = dt.datetime.fromisoformat(wm) if wm else None
        params: list[object] = [_hour(cutoff)]
        where = f"{tcol} < ?"
        if lo is not None:
            where += f" AND {tcol} >= ?"
            params.append(lo)
        hours = [
            r["h"]
            for r in store.query(
                f"SELECT DISTINCT time_bucket(INTERVAL 1 HOUR, {tcol}) AS h FROM {table} "
                f"WHERE {tcol} IS NOT NULL AND {where} ORDER BY h",
                params,
            )
        ]
        order = {"samples": "metric, gpu, sub, ts", "samples_1m": "metric, gpu, sub, minute"}.get(table, "ts")
        last_done = None
        for h in hours:
            # one query per hour, every node at once, sorted by node: each node's rows are one slice
            t = store.arrow(
                f"SELECT * FROM {table} WHERE {tcol} >= ? AND {tcol} < ? + INTERVAL 1 HOUR ORDER BY node, {order}",
                [h, h],
            )
            for node, piece in _by_node(t):
                name = f"{table}-{_safe(node)}-{h.strftime('%Y%m%dT%H')}.parquet"
                path = loc.path(table, f"date={h.strftime('%Y-%m-%d')}", f"node={_safe(node)}", name)
                rep.bytes += write_atomic(loc, path, piece)
                rep.segments += 1
                rep.rows += piece.num_rows
                rep.by_table[table] = rep.by_table.get(table, 0) + piece.num_rows
            last_done = h
        if last_done is not None:
            # the watermark moves only once every segment of these hours is written
            set_meta(store, wm_key, (last_done + dt.timedelta(hours=1)).isoformat())
        rep.segments += _compact_days(store, loc, table, tcol, order, cutoff)
    who = _safe(exporter)
    for table in SNAPSHOTS:
        t = store.arrow(f"SELECT * FROM {table}")
        if t.num_rows == 0:
            continue
        path = loc.path(table, f"exporter={who}", f"{table}-{who}.parquet")
        rep.bytes += write_atomic(loc, path, t)
        rep.segments += 1
        rep.by_table[table] = rep.by_table.get(table, 0) + t.num_rows
    return rep


def _compact_days(store: Store, loc: Location, table: str, tcol: str, order: str, cutoff: float) -> int:
    """Once every hour of a day is exported, its hourly segments of each node become one daily segment (half
    the bytes: Parquet's per-file overhead and zstd's window both favour bigger files). The daily file is
    written first, then the hourly ones are deleted; readers ignore hourly files beside a daily one, so a crash
    in between shows each row once."""
    wm = get_meta(store, f"export:{table}:{loc.url}")
    if not wm:
        return 0
    done_until = min(dt.datetime.fromisoformat(wm), _hour(cutoff))
    days = [
        r["d"]
        for r in store.query(
            f"SELECT DISTINCT CAST({tcol} AS DATE) AS d FROM {table} WHERE {tcol} < ? ORDER BY d",
            [dt.datetime.combine(done_until.date(), dt.time())],
        )
    ]
    written = 0
    for day in days:
        key = f"compact:{table}:{loc.url}:{day.isoformat()}"
        if get_meta(store, key):
            continue
        t = store.arrow(f"SELECT * FROM {table} WHERE CAST({tcol} AS DATE) = ? ORDER BY node, {order}", [day])
        for node, piece in _by_node(t):
            part = loc.path(table, f"date={day.isoformat()}", f"node={_safe(node)}")
            daily = f"{part}/{table}-{_safe(node)}-{day.strftime('%Y%m%d')}-day.parquet"
            write_atomic(loc, daily, piece)
            written += 1
            for f in loc.fs.get_file_info(pafs.FileSelector(part, allow_not_found=True)):
                if (
                    f.type == pafs.FileType.File
                    and f.path.endswith(".parquet")
                    and not f.path.endswith("-day.parquet")
                ):
                    loc.fs.delete_file(f.path)
        set_meta(store, key, "1")
    return written


def _by_node(t: pa.Table) -> list[tuple[str, pa.Table]]:
    """Slices of a table sorted by node, one per node."""
    if t.num_rows == 0:
        return []
    import pyarrow.compute as pc

    ends = pc.run_end_encode(t.column("node").combine_chunks())
    out = []
    start = 0
    for node, end in zip(ends.values.to_pylist(), ends.run_ends.to_pylist(), strict=True):
        out.append((node, t.slice(start, end - start)))
        start = end
    return out


def _safe(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-._" else "_" for c in str(s))
