"""Open a fleettool store: recognise the file (ours, a legacy store, or someone else's), create or upgrade its
schema, and the Store class that every command, the agent and the TUI use (writers in store/telemetry.py,
connection primitives and locking in store/connection.py)."""

from __future__ import annotations

import re
from pathlib import Path

from fleettool.store.bulk import BulkWrites
from fleettool.store.connection import _classify, connect, engine, is_damage
from fleettool.store.errors import NotFleettool, StoreCorrupt, StoreError, precheck
from fleettool.store.schema import (
    CORE_TABLES,
    DDL,
    FORMAT,
    FORMAT_KEY,
    KNOWN_TABLES,
    PEAKS_SINCE,
    SCHEMA_VERSION,
    UPGRADES,
)
from fleettool.store.telemetry import TelemetryWrites

__all__ = ["Store"]

_CREATE = re.compile(r"CREATE TABLE IF NOT EXISTS (\w+)")
_ADDED: dict[str, list[tuple[str, str]]] = {}  # columns the DDL adds to an older table (ALTER ... ADD COLUMN)
for _stmt in DDL:
    if (_m := re.match(r"ALTER TABLE (\w+) ADD COLUMN IF NOT EXISTS (\w+) (\w+)", _stmt)) is not None:
        _ADDED.setdefault(_m.group(1), []).append((_m.group(2), _m.group(3)))


class Store(TelemetryWrites, BulkWrites):
    """One DuckDB file (or ':memory:'). Use as a context manager; writes are batched Arrow inserts."""

    def __init__(
        self,
        path: str | Path = ":memory:",
        *,
        read_only: bool = False,
        wait_s: float = 5.0,
        migrate: bool = True,
        create: bool = True,
        sql_only: bool = False,
    ) -> None:
        """Open a fleettool store. A new or empty file gets the schema; an existing store is upgraded when
        opened read-write with migrate; any other file is refused (NotFleettool) before anything is written.
        create=False: a write command that needs an existing store (an ack needs its alert). sql_only: the
        caller only runs SQL and fetches rows (connection.connect)."""
        self.path = str(path)
        self.read_only = read_only
        if self.path != ":memory:":
            precheck(self.path, read_only=read_only, create=create)
        self.con = connect(self.path, read_only=read_only, wait_s=wait_s, sql_only=sql_only)
        try:
            kind, version = self._identify()
            if not read_only and (migrate or kind != "ours"):
                self._migrate(version)
            elif read_only and version < SCHEMA_VERSION:
                self._migrate_in_memory()
        except engine.Error as e:
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

    def _identify(self) -> tuple[str, int]:
        """('new' (no tables), 'ours' (the marker) or 'legacy' (a store from before the marker), its schema
        version); else raise NotFleettool (or StoreCorrupt for a store newer than this fleettool, StoreDamaged
        for one whose meta table cannot be read)."""
        tables = self._tables()
        if not tables:
            if self.read_only:
                raise NotFleettool(f"{self.path}: not a fleettool database (it has no tables)")
            return "new", SCHEMA_VERSION
        meta: dict[str, str] = {}
        if "meta" in tables:
            try:  # a plain scan: a lookup by key reads the primary key's index, more blocks that may be damaged
                rows = self.con.execute("SELECT key::VARCHAR, value::VARCHAR FROM meta").fetchall()
                meta = {str(k): str(v) for k, v in rows if k in (FORMAT_KEY, "schema_version")}
            except engine.Error as e:  # another program's `meta`, with other columns; or a damaged file
                if is_damage(e):
                    raise _classify(self.path, e) from e
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
        return kind, int(version)

    def _migrate_in_memory(self) -> None:
        """A reader of an older store sees the current schema without writing a byte: the tables a later
        version added are empty temporary tables, and a column added since reads as NULL (a temporary view of
        the same name over the file's table). The next read-write open migrates the file itself."""
        have = set(self._tables())
        db = str(self.con.execute("SELECT current_database()").fetchone()[0]).replace('"', '""')  # type: ignore[index]
        for stmt in DDL:
            if (m := _CREATE.match(stmt)) is not None and m.group(1) not in have:
                self.con.execute(_CREATE.sub(r"CREATE TEMP TABLE \1", stmt, count=1))
        if "peak_1h" not in have:  # the hourly peaks the rules read, from the file's samples (store/peaks.py)
            self.rebuild_peaks()
        for table, cols in _ADDED.items():
            if table not in have:
                continue
            present = {r[0] for r in self.con.execute(f'DESCRIBE "{db}".main.{table}').fetchall()}
            missing = [f"NULL::{typ} AS {col}" for col, typ in cols if col not in present]
            if missing:
                self.con.execute(
                    f'CREATE TEMP VIEW {table} AS SELECT *, {", ".join(missing)} FROM "{db}".main.{table}'
                )

    def _migrate(self, version: int = SCHEMA_VERSION) -> None:
        """Create or upgrade the schema from `version`, and mark the file as fleettool's, in one transaction."""
        self.con.execute("BEGIN TRANSACTION")
        try:
            for stmt in (*DDL, *UPGRADES):
                self.con.execute(stmt)
            if version < PEAKS_SINCE:  # once: the hourly peaks of the samples it already holds
                self.rebuild_peaks()
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

    def counts(self) -> dict[str, int]:
        out = {}
        tables = ("samples", "samples_1m", "events", "gpus", "nccl_runs", "burnin_results", "alerts")
        for t in (*tables, "node_topology", "jobs"):
            out[t] = int(self.scalar(f"SELECT count(*) FROM {t}") or 0)
        return out
