"""A store whose tables come from elsewhere: Parquet files or an Arrow dataset attached as one of the store's
tables, either copied in (a native table, for repeated scans and for writes) or as a view over the source.
Columns the source lacks (segments written by an older fleettool) read as NULL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fleettool.store.db import Store


def parquet_source(files: Sequence[str]) -> str:
    """A table expression reading these Parquet files as one table (columns matched by name)."""
    quoted = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
    return f"read_parquet([{quoted}], union_by_name = true)"


def dataset_source(store: Store, table: str, dataset: Any) -> str:
    """Register an Arrow dataset (pyarrow.dataset.Dataset) for `table`; returns the name to read it by. The
    caller keeps the dataset alive as long as the store."""
    name = f"_fleet_{table}"
    store.con.register(name, dataset)
    return name


def source_columns(store: Store, source: str) -> set[str]:
    """The column names a table expression (or a registered name) yields."""
    return {r[0] for r in store.con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}


def table_columns(store: Store, table: str) -> list[str]:
    """A store table's columns, in order."""
    return [r[0] for r in store.con.execute(f"DESCRIBE {table}").fetchall()]


def attach(store: Store, table: str, source: str, *, have: set[str], copy: bool, order_by: str = "") -> None:
    """Make `table` read `source` (having columns `have`): copy=True inserts its rows into the table (sorted
    by order_by when given), else the table is replaced by a view over the source."""
    select = ", ".join(c if c in have else f"NULL AS {c}" for c in table_columns(store, table))
    if copy:
        order = f" ORDER BY {order_by}" if order_by else ""
        store.execute(f"INSERT INTO {table} SELECT {select} FROM {source}{order}")
    else:
        store.execute(f"DROP TABLE {table}")
        if (
            table == "events"
        ):  # the event rules order ties by the stored order (a table's rowid): a view has none
            select += ", row_number() OVER () - 1 AS rowid"
        store.execute(f"CREATE VIEW {table} AS SELECT {select} FROM {source}")
    if table in ("samples", "samples_1m"):  # the hourly peaks of what is now there (store/peaks.py)
        store.rebuild_peaks()
