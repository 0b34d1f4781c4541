"""A damaged store: which of its tables still read (`check`), and a fresh store holding everything that does
(`salvage`). The damaged file is only ever read here; salvage keeps it beside the new one (renamed
`<name>.damaged-<UTC time>`, its WAL with it) and never deletes it.

A table is read by row ranges of one DuckDB row group (ROW_RANGE rows, which a `rowid` range reads without
touching the other groups' blocks): a damaged block costs the rows of its group, not the whole table."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from fleettool.store.connection import is_damage
from fleettool.store.errors import StoreDamaged, StoreError
from fleettool.store.schema import FORMAT_KEY

ROW_RANGE = 122_880  # DuckDB's row group size: one rowid range per group
SRC = "damaged"
OnRange = Callable[[str], None] | None  # what to do with a range that reads (salvage: copy it)


@dataclass
class TableCheck:
    """One table of the file: the rows its catalog counts, those read back (all columns), and the row ranges
    that could not be read (first rowid, end rowid, DuckDB's first line)."""

    name: str
    rows: int | None = None
    readable: int = 0
    lost: list[tuple[int, int, str]] = field(default_factory=list)
    error: str | None = None  # the table could not be read at all

    @property
    def ok(self) -> bool:
        return self.error is None and not self.lost


@dataclass
class Check:
    path: str
    tables: list[TableCheck] = field(default_factory=list)
    error: str | None = None  # the file could not be opened at all (a damaged header)

    @property
    def ok(self) -> bool:
        return self.error is None and all(t.ok for t in self.tables)


def _line(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def _open(path: str) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the file attached read-only as SRC (a lock is a StoreError, not damage)."""
    con = duckdb.connect(":memory:")
    try:
        con.execute(f"ATTACH '{path.replace(chr(39), chr(39) * 2)}' AS {SRC} (READ_ONLY)")
    except duckdb.Error as e:
        con.close()
        from fleettool.store.connection import _classify

        err = _classify(path, e)
        if not isinstance(err, StoreDamaged):
            raise err from e
        raise StoreDamaged(_line(e)) from e
    return con


def _tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    rows = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main' "
        "ORDER BY table_name",
        [SRC],
    ).fetchall()
    return [str(r[0]) for r in rows]


def _ranges(con: duckdb.DuckDBPyConnection, t: TableCheck, on_range: OnRange = None) -> None:
    """Read `t` range by range (every column: a hash of each row), counting what reads and what does not."""
    for lo in range(0, max(t.rows or 0, 1), ROW_RANGE):
        hi = lo + ROW_RANGE
        where = f"rowid >= {lo} AND rowid < {hi}"
        try:
            n = con.execute(
                f"SELECT count(*), bit_xor(hash(r)) FROM {SRC}.{t.name} r WHERE {where}"
            ).fetchone()
            if on_range is not None:
                on_range(where)
        except duckdb.Error as e:
            if not is_damage(e):
                raise
            t.lost.append((lo, min(hi, t.rows or hi), _line(e)))
            continue
        t.readable += int(n[0]) if n else 0


def _check_table(con: duckdb.DuckDBPyConnection, name: str, on_range: OnRange = None) -> TableCheck:
    t = TableCheck(name)
    try:
        t.rows = int(con.execute(f"SELECT count(*) FROM {SRC}.{name}").fetchone()[0])  # type: ignore[index]
    except duckdb.Error as e:
        if not is_damage(e):
            raise
        t.error = _line(e)
        return t
    _ranges(con, t, on_range)
    return t


def check(path: str | Path) -> Check:
    """Every table of the store at `path`: its rows, how many read back, the ranges that do not."""
    out = Check(str(path))
    try:
        con = _open(str(path))
    except StoreDamaged as e:
        out.error = str(e)
        return out
    try:
        for name in _tables(con):
            out.tables.append(_check_table(con, name))
    finally:
        con.close()
    return out


def damaged_name(path: Path, now: float | None = None) -> Path:
    """Where the damaged file is kept: beside it, `<name>.damaged-<UTC time>` (a free name)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    cand = path.with_name(f"{path.name}.damaged-{stamp}")
    i = 1
    while cand.exists():
        i += 1
        cand = path.with_name(f"{path.name}.damaged-{stamp}-{i}")
    return cand


@dataclass
class Salvage:
    out: str  # the fresh store
    kept: str  # where the damaged file is now
    check: Check = field(default_factory=lambda: Check(""))


def salvage(path: Path, out: Path | None = None, *, now: float | None = None) -> Salvage:
    """Copy every readable row range of every table of the store at `path` into a fresh store. Without `out`
    the fresh store takes the damaged one's place and the damaged file (and its WAL) is renamed beside it;
    with `out` the fresh store is written there and the damaged file stays where it is, untouched."""
    from fleettool.store.db import Store

    if out is not None and out.exists():
        raise StoreError(
            f"{out}: already exists; salvage writes a new store (give a path that does not exist)"
        )
    kept = path
    if out is None:
        kept = damaged_name(path, now)
        os.rename(path, kept)
        wal = Path(str(path) + ".wal")
        if wal.exists():
            os.rename(wal, Path(str(kept) + ".wal"))
        out = path
    res = Salvage(str(out), str(kept), Check(str(kept)))
    with Store(out) as fresh:
        fresh_tables = set(fresh._tables())
        fresh.close()
    try:
        con = _open(str(kept))
    except StoreDamaged as e:
        res.check.error = str(e)
        return res
    try:
        con.execute(f"ATTACH '{str(out).replace(chr(39), chr(39) * 2)}' AS fresh")
        for name in _tables(con):
            if name not in fresh_tables:
                continue
            res.check.tables.append(_copy_table(con, name))
        con.execute("DETACH fresh")
    finally:
        con.close()
    with Store(out) as fresh:  # the hourly peaks of the samples that were saved, not of those lost
        fresh.rebuild_peaks()
    return res


def _copy_table(con: duckdb.DuckDBPyConnection, name: str) -> TableCheck:
    """Copy one table range by range into `fresh` (columns both have; a key already there is kept)."""
    have = {r[0] for r in con.execute(f"DESCRIBE {SRC}.{name}").fetchall()}
    cols = [r[0] for r in con.execute(f"DESCRIBE fresh.{name}").fetchall() if r[0] in have]
    sel = ", ".join(f'"{c}"' for c in cols)
    keyed = con.execute(
        "SELECT count(*) FROM duckdb_constraints() WHERE database_name = 'fresh' AND table_name = ? "
        "AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')",
        [name],
    ).fetchone()
    verb = "INSERT OR IGNORE" if keyed and keyed[0] else "INSERT"
    skip = f"WHERE key NOT IN ('{FORMAT_KEY}', 'schema_version')" if name == "meta" else ""

    def copy(where: str) -> None:
        cond = f"{skip} AND {where}" if skip else f"WHERE {where}"
        con.execute(f"{verb} INTO fresh.{name} ({sel}) SELECT {sel} FROM {SRC}.{name} {cond}")

    return _check_table(con, name, copy)
