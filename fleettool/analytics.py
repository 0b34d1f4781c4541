"""fleettool's data as polars DataFrames, for notebooks and scripts. Each function reads one thing and returns a
DataFrame (or, for fleet segments, a LazyFrame that reads only what the query needs):

    import polars as pl
    from fleettool import analytics as fa

    temps = fa.samples("fleet.duckdb", metric="gpu_temp_c")                  # ts, node, gpu, uuid, metric, sub, value
    hot = temps.group_by("node", "gpu").agg(pl.col("value").max()).sort("value", descending=True)
    faults = fa.incidents("fault_trace.json")                                 # node, start, end, category, sub (days)
    fa.repeat_offenders(faults).head(10)                                      # node, faults, share, rank

The store is opened read-only for each call (the agent keeps writing between its flushes); rows come out of
DuckDB as Arrow and polars takes the Arrow buffers as they are (no copy). Fleet segments (`fleettool export`) are
read with `pl.scan_parquet` over their date=/node= folders, so a filter on either prunes whole files.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import polars as pl

from fleettool.reliability import read_incidents
from fleettool.store import Store
from fleettool.store.values import db_time


def _frame(db: str | Path, sql: str, params: list[Any]) -> pl.DataFrame:
    with Store(Path(db), read_only=True) as st:
        out = pl.from_arrow(st.arrow(sql, params))
    assert isinstance(out, pl.DataFrame)
    return out


def _where(**conds: Any) -> tuple[str, list[Any]]:
    parts, params = [], []
    for col, v in conds.items():
        if v is None:
            continue
        if col in ("since", "until"):
            parts.append(f"ts {'>=' if col == 'since' else '<'} ?")
            params.append(v if isinstance(v, dt.datetime) else db_time(float(v)))
        else:
            parts.append(f"{col} = ?")
            params.append(v)
    return (" WHERE " + " AND ".join(parts)) if parts else "", params


def samples(
    db: str | Path,
    *,
    node: str | None = None,
    gpu: int | None = None,
    metric: str | None = None,
    since: float | dt.datetime | None = None,
    until: float | dt.datetime | None = None,
) -> pl.DataFrame:
    """Raw samples (ts naive UTC, node, gpu, uuid, metric, sub, value), oldest first, filtered by any of the
    arguments (since/until: unix seconds or naive UTC datetimes)."""
    where, params = _where(node=node, gpu=gpu, metric=metric, since=since, until=until)
    return _frame(
        db, f"SELECT ts, node, gpu, uuid, metric, sub, value FROM samples{where} ORDER BY ts", params
    )


def events(db: str | Path, *, node: str | None = None, kind: str | None = None) -> pl.DataFrame:
    """Events (XIDs, SXids, fell-off-bus, GSP timeouts, NVML and agent events), oldest first."""
    where, params = _where(node=node, kind=kind)
    return _frame(
        db,
        f"SELECT ts, node, gpu, uuid, pci_bus_id, kind, code, message, source FROM events{where} "
        "ORDER BY ts NULLS LAST",
        params,
    )


def alerts(db: str | Path, *, state: str | None = None) -> pl.DataFrame:
    """Alerts (one row per incident: rule, severity, category, node, gpu, action, state, first/last seen)."""
    where, params = _where(state=state)
    return _frame(
        db,
        "SELECT alert_id, rule, severity, category, node, gpu, uuid, action, state, first_seen, last_seen, "
        f"summary FROM alerts{where} ORDER BY first_seen",
        params,
    )


def incidents(path: str | Path) -> pl.DataFrame:
    """An incident log (the InfiniteHBD trace's JSON, or a CSV node,start,end,category[,subcategory]) as
    faults: node, start, end (days), category, sub. See fleettool.reliability."""
    return read_incidents(Path(path))[0]


def repeat_offenders(faults: pl.DataFrame) -> pl.DataFrame:
    """Servers by how many faults they had: node, faults, share (of all faults), rank (1 = most; ties share
    the better rank)."""
    n = faults.height or 1
    return (
        faults.group_by("node")
        .len(name="faults")
        .sort(["faults", "node"], descending=[True, False])
        .with_columns(
            (pl.col("faults") / n).alias("share"),
            pl.col("faults").rank("min", descending=True).cast(pl.Int64).alias("rank"),  # ties share a rank
        )
    )


def segments(root: str | Path, table: str = "samples") -> pl.LazyFrame:
    """A table of a fleet location directory (`fleettool export --to DIR`) as a LazyFrame over its Parquet
    segments, with the date=/node= folders as columns (hive partitioning): filter on them to read fewer files."""
    base = Path(root) / table
    if not base.is_dir():
        raise FileNotFoundError(f"{base}: no {table} segments here")
    return pl.scan_parquet(str(base / "**" / "*.parquet"), hive_partitioning=True)
