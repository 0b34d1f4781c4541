"""Read a fleet location as one store: every table a DuckDB view over the Arrow dataset of its segments
(hive partitions date=/node=/exporter= understood; hidden and temporary files skipped), so the rules engine,
`fleettool alerts` and the TUI run unchanged over the whole fleet."""

from __future__ import annotations

import pyarrow.dataset as ds
import pyarrow.fs as pafs

from fleettool.fleet.location import Location, open_location
from fleettool.fleet.segments import SERIES, SNAPSHOTS
from fleettool.store import Store


def open_fleet(url: str | Location) -> Store:
    loc = open_location(url) if isinstance(url, str) else url
    store = Store(":memory:")
    store._fleet_datasets = []  # type: ignore[attr-defined]  # keep the datasets alive with the store
    for table in (*SERIES, *SNAPSHOTS):
        base = loc.path(table)
        info = loc.fs.get_file_info(base)
        if info.type != pafs.FileType.Directory:
            continue
        sel = pafs.FileSelector(base, recursive=True)
        files = [
            f.path
            for f in loc.fs.get_file_info(sel)
            if f.type == pafs.FileType.File
            and f.path.endswith(".parquet")
            and not f.base_name.startswith((".", "_"))
        ]
        if not files:
            continue
        dset = ds.dataset(files, filesystem=loc.fs, format="parquet")
        store._fleet_datasets.append(dset)  # type: ignore[attr-defined]
        cols = [r[0] for r in store.con.execute(f"DESCRIBE {table}").fetchall()]
        name = f"_fleet_{table}"
        store.con.register(name, dset)
        have = set(dset.schema.names)
        select = ", ".join(c if c in have else f"NULL AS {c}" for c in cols)
        if table == "alerts":  # alerts stay a table: fleet-wide evaluation writes into it
            store.con.execute(f"INSERT INTO alerts SELECT {select} FROM {name}")
            continue
        store.con.execute(f"DROP TABLE {table}")
        store.con.execute(f"CREATE VIEW {table} AS SELECT {select} FROM {name}")
    return store
