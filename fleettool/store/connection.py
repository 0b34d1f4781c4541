"""The connection to one DuckDB file: opening it (retrying while another process holds the lock), naming
what went wrong as a StoreError, and the statement, query and transaction primitives every store module uses.

Concurrency: DuckDB lets one process open a file read-write, or many processes open it read-only, never both.
So nobody holds the file open for long: the agent buffers rows in memory and opens the file only to flush a
batch (milliseconds), and readers (CLI, TUI) open it read-only for one query at a time. Both retry briefly when
the other holds the lock; the agent never blocks its collection loop on the lock, it keeps buffering.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

try:  # DuckDB's engine (C extension): connect, the connection, the errors; `duckdb` re-exports them
    import _duckdb as engine
except ImportError:  # an older duckdb keeps its engine inside the package (duckdb.duckdb): use the package
    import duckdb as engine  # type: ignore[no-redef]

from fleettool.store.errors import NotFleettool, StoreCorrupt, StoreDamaged, StoreError, StoreLocked

if TYPE_CHECKING:
    import pyarrow as pa


# DuckDB's own words, matched as whole phrases: a substring such as "lock" also matches "block at location 0"
# of a checksum error, which made a damaged header "locked by another process" (exit 4 after a 5 s wait)
LOCK_PHRASES = ("could not set lock on file", "conflicting lock is held", "resource temporarily unavailable")
DAMAGE_PHRASES = (
    "corrupt database file",  # a block whose checksum does not match (a header, a data block)
    "could not read enough bytes from file",  # a file cut short (a block past its end)
    "failure while replaying wal",  # a write-ahead log that cannot be applied
    "failed to create checkpoint",  # the WAL cannot be folded back into the damaged file
    "database has been invalidated",  # every statement after one of the above in the same process
)
PERMISSION_PHRASES = ("permission denied", "read-only file system", "no space left on device")


def is_damage(err: BaseException) -> bool:
    """Whether a DuckDB error says the file is damaged (DAMAGE_PHRASES)."""
    low = str(err).lower()
    return any(p in low for p in DAMAGE_PHRASES)


def is_out_of_memory(err: BaseException) -> bool:
    """Whether a DuckDB error is its memory limit reached (the agent's is small: a query of another connection
    to the same database, a reader, counts against it too); the query can be tried again."""
    return isinstance(err, engine.OutOfMemoryException)


def _classify(path: str, err: Exception) -> StoreError:
    msg = str(err).splitlines()[0] if str(err) else type(err).__name__
    low = msg.lower()
    if any(p in low for p in LOCK_PHRASES):
        return StoreLocked(f"{path}: database is locked by another process ({msg})")
    if is_damage(err):
        return StoreDamaged(
            f"{path}: the database is damaged ({msg}); run `fleettool store check --db {path}`, "
            f"then `fleettool store salvage --db {path}`"
        )
    if "not a valid duckdb" in low:
        return NotFleettool(f"{path}: not a DuckDB database; nothing was changed")
    if any(p in low for p in PERMISSION_PHRASES):
        return StoreError(f"{path}: {msg}")
    if "corrupt" in low or "invalid" in low or "serialization" in low or "magic" in low:
        return StoreCorrupt(f"{path}: not a readable fleettool database ({msg})")
    if "no such file or directory" in low:
        return StoreError(f"{path}: cannot create the database: {Path(path).parent} does not exist")
    return StoreError(f"{path}: {msg}")


def connect(
    path: str, *, read_only: bool, wait_s: float = 5.0, sql_only: bool = False
) -> engine.DuckDBPyConnection:
    """Open the file, retrying for up to wait_s while another process holds the lock. sql_only: the caller only
    runs SQL and fetches rows (a read command), so duckdb's Python layer (relations, Arrow scans, its version
    lookup: ~45 ms of imports) is not loaded; the connection is the same class, and gets that layer's methods
    if anything in the process imports `duckdb` later."""
    if not sql_only:
        import duckdb  # noqa: F401  the package's Python layer: con.sql, relations, Arrow scans (writers, export)
    deadline = time.monotonic() + wait_s
    delay = 0.005
    while True:
        try:
            return engine.connect(path, read_only=read_only)
        except engine.Error as e:
            err = _classify(path, e)
            if not isinstance(err, StoreLocked) or time.monotonic() >= deadline:
                raise err from e
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


class Connection:
    """An open DuckDB connection with the primitives the store's modules build on. The SQL that changes data
    lives in fleettool/store/ only: other layers call the store's named functions, not execute()."""

    con: engine.DuckDBPyConnection

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> None:
        """Run one statement and drop its result (fetchall: leave no result open)."""
        self.con.execute(sql, params or []).fetchall()

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        cur = self.con.execute(sql, params or [])
        cols = [d[0] for d in cur.description or []]
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

    def scalar(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        rows = self.con.execute(sql, params or []).fetchall()  # fetchall: leave no result open (duckdb 2)
        return rows[0][0] if rows else None

    def rows(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        """The rows of a query as tuples (params positional, or named for $name placeholders)."""
        return self.con.execute(sql, params if params is not None else []).fetchall()

    def arrow(self, sql: str, params: Sequence[Any] | None = None) -> pa.Table:
        """The rows of a query as one Arrow table (what Parquet export writes)."""
        import duckdb  # noqa: F401  con.sql is the package's (a connection opened sql_only has it then too)

        return self.con.sql(sql, params=list(params or [])).to_arrow_table()

    def limit_resources(self, memory_limit: str, threads: int) -> None:
        """Bound this process's DuckDB: its buffer memory (queries past it spill to the store's .tmp folder)
        and its worker threads. The agent sets it for every flush (DaemonSet memory limit, a share of a core)."""
        self.con.execute(f"SET memory_limit = '{memory_limit.replace(chr(39), '')}'")
        self.con.execute("SET threads = ?", [int(threads)])

    def begin(self) -> None:
        self.con.execute("BEGIN TRANSACTION")

    def commit(self) -> None:
        self.con.execute("COMMIT")

    def rollback(self) -> None:
        self.con.execute("ROLLBACK")
