"""Export the store as Parquet segments, safely, in bounded memory, late rows included.

Layout: <root>/<table>/date=YYYY-MM-DD/node=<node>/<table>-<node>-<YYYYMMDDTHH>.parquet for time series
(samples, samples_1m, events), one segment per node and whole hour; once a day is complete, one
<table>-<node>-<YYYYMMDD>-day.parquet per node replaces its hourly segments. Snapshots of state that changes
(alerts, gpus, nccl runs and rows, burn-in results, and what the fleet's incident fold reads beside the alerts:
node topology, jobs, the lifecycle's audit trail, silences): <root>/<table>/exporter=<who>/<table>-<who>.parquet,
replaced whole at an export when its rows changed since the last (a count and a hash of every row, in meta key
`exported-snapshot:<table>:<who>:<url>`) or it is missing there. A silence is its agent's own: one that matches
any node is exported once per node of the exporting store (its alerts' and GPUs' nodes), so fleet-wide it still
covers that store's nodes only. A node or exporter name is percent-encoded in paths (`gpu 1` -> `gpu%201`,
`gpu/1` -> `gpu%2F1`, `gpu_1` stays): distinct names give distinct segments, and DuckDB's hive reader decodes
them back.

What is exported: the store keeps, per table, location, node and unit (an hour, or a day once compacted), the
row count and oldest time it exported (meta key `exported:<table>:<url>`), updated after each segment is
written and read back. A unit is written again, whole, from the store when it holds more rows than were
exported: rows that arrive late (a replay of an older recording, a wall clock stepped back) reach the fleet at
the next export, in their own hour's (or day's) segment. A unit whose oldest row is newer than the exported one
has lost rows to retention; it is not rewritten (that would delete those rows from the fleet too): late raw rows
older than the store's raw retention reach the fleet as their 1-minute rollups only. A crash mid-export loses
nothing: the next export writes the units not recorded again, to the same names.

Memory: rows are streamed from DuckDB as Arrow record batches straight into the Parquet writer (write.py), by
queries small enough that DuckDB sorts them within the agent's 16 MB memory_limit: for raw samples one metric
of one node and hour at a time, for the other tables one node and hour.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from fleettool.fleet.location import Location
from fleettool.fleet.write import UploadLeftOpen, abort_key, write_segment
from fleettool.store import Store
from fleettool.store.meta import get_meta, set_meta

SERIES = {"samples": "ts", "samples_1m": "minute", "events": "ts"}
SNAPSHOTS = (
    "alerts",
    "gpus",
    "nccl_runs",
    "nccl_rows",
    "burnin_results",
    "node_topology",
    "jobs",
    "node_audit",
    "silences",
)
# a silence with no node matcher covers the exporting store's own nodes: written once per node, its id made unique
_SILENCES_SQL = (
    "SELECT s.* REPLACE (CASE WHEN s.node IS NULL THEN s.silence_id || '@' || n.node ELSE s.silence_id END "
    "AS silence_id, coalesce(s.node, n.node) AS node) FROM silences s LEFT JOIN "
    "(SELECT node FROM alerts WHERE node IS NOT NULL UNION SELECT node FROM gpus WHERE node IS NOT NULL) n "
    "ON s.node IS NULL WHERE s.node IS NOT NULL OR n.node IS NOT NULL"
)
HOUR = 3600
_H = dt.timedelta(hours=1)
_ORDER = {"samples": "gpu, sub, ts", "samples_1m": "metric, gpu, sub, minute", "events": "ts"}
BATCH = 8192


@dataclass
class ExportReport:
    segments: int = 0
    rows: int = 0  # rows of the time series written (read back from the segments)
    bytes: int = 0
    by_table: dict[str, int] = field(default_factory=dict)  # rows written per table, snapshots included
    late: int = 0  # segments written again because their hour or day received rows after its export

    def add(self, table: str, rows: int, size: int, *, series: bool) -> None:
        self.segments += 1
        self.bytes += size
        self.rows += rows if series else 0
        self.by_table[table] = self.by_table.get(table, 0) + rows


def escape(name: object) -> str:
    """A name as a path component: unique (percent-encoding, never collapsing), hive-decodable."""
    return urllib.parse.quote(str(name), safe="-._~")


def _hour(t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(t // HOUR * HOUR, tz=dt.timezone.utc).replace(tzinfo=None)


def _state_key(table: str, loc: Location) -> str:
    return f"exported:{table}:{loc.url}"


def _open_key(loc: Location) -> str:
    return f"export-open-uploads:{loc.url}"


def _batches(store: Store, sql: str, params: list[Any]) -> Iterator[pa.RecordBatch]:
    yield from store.con.sql(sql, params=params).to_arrow_reader(BATCH)


def _unit_batches(
    store: Store, table: str, tcol: str, node: str, lo: dt.datetime, hi: dt.datetime
) -> Iterator[pa.RecordBatch]:
    """A node's rows of [lo, hi) in segment order, hour by hour (and metric by metric for raw samples)."""
    hours = []
    h = lo
    while h < hi:
        hours.append(h)
        h += _H
    if table == "samples":
        metrics = [
            r[0]
            for r in store.rows(
                "SELECT DISTINCT metric FROM samples WHERE ts >= ? AND ts < ? AND node = ? ORDER BY 1",
                [lo, hi, node],
            )
        ]
        for m in metrics:
            for h in hours:
                yield from _batches(
                    store,
                    f"SELECT * FROM samples WHERE ts >= ? AND ts < ? AND node = ? AND metric = ? "
                    f"ORDER BY {_ORDER[table]}",
                    [h, h + _H, node, m],
                )
        return
    for h in hours:
        yield from _batches(
            store,
            f"SELECT * FROM {table} WHERE {tcol} >= ? AND {tcol} < ? AND node = ? ORDER BY {_ORDER[table]}",
            [h, h + _H, node],
        )


def _due(state: dict[str, list[float]], key: str, n: int, oldest: float) -> tuple[bool, bool]:
    """(write it, it is a rewrite): never exported, or more rows now and none lost to retention."""
    done = state.get(key)
    if done is None:
        return True, False
    grew = n > done[0] and oldest <= done[1]
    return grew, grew


def _counts(
    store: Store, table: str, tcol: str, cut: dt.datetime
) -> dict[str, dict[dt.datetime, list[float]]]:
    """Per node, per hour before cut: [rows, oldest epoch]."""
    out: dict[str, dict[dt.datetime, list[float]]] = {}
    for node, h, n, oldest in store.rows(
        f"SELECT node, time_bucket(INTERVAL 1 HOUR, {tcol}) AS h, count(*), epoch(min({tcol})) FROM {table} "
        f"WHERE {tcol} IS NOT NULL AND {tcol} < ? GROUP BY ALL",
        [cut],
    ):
        out.setdefault(node, {})[h] = [int(n), float(oldest)]
    return out


def _export_series(store: Store, loc: Location, table: str, cut: dt.datetime, rep: ExportReport) -> None:
    tcol = SERIES[table]
    skey = _state_key(table, loc)
    state: dict[str, list[float]] = json.loads(get_meta(store, skey) or "{}")
    for node, hours in sorted(_counts(store, table, tcol, cut).items()):
        days: dict[dt.date, dict[dt.datetime, list[float]]] = {}
        for h, c in hours.items():
            days.setdefault(h.date(), {})[h] = c
        for day, dh in sorted(days.items()):
            d0 = dt.datetime.combine(day, dt.time())
            part = loc.path(table, f"date={day.isoformat()}", f"node={escape(node)}")
            if d0 + dt.timedelta(days=1) <= cut:  # a complete day: one daily segment
                units = [(d0, d0 + dt.timedelta(days=1), day.isoformat(), f"{day:%Y%m%d}-day")]
                n = sum(int(c[0]) for c in dh.values())
                counts = {units[0][2]: [n, min(c[1] for c in dh.values())]}
            else:
                units = [(h, h + _H, f"{h:%Y-%m-%dT%H}", f"{h:%Y%m%dT%H}") for h in sorted(dh)]
                counts = {f"{h:%Y-%m-%dT%H}": c for h, c in dh.items()}
            for lo, hi, unit, suffix in units:
                key = f"{node}\t{unit}"
                write, late = _due(state, key, int(counts[unit][0]), counts[unit][1])
                if not write:
                    continue
                path = f"{part}/{table}-{escape(node)}-{suffix}.parquet"
                rows, size = write_segment(loc, path, _unit_batches(store, table, tcol, node, lo, hi))
                rep.add(table, rows, size, series=True)
                rep.late += late
                if hi - lo > _H:  # the daily segment replaces the day's hourly ones
                    _drop_hourly(loc, part)
                    for k in [k for k in state if k.startswith(f"{key}T")]:
                        del state[k]
                # rows, as read back: more written than counted means rows arrived meanwhile (counted next time)
                state[key] = [rows, counts[unit][1]]
                set_meta(store, skey, json.dumps(state, separators=(",", ":")))


def _drop_hourly(loc: Location, part: str) -> None:
    """Delete a day partition's hourly segments once its daily one is written. Readers ignore hourly files
    beside a daily one, so a crash in between shows each row once."""
    for f in loc.fs.get_file_info(pafs.FileSelector(part, allow_not_found=True)):
        name = f.base_name
        hourly = name.endswith(".parquet") and not name.endswith("-day.parquet") and not name.startswith(".")
        if f.type == pafs.FileType.File and hourly:
            loc.fs.delete_file(f.path)


def _abort_left_open(store: Store, loc: Location) -> None:
    """Abort the uploads an earlier export could not abort (S3 was frozen or unreachable then)."""
    left = json.loads(get_meta(store, _open_key(loc)) or "[]")
    if not left:
        return
    still = []
    for key in left:
        try:
            abort_key(loc, key)
        except OSError:
            still.append(key)
    set_meta(store, _open_key(loc), json.dumps(still))


def export(
    store: Store,
    loc: Location,
    exporter: str,
    now: float | None = None,
    *,
    include_current_hour: bool = False,
) -> ExportReport:
    """Export every whole hour not exported yet or grown since, then the snapshots (the whole table, named
    after the exporting node or store, replaced each time). Idempotent."""
    now = time.time() if now is None else now
    cut = _hour((now // HOUR + (1 if include_current_hour else 0)) * HOUR)
    rep = ExportReport()
    try:
        _abort_left_open(store, loc)
        for table in SERIES:
            _export_series(store, loc, table, cut, rep)
        who = escape(exporter)
        for table in SNAPSHOTS:
            if not store.scalar(f"SELECT count(*) FROM {table}"):
                continue
            path = loc.path(table, f"exporter={who}", f"{table}-{who}.parquet")
            sql = _SILENCES_SQL if table == "silences" else f"SELECT * FROM {table}"
            # a snapshot is written only when it changed (rows and their content) or is missing there, so a
            # reader that keeps what it read (fleet incidents' cache) reads it again only when it changed
            done = f"exported-snapshot:{table}:{who}:{loc.url}"
            stamp = "{}:{}".format(*store.rows(f"SELECT count(*), sum(hash(q)) FROM ({sql}) q")[0])
            if get_meta(store, done) == stamp and loc.fs.get_file_info(path).type == pafs.FileType.File:
                continue
            rows, size = write_segment(loc, path, _batches(store, sql, []))
            rep.add(table, rows, size, series=False)
            set_meta(store, done, stamp)
    except UploadLeftOpen as e:
        left = json.loads(get_meta(store, _open_key(loc)) or "[]")
        set_meta(store, _open_key(loc), json.dumps([*left, e.key]))
        raise
    return rep
