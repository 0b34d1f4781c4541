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


def write_atomic(loc: Location, path: str, table: pa.Table) -> int:
    """Write one Parquet file so that readers see all of it or nothing."""
    parent = path.rsplit("/", 1)[0]
    loc.fs.create_dir(parent, recursive=True)
    if isinstance(loc.fs, pafs.LocalFileSystem):
        tmp = f"{parent}/.tmp-{uuid.uuid4().hex}.parquet"
        pq.write_table(table, tmp, filesystem=loc.fs, compression="zstd", compression_level=6)
        loc.fs.move(tmp, path)
    else:  # object storage: the object appears only when its upload completes
        pq.write_table(table, path, filesystem=loc.fs, compression="zstd", compression_level=6)
    return int(loc.fs.get_file_info(path).size or 0)


def _meta_get(store: Store, key: str) -> str | None:
    return store.scalar("SELECT value FROM meta WHERE key = ?", [key])


def _meta_set(store: Store, key: str, value: str) -> None:
    store.con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, value])


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
        wm = _meta_get(store, wm_key)
        lo = dt.datetime.fromisoformat(wm) if wm else None
        params: list[object] = [_hour(cutoff)]
        where = f"{tcol} < ?"
        if lo is not None:
            where += f" AND {tcol} >= ?"
            params.append(lo)
        hours = store.con.execute(
            f"SELECT DISTINCT time_bucket(INTERVAL 1 HOUR, {tcol}) AS h, node FROM {table} "
            f"WHERE {tcol} IS NOT NULL AND {where} ORDER BY h, node",
            params,
        ).fetchall()
        order = (
            "metric, gpu, sub, ts"
            if table == "samples"
            else ("metric, gpu, sub, minute" if table == "samples_1m" else "ts")
        )
        last_done = None
        for h, node in hours:
            t = store.con.sql(
                f"SELECT * FROM {table} WHERE node = $node AND {tcol} >= $h AND {tcol} < $h + INTERVAL 1 HOUR "
                f"ORDER BY {order}",
                params={"node": node, "h": h},
            ).to_arrow_table()
            name = f"{table}-{_safe(node)}-{h.strftime('%Y%m%dT%H')}.parquet"
            path = loc.path(table, f"date={h.strftime('%Y-%m-%d')}", f"node={_safe(node)}", name)
            rep.bytes += write_atomic(loc, path, t)
            rep.segments += 1
            rep.rows += t.num_rows
            rep.by_table[table] = rep.by_table.get(table, 0) + t.num_rows
            if last_done is None or h > last_done:
                last_done = h
        if last_done is not None:
            # the watermark moves only once every segment of these hours is written
            _meta_set(store, wm_key, (last_done + dt.timedelta(hours=1)).isoformat())
    who = _safe(exporter)
    for table in SNAPSHOTS:
        t = store.con.sql(f"SELECT * FROM {table}").to_arrow_table()
        if t.num_rows == 0:
            continue
        path = loc.path(table, f"exporter={who}", f"{table}-{who}.parquet")
        rep.bytes += write_atomic(loc, path, t)
        rep.segments += 1
        rep.by_table[table] = rep.by_table.get(table, 0) + t.num_rows
    return rep


def _safe(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-._" else "_" for c in str(s))
