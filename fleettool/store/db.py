"""Open a fleettool store: recognise the file (ours, a legacy store, or someone else's), create or upgrade its
schema, and the Store class that every command, the agent and the TUI use (writers in store/telemetry.py,
connection primitives and locking in store/connection.py)."""

from __future__ import annotations

from pathlib import Path

import duckdb

from fleettool.store.bulk import BulkWrites
from fleettool.store.connection import _classify, connect
from fleettool.store.errors import NotFleettool, StoreCorrupt, StoreError, precheck
from fleettool.store.schema import CORE_TABLES, DDL, FORMAT, FORMAT_KEY, KNOWN_TABLES, SCHEMA_VERSION
from fleettool.store.telemetry import TelemetryWrites

__all__ = ["Store"]


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

    def counts(self) -> dict[str, int]:
        out = {}
        for t in ("samples", "samples_1m", "events", "gpus", "nccl_runs", "burnin_results", "alerts"):
            out[t] = int(self.scalar(f"SELECT count(*) FROM {t}") or 0)
        return out
