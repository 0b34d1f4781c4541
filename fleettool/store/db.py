"""Open, write and query the DuckDB store.

Concurrency: DuckDB lets one process open a file read-write, or many processes open it read-only, never both.
So nobody holds the file open for long: the agent buffers rows in memory and opens the file only to flush a
batch (milliseconds), and readers (CLI, TUI) open it read-only for one query at a time. Both retry briefly when
the other holds the lock; the agent never blocks its collection loop on the lock, it keeps buffering.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from fleettool.model import Event, GpuInfo, PodUse, Sample
from fleettool.store.errors import NotFleettool, StoreCorrupt, StoreError, StoreLocked, precheck

if TYPE_CHECKING:
    import pyarrow as pa

from fleettool.store.schema import CORE_TABLES, DDL, FORMAT, FORMAT_KEY, KNOWN_TABLES, SCHEMA_VERSION


def _classify(path: str, err: Exception) -> StoreError:
    msg = str(err).splitlines()[0] if str(err) else type(err).__name__
    low = msg.lower()
    if "lock" in low or "conflicting" in low or "resource temporarily unavailable" in low:
        return StoreLocked(f"{path}: database is locked by another process ({msg})")
    if "not a valid duckdb" in low:
        return NotFleettool(f"{path}: not a DuckDB database; nothing was changed")
    if "corrupt" in low or "invalid" in low or "serialization" in low or "magic" in low:
        return StoreCorrupt(f"{path}: not a readable fleettool database ({msg})")
    if "no such file or directory" in low:
        return StoreError(f"{path}: cannot create the database: {Path(path).parent} does not exist")
    return StoreError(f"{path}: {msg}")


def connect(path: str, *, read_only: bool, wait_s: float = 5.0) -> duckdb.DuckDBPyConnection:
    """Open the file, retrying for up to wait_s while another process holds the lock."""
    deadline = time.monotonic() + wait_s
    delay = 0.005
    while True:
        try:
            return duckdb.connect(path, read_only=read_only)
        except duckdb.Error as e:
            err = _classify(path, e)
            if not isinstance(err, StoreLocked) or time.monotonic() >= deadline:
                raise err from e
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def _ts_array(ts: Sequence[float] | Any) -> pa.Array:
    import numpy as np
    import pyarrow as pa  # here, not at import: readers never load it

    us = np.round(np.asarray(ts, dtype=np.float64) * 1e6).astype("int64")
    return pa.array(us, type=pa.timestamp("us"))


def samples_table(samples: Sequence[Sample]) -> pa.Table:
    """Rows of Sample -> an Arrow table in the samples column order."""
    import pyarrow as pa  # here, not at import: readers never load it

    return pa.table(
        {
            "ts": _ts_array([s.ts for s in samples]),
            "node": pa.array([s.node for s in samples], pa.string()),
            "gpu": pa.array([s.gpu for s in samples], pa.int16()),
            "uuid": pa.array([s.uuid for s in samples], pa.string()),
            "metric": pa.array([s.metric for s in samples], pa.string()),
            "sub": pa.array([s.sub for s in samples], pa.string()),
            "value": pa.array([s.value for s in samples], pa.float64()),
        }
    )


class Store:
    """One DuckDB file (or ':memory:'). Use as a context manager; writes are batched Arrow inserts."""

    def __init__(
        self,
        path: str | Path = ":memory:",
        *,
        read_only: bool = False,
        wait_s: float = 5.0,
        migrate: bool = True,
        create: bool = True,
    ) -> None:
        """Open a fleettool store. A new or empty file gets the schema; an existing store is upgraded when
        opened read-write with migrate; any other file is refused (NotFleettool) before anything is written.
        create=False: a write command that needs an existing store (an ack needs its alert)."""
        self.path = str(path)
        self.read_only = read_only
        if self.path != ":memory:":
            precheck(self.path, read_only=read_only, create=create)
        self.con = connect(self.path, read_only=read_only, wait_s=wait_s)
        try:
            kind = self._identify()
            if not read_only and (migrate or kind != "ours"):
                self._migrate()
        except duckdb.Error as e:
            self.con.close()
            raise _classify(self.path, e) from e
        except StoreError:
            self.con.close()
            raise

    # -- lifecycle ---------------------------------------------------------------------------------------
    def _tables(self) -> list[str]:
        """Every table and view of the file (schema-qualified outside `main`)."""
        rows = self.con.execute(
            """SELECT schema_name, table_name FROM duckdb_tables()
               WHERE NOT internal AND database_name = current_database() AND NOT temporary
               UNION SELECT schema_name, view_name FROM duckdb_views()
               WHERE NOT internal AND database_name = current_database() AND NOT temporary"""
        ).fetchall()
        return sorted(t if s == "main" else f"{s}.{t}" for s, t in rows)

    def _identify(self) -> str:
        """'new' (no tables), 'ours' (the marker), 'legacy' (a store from before the marker); else raise
        NotFleettool (or StoreCorrupt for a store newer than this fleettool)."""
        tables = self._tables()
        if not tables:
            if self.read_only:
                raise NotFleettool(f"{self.path}: not a fleettool database (it has no tables)")
            return "new"
        meta: dict[str, str] = {}
        if "meta" in tables:
            try:
                rows = self.con.execute(
                    "SELECT key::VARCHAR, value::VARCHAR FROM meta WHERE key IN (?, 'schema_version')",
                    [FORMAT_KEY],
                ).fetchall()
                meta = {str(k): str(v) for k, v in rows}
            except duckdb.Error:  # another program's `meta`, with other columns
                meta = {}
        if meta.get(FORMAT_KEY) == FORMAT:
            kind = "ours"
        elif "schema_version" in meta and CORE_TABLES <= set(tables) <= KNOWN_TABLES:
            kind = "legacy"
        else:
            shown = ", ".join(tables[:12]) + (f", ... ({len(tables)} in all)" if len(tables) > 12 else "")
            raise NotFleettool(
                f"{self.path}: not a fleettool database (it has tables: {shown}); nothing was changed"
            )
        version = meta.get("schema_version", "")
        if not version.isdigit():
            raise StoreCorrupt(f"{self.path}: fleettool store with an unreadable schema version {version!r}")
        if int(version) > SCHEMA_VERSION:
            raise StoreCorrupt(
                f"{self.path}: schema version {version} is newer than this fleettool's ({SCHEMA_VERSION}); "
                "upgrade fleettool"
            )
        return kind

    def _migrate(self) -> None:
        """Create or upgrade the schema, and mark the file as fleettool's, in one transaction."""
        self.con.execute("BEGIN TRANSACTION")
        try:
            for stmt in DDL:
                self.con.execute(stmt)
            self.con.execute(
                "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?), (?, ?)",
                [str(SCHEMA_VERSION), FORMAT_KEY, FORMAT],
            )
            self.con.execute("COMMIT")
        except Exception:
            self.con.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes -------------------------------------------------------------------------------------------
    def write_samples(self, table: pa.Table | Sequence[Sample]) -> int:
        import pyarrow as pa  # here, not at import: readers never load it

        if not isinstance(table, pa.Table):
            table = samples_table(table)
        if table.num_rows == 0:
            return 0
        self.con.register("_incoming_samples", table)
        try:
            self.con.execute(
                "INSERT INTO samples SELECT ts, node, gpu, uuid, metric, sub, value FROM _incoming_samples"
            )
        finally:
            self.con.unregister("_incoming_samples")
        return int(table.num_rows)

    def write_events(self, events: Iterable[Event]) -> int:
        import pyarrow as pa  # here, not at import: readers never load it

        evs = list(events)
        if not evs:
            return 0
        tbl = pa.table(
            {
                "ts": pa.array(
                    [None if e.ts is None else int(round(e.ts * 1e6)) for e in evs], pa.int64()
                ).cast(pa.timestamp("us")),
                "node": pa.array([e.node for e in evs], pa.string()),
                "gpu": pa.array([e.gpu for e in evs], pa.int16()),
                "uuid": pa.array([e.uuid for e in evs], pa.string()),
                "pci_bus_id": pa.array([e.pci_bus_id for e in evs], pa.string()),
                "kind": pa.array([e.kind for e in evs], pa.string()),
                "code": pa.array([e.code for e in evs], pa.int32()),
                "message": pa.array([e.message for e in evs], pa.string()),
                "raw": pa.array([e.raw for e in evs], pa.string()),
                "source": pa.array([e.source for e in evs], pa.string()),
                "detail": pa.array(
                    [dumps_evidence(e.detail) if e.detail else None for e in evs], pa.string()
                ),
            }
        )
        self.con.register("_incoming_events", tbl)
        try:
            self.con.execute(
                "INSERT INTO events (ts, node, gpu, uuid, pci_bus_id, kind, code, message, raw, source, detail) "
                "SELECT ts, node, gpu, uuid, pci_bus_id, kind, code, message, raw, source, detail::JSON "
                "FROM _incoming_events"
            )
        finally:
            self.con.unregister("_incoming_events")
        return len(evs)

    def upsert_gpus(self, gpus: Iterable[GpuInfo], seen_ts: float) -> None:
        rows = list(gpus)
        if not rows:
            return
        ts = _ts_array([seen_ts])[0].as_py()
        for g in rows:
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
            a, b = _ts_array([t0, t1]).to_pylist()
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
        ts = _ts_array([seen_ts])[0].as_py()
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
    ) -> None:
        """One nccl-tests invocation and every row of its table."""
        import pyarrow as pa  # here, not at import: readers never load it

        t = None if ts is None else _ts_array([ts])[0].as_py()
        self.con.execute(
            "INSERT OR REPLACE INTO nccl_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [run_id, t, op, ranks, nodes, avg_busbw_gbps, peak_busbw_gbps, wrong, version, source],
        )
        self.con.execute("DELETE FROM nccl_rows WHERE run_id = ?", [run_id])
        if rows:
            cols = [
                "size_bytes",
                "count",
                "dtype",
                "redop",
                "root",
                "oop_time_us",
                "oop_algbw_gbps",
                "oop_busbw_gbps",
                "oop_wrong",
                "ip_time_us",
                "ip_algbw_gbps",
                "ip_busbw_gbps",
                "ip_wrong",
            ]
            tbl = pa.table(
                {
                    "run_id": pa.array([run_id] * len(rows), pa.string()),
                    **{c: pa.array([getattr(r, c) for r in rows]) for c in cols},
                }
            )
            self.con.register("_incoming_rows", tbl)
            try:
                self.con.execute(
                    f"INSERT INTO nccl_rows SELECT run_id, {', '.join(cols)} FROM _incoming_rows"
                )
            finally:
                self.con.unregister("_incoming_rows")

    def seen_digest(self, digest: str) -> bool:
        return bool(self.con.execute("SELECT 1 FROM ingests WHERE digest = ?", [digest]).fetchall())

    def record_ingest(
        self, digest: str, path: str, fmt: str, node: str | None, rows: int, issues: int
    ) -> None:
        self.con.execute(
            "INSERT OR REPLACE INTO ingests VALUES (?, ?, ?, ?, ?, ?, now()::TIMESTAMP)",
            [digest, path, fmt, node, rows, issues],
        )

    def begin(self) -> None:
        self.con.execute("BEGIN TRANSACTION")

    def commit(self) -> None:
        self.con.execute("COMMIT")

    def rollback(self) -> None:
        self.con.execute("ROLLBACK")

    # -- retention ----------------------------------------------------------------------------------------
    def apply_retention(self, now: float, raw_keep_s: float, rollup_keep_s: float) -> tuple[int, int]:
        """Roll raw samples older than raw_keep_s into 1-minute min/mean/max, drop them, and drop rollups
        older than rollup_keep_s. Whole minutes only, in one transaction. Returns (rolled, dropped)."""
        cutoff_s = (now - raw_keep_s) // 60 * 60
        cutoff = _ts_array([cutoff_s])[0].as_py()
        old = _ts_array([now - rollup_keep_s])[0].as_py()
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
            self.commit()
        except Exception:
            self.rollback()
            raise
        return (int(rolled[0]) if rolled else 0, int(dropped[0]) if dropped else 0)

    # -- reads --------------------------------------------------------------------------------------------
    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        cur = self.con.execute(sql, params or [])
        cols = [d[0] for d in cur.description or []]
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

    def scalar(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        rows = self.con.execute(sql, params or []).fetchall()  # fetchall: leave no result open (duckdb 2)
        return rows[0][0] if rows else None

    def counts(self) -> dict[str, int]:
        out = {}
        for t in ("samples", "samples_1m", "events", "gpus", "nccl_runs", "burnin_results", "alerts"):
            out[t] = int(self.scalar(f"SELECT count(*) FROM {t}") or 0)
        return out


def dumps_evidence(obj: Any) -> str:
    return json.dumps(obj, default=str, separators=(",", ":"))
