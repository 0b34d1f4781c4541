"""The store's errors, and what a path is before DuckDB opens it. Light on purpose (no duckdb, no pyarrow): a
command that was given a text file, a directory or a missing path as --db says so without loading either."""

from __future__ import annotations

from pathlib import Path


class StoreError(RuntimeError):
    """The store could not be opened or written."""


class StoreLocked(StoreError):
    """Another process holds the database file."""


class NoSuchStore(StoreError):
    """The path given as the database does not exist (or, for a new store, its directory does not): bad input,
    as any missing path is, not a database that failed to open."""


class StoreCorrupt(StoreError):
    """The file is not a DuckDB database this version can read."""


class StoreDamaged(StoreError):
    """A fleettool store whose file is damaged (a checksum that does not match, a file cut short, a WAL that
    cannot be replayed): not locked, not someone else's, not a bug. `fleettool store check` says which tables
    are still readable, `fleettool store salvage` copies them into a fresh store."""


class NotFleettool(StoreCorrupt):
    """A file that is not a fleettool store (a text file, another program's DuckDB): it was left untouched."""


DUCKDB_MAGIC = b"DUCK"  # bytes 8..12 of every DuckDB file


def precheck(path: str, *, read_only: bool, create: bool = True) -> None:
    """What the path is, before DuckDB opens it: a reader never creates a file, nobody creates directories,
    and a file that is not DuckDB's is refused without being opened read-write."""
    p = Path(path)
    if p.is_dir():
        raise NotFleettool(f"{path}: is a directory, not a database file")
    if not p.exists():
        if read_only or not create:
            raise NoSuchStore(f"{path}: no such database")
        if not p.parent.is_dir():
            what = "is not a directory" if p.parent.exists() else "does not exist"
            raise NoSuchStore(
                f"{path}: cannot create the database: {p.parent} {what} (fleettool does not create directories)"
            )
        return
    try:
        with p.open("rb") as f:
            head = f.read(12)
    except OSError as e:
        raise StoreError(f"{path}: cannot read: {e.strerror or e}") from None
    if not head:  # DuckDB refuses an empty file too; say what to do about it
        raise NotFleettool(
            f"{path}: an empty file, not a DuckDB database (remove it and fleettool creates a new store)"
        )
    if len(head) < 12 or head[8:12] != DUCKDB_MAGIC:
        raise NotFleettool(f"{path}: not a DuckDB database (a fleettool store is one); nothing was changed")
