"""The telemetry writers of the store: samples, events, the GPU inventory and which pod used which GPU, NCCL
runs, the ingest ledger, and the retention that rolls raw samples into 1-minute rows. `Store` inherits them.

Two ways in for samples: replay hands over Arrow tables (pyarrow imported there, on first use); the agent hands
over its buffer's Sample rows, which go in as one INSERT of `unnest()`ed column lists, so the agent never loads
pyarrow or numpy (about 40 MiB of its resident memory; bench/agent_overhead.py)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from fleettool.model import Event, GpuInfo, PodUse, Sample, canonical_pci_bus_id
from fleettool.store.peaks import PeakWrites
from fleettool.store.schema import PEAK_METRICS
from fleettool.store.values import db_time, dumps_evidence

if TYPE_CHECKING:
    import pyarrow as pa

# nccl_rows' columns after run_id, with their types (fleettool/store/schema.py)
_NCCL_ROW_COLUMNS = (
    ("size_bytes", "BIGINT"),
    ("count", "BIGINT"),
    ("dtype", "VARCHAR"),
    ("redop", "VARCHAR"),
    ("root", "INTEGER"),
    ("oop_time_us", "DOUBLE"),
    ("oop_algbw_gbps", "DOUBLE"),
    ("oop_busbw_gbps", "DOUBLE"),
    ("oop_wrong", "BIGINT"),
    ("ip_time_us", "DOUBLE"),
    ("ip_algbw_gbps", "DOUBLE"),
    ("ip_busbw_gbps", "DOUBLE"),
    ("ip_wrong", "BIGINT"),
)


_EPOCH = dt.datetime(1970, 1, 1)


def _micros(t: float | None) -> int | None:
    """Unix seconds -> whole microseconds (what make_timestamp takes), rounded as the Arrow path rounds."""
    return None if t is None else int(round(t * 1e6))


# column lists -> rows: unnest() of several lists in one SELECT walks them side by side
_SAMPLE_ROWS = (
    "INSERT INTO samples SELECT make_timestamp(unnest($1)), unnest($2), unnest($3), unnest($4), "
    "unnest($5), unnest($6), unnest($7)"
)
_EVENT_ROWS = (
    "INSERT INTO events (ts, node, gpu, uuid, pci_bus_id, kind, code, message, raw, source, detail) "
    "SELECT make_timestamp(unnest($1)), unnest($2), unnest($3), unnest($4), unnest($5), unnest($6), "
    "unnest($7), unnest($8), unnest($9), unnest($10), unnest($11)::JSON"
)


class TelemetryWrites(PeakWrites):
    """Writes of what collectors and readers produce. Mixed into Store."""

    def write_samples(self, table: pa.Table | Sequence[Sample]) -> int:
        if isinstance(table, Sequence):  # the agent's rows: no Arrow
            rows = table
            if not rows:
                return 0
            self._insert_columns(
                _SAMPLE_ROWS,
                [
                    [_micros(s.ts) for s in rows],
                    [s.node for s in rows],
                    [s.gpu for s in rows],
                    [s.uuid for s in rows],
                    [s.metric for s in rows],
                    [s.sub for s in rows],
                    [s.value for s in rows],
                ],
            )
            peaks = [m for s in rows if s.metric in PEAK_METRICS and (m := _micros(s.ts)) is not None]
            if peaks:  # the hours they fall in (store/peaks.py), at the microsecond the INSERT stored
                self.refresh_peaks(
                    _EPOCH + dt.timedelta(microseconds=min(peaks)),
                    _EPOCH + dt.timedelta(microseconds=max(peaks)),
                )
            return len(rows)
        if table.num_rows == 0:
            return 0
        self.con.register("_incoming_samples", table)
        try:
            self.con.execute(
                "INSERT INTO samples SELECT ts, node, gpu, uuid, metric, sub, value FROM _incoming_samples"
            )
            names = list(PEAK_METRICS)
            # fetchall, not fetchone: a result left unfinished blocks unregister() (DuckDB 2: ResourceInUse)
            span = self.con.execute(
                "SELECT min(ts), max(ts) FROM _incoming_samples WHERE metric IN (SELECT unnest(?))", [names]
            ).fetchall()
            self.refresh_peaks(*(span[0] if span else (None, None)))
        finally:
            self.con.unregister("_incoming_samples")
        return int(table.num_rows)

    def write_events(self, events: Iterable[Event]) -> int:
        evs = list(events)
        if not evs:
            return 0
        self._insert_columns(
            _EVENT_ROWS,
            [
                [_micros(e.ts) for e in evs],
                [e.node for e in evs],
                [e.gpu for e in evs],
                [e.uuid for e in evs],
                [canonical_pci_bus_id(e.pci_bus_id) for e in evs],
                [e.kind for e in evs],
                [e.code for e in evs],
                [e.message for e in evs],
                [e.raw for e in evs],
                [e.source for e in evs],
                [dumps_evidence(e.detail) if e.detail else None for e in evs],
            ],
        )
        return len(evs)

    def _insert_columns(self, sql: str, columns: list[list[Any]]) -> None:
        """One INSERT of rows given as column lists ($1..$n, each unnest()ed): Python objects straight into
        DuckDB, no Arrow (the agent's path)."""
        self.con.execute(sql, columns).fetchall()

    def upsert_gpus(self, gpus: Iterable[GpuInfo], seen_ts: float) -> None:
        rows = list(gpus)
        if not rows:
            return
        ts = db_time(seen_ts)
        for g in rows:
            if g.pci_bus_id is not None:  # nvidia-smi's form, whatever the source's
                g = dataclasses.replace(g, pci_bus_id=canonical_pci_bus_id(g.pci_bus_id))
            if g.gpu is None and (g.uuid or g.pci_bus_id):  # known only by UUID/PCI id (the driver's lines)
                self.merge_gpu_identity(g.node, g.uuid, g.pci_bus_id, g.serial, seen_ts)
                continue
            hit = self.scalar(
                "SELECT count(*) FROM gpus WHERE node = ? AND gpu IS NOT DISTINCT FROM ? "
                "AND uuid IS NOT DISTINCT FROM ?",
                [g.node, g.gpu, g.uuid],
            )
            if hit:
                self.con.execute(
                    "UPDATE gpus SET last_seen = greatest(last_seen, ?), "
                    "pci_bus_id = coalesce(?, pci_bus_id), model = coalesce(?, model), "
                    "driver = coalesce(?, driver), serial = coalesce(?, serial) "
                    "WHERE node = ? AND gpu IS NOT DISTINCT FROM ? AND uuid IS NOT DISTINCT FROM ?",
                    [ts, g.pci_bus_id, g.model, g.driver, g.serial, g.node, g.gpu, g.uuid],
                )
            elif g.uuid and self.scalar(
                "SELECT count(*) FROM gpus WHERE node = ? AND gpu IS NULL AND uuid = ?", [g.node, g.uuid]
            ):  # known so far only from the driver's kernel lines: now we learn its index
                self.con.execute(
                    "UPDATE gpus SET gpu = ?, last_seen = greatest(last_seen, ?), "
                    "pci_bus_id = coalesce(?, pci_bus_id), model = coalesce(?, model), "
                    "driver = coalesce(?, driver), serial = coalesce(?, serial) "
                    "WHERE node = ? AND gpu IS NULL AND uuid = ?",
                    [g.gpu, ts, g.pci_bus_id, g.model, g.driver, g.serial, g.node, g.uuid],
                )
            else:
                self.con.execute(
                    "INSERT INTO gpus VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [g.node, g.gpu, g.uuid, g.pci_bus_id, g.model, g.driver, g.serial, ts, ts],
                )

    def record_pods(self, uses: Iterable[PodUse]) -> None:
        """Which pod used which GPU, as first/last seen intervals (one row per node, GPU, pod, container)."""
        spans: dict[tuple[str, int | None, str | None, str, str, str], list[float]] = {}
        for u in uses:
            k = (u.node, u.gpu, u.uuid, u.namespace, u.pod, u.container)
            sp = spans.setdefault(k, [u.ts, u.ts])
            sp[0], sp[1] = min(sp[0], u.ts), max(sp[1], u.ts)
        for (node, gpu, uuid, ns, pod, cont), (t0, t1) in spans.items():
            a, b = db_time(t0), db_time(t1)
            hit = self.scalar(
                "SELECT count(*) FROM gpu_pods WHERE node = ? AND gpu IS NOT DISTINCT FROM ? AND namespace = ? "
                "AND pod = ? AND container = ?",
                [node, gpu, ns, pod, cont],
            )
            if hit:
                self.con.execute(
                    "UPDATE gpu_pods SET first_seen = least(first_seen, ?), last_seen = greatest(last_seen, ?) "
                    "WHERE node = ? AND gpu IS NOT DISTINCT FROM ? AND namespace = ? AND pod = ? AND container = ?",
                    [a, b, node, gpu, ns, pod, cont],
                )
            else:
                self.con.execute(
                    "INSERT INTO gpu_pods VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [node, gpu, uuid, ns, pod, cont, a, b],
                )

    def merge_gpu_identity(
        self, node: str, uuid: str | None, pci: str | None, serial: str | None, seen_ts: float
    ) -> None:
        """What the driver's announcement lines say (PCI id -> UUID, board serial): fill in the GPU row that
        has the same UUID or PCI id, or add one without an index until NVML or dcgm-exporter names it."""
        ts = db_time(seen_ts)
        pci = canonical_pci_bus_id(pci)
        hit = self.scalar(
            "SELECT count(*) FROM gpus WHERE node = ? AND (uuid = ? OR (uuid IS NULL AND pci_bus_id = ?))",
            [node, uuid, pci],
        )
        if hit:
            self.con.execute(
                "UPDATE gpus SET uuid = coalesce(uuid, ?), pci_bus_id = coalesce(pci_bus_id, ?), "
                "serial = coalesce(?, serial), last_seen = greatest(last_seen, ?) "
                "WHERE node = ? AND (uuid = ? OR (uuid IS NULL AND pci_bus_id = ?))",
                [uuid, pci, serial, ts, node, uuid, pci],
            )
        else:
            self.con.execute(
                "INSERT INTO gpus VALUES (?, NULL, ?, ?, NULL, NULL, ?, ?, ?)",
                [node, uuid, pci, serial, ts, ts],
            )

    def resolve_event_gpus(self) -> int:
        """Give events that name only a PCI id (kernel lines) or a UUID their GPU index and UUID, from the
        inventory (NVML, dcgm-exporter labels, the driver's announcement lines). Returns rows updated."""
        before = int(self.scalar("SELECT count(*) FROM events WHERE gpu IS NULL") or 0)
        self.con.execute(
            """UPDATE events SET gpu = g.gpu, uuid = coalesce(events.uuid, g.uuid)
               FROM (SELECT node, pci_bus_id, any_value(gpu) AS gpu, any_value(uuid) AS uuid FROM gpus
                     WHERE pci_bus_id IS NOT NULL AND gpu IS NOT NULL GROUP BY node, pci_bus_id
                     HAVING count(DISTINCT gpu) = 1) g
               WHERE events.gpu IS NULL AND events.node = g.node AND events.pci_bus_id = g.pci_bus_id"""
        )
        self.con.execute(
            """UPDATE events SET gpu = g.gpu
               FROM (SELECT node, uuid, any_value(gpu) AS gpu FROM gpus
                     WHERE uuid IS NOT NULL AND gpu IS NOT NULL GROUP BY node, uuid) g
               WHERE events.gpu IS NULL AND events.node = g.node AND events.uuid = g.uuid"""
        )
        self.con.execute(
            """UPDATE events SET pci_bus_id = g.pci_bus_id
               FROM (SELECT node, gpu, any_value(pci_bus_id) AS pci_bus_id FROM gpus
                     WHERE pci_bus_id IS NOT NULL AND gpu IS NOT NULL GROUP BY node, gpu) g
               WHERE events.pci_bus_id IS NULL AND events.gpu IS NOT NULL AND events.node = g.node
                 AND events.gpu = g.gpu"""
        )
        after = int(self.scalar("SELECT count(*) FROM events WHERE gpu IS NULL") or 0)
        return before - after

    def write_nccl_run(
        self,
        *,
        run_id: str,
        ts: float | None,
        op: str,
        ranks: int,
        nodes: list[str],
        avg_busbw_gbps: float | None,
        peak_busbw_gbps: float | None,
        wrong: int | None,
        version: str | None,
        source: str,
        rows: Sequence[Any],
        model: str | None = None,
        finished: bool | None = None,
    ) -> None:
        """One nccl-tests invocation and every row of its table (none for a run that never printed one), the GPU
        model of its device list, and whether it finished (printed its footer)."""
        t = None if ts is None else db_time(ts)
        self.con.execute(
            "INSERT OR REPLACE INTO nccl_runs (run_id, ts, op, ranks, nodes, avg_busbw_gbps, peak_busbw_gbps, "
            "wrong, version, source, model, finished) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                run_id,
                t,
                op,
                ranks,
                nodes,
                avg_busbw_gbps,
                peak_busbw_gbps,
                wrong,
                version,
                source,
                model,
                finished,
            ],
        )
        self.con.execute("DELETE FROM nccl_rows WHERE run_id = ?", [run_id])
        if rows:  # one statement, column lists unnested side by side: no pyarrow (the burn-in image has none)
            typed = ", ".join(f"unnest(?::{typ}[])" for _, typ in _NCCL_ROW_COLUMNS)
            self.con.execute(
                f"INSERT INTO nccl_rows (run_id, {', '.join(c for c, _ in _NCCL_ROW_COLUMNS)}) SELECT ?, {typed}",
                [run_id, *([getattr(r, c) for r in rows] for c, _ in _NCCL_ROW_COLUMNS)],
            )

    def seen_digest(self, digest: str) -> bool:
        return bool(self.con.execute("SELECT 1 FROM ingests WHERE digest = ?", [digest]).fetchall())

    def record_ingest(
        self, digest: str, path: str, fmt: str, node: str | None, rows: int, issues: int
    ) -> None:
        # the time in UTC, as every store time: DuckDB's now() is the session's time zone's (TZ)
        self.con.execute(
            "INSERT OR REPLACE INTO ingests VALUES (?, ?, ?, ?, ?, ?, ?)",
            [digest, path, fmt, node, rows, issues, db_time(time.time())],
        )

    def gpu_uuid(self, node: str, gpu: int) -> str | None:
        """The UUID the inventory knows for this node's GPU index, or None."""
        v = self.scalar("SELECT any_value(uuid) FROM gpus WHERE node = ? AND gpu = ?", [node, gpu])
        return None if v is None else str(v)

    def drop_samples_between(self, start: float, end: float) -> int:
        """Drop the samples (raw and rolled up) with start <= ts < end: what an agent that was down then never
        collected (`fleettool replay --as-agent --down`). Events are kept. Returns the rows dropped."""
        n = 0
        for sql in (
            "DELETE FROM samples WHERE ts >= ? AND ts < ?",
            "DELETE FROM samples_1m WHERE minute >= ? AND minute < ?",
        ):
            got = self.con.execute(sql, [db_time(start), db_time(end)]).fetchall()
            n += int(got[0][0]) if got else 0
        self.refresh_peaks(db_time(start), db_time(end))
        return n

    # -- retention ----------------------------------------------------------------------------------------
    def apply_retention(self, now: float, raw_keep_s: float, rollup_keep_s: float) -> tuple[int, int]:
        """Roll raw samples older than raw_keep_s into 1-minute min/mean/max, drop them, and drop rollups
        older than rollup_keep_s. Whole minutes only, in one transaction. Returns (rolled, dropped)."""
        cutoff_s = (now - raw_keep_s) // 60 * 60
        cutoff = db_time(cutoff_s)
        old = db_time(now - rollup_keep_s)
        self.begin()
        try:
            rolled = self.con.execute(
                """INSERT INTO samples_1m
                   SELECT time_bucket(INTERVAL 1 MINUTE, ts) AS minute, node, gpu, uuid, metric, sub,
                          min(value), avg(value), max(value), count(*)::INTEGER
                   FROM samples WHERE ts < ? GROUP BY ALL""",
                [cutoff],
            ).fetchall()[0]
            self.con.execute("DELETE FROM samples WHERE ts < ?", [cutoff]).fetchall()
            dropped = self.con.execute("DELETE FROM samples_1m WHERE minute < ?", [old]).fetchall()[0]
            # rolling up keeps every hour's peak (a minute lies in its hour); the hours of the dropped rollups
            # again from what is left there (raw rows kept longer than rollups stay in their hours' peaks)
            first = self.scalar("SELECT min(hour) FROM peak_1h")
            if first is not None and first < old:
                self.refresh_peaks(first, old)
            self.commit()
        except Exception:
            self.rollback()
            raise
        return (int(rolled[0]) if rolled else 0, int(dropped[0]) if dropped else 0)
