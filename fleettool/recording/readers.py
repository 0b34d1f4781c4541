"""The reader for each recording format, registered with recording.reader."""

from __future__ import annotations

from pathlib import Path

from fleettool.recording.ingest_metrics import iter_metric_tables
from fleettool.recording.reader import FileReport, IngestOptions, register
from fleettool.store import Store


def _metrics(store: Store, path: Path, opts: IngestOptions, rep: FileReport, millis: bool | None) -> None:
    default_ts = None
    stem = path.name.split(".")[0]
    if stem.isdigit() and len(stem) >= 12:  # <unix-ms>.prom: one scrape without sample timestamps
        default_ts = int(stem) / 1000.0
    parser, ing, tables = iter_metric_tables(
        path, default_node=opts.node or "unknown", millis=millis, strict=opts.strict, default_ts=default_ts
    )
    import pyarrow as pa
    import pyarrow.compute as pc

    pending: list[pa.Table] = []
    size = 0

    def write() -> None:
        nonlocal pending, size
        if pending:  # one insert per ~1 M rows: DuckDB's per-insert cost dominates small batches
            store.write_samples(pa.concat_tables(pending))
            pending, size = [], 0

    for t in tables:  # type: ignore[attr-defined]
        if t.num_rows:
            pending.append(t)
            size += t.num_rows
            rep.rows += t.num_rows
            lo_s, hi_s = pc.min(t["ts"]).as_py().timestamp(), pc.max(t["ts"]).as_py().timestamp()
            rep.t_min = lo_s if rep.t_min is None else min(rep.t_min, lo_s)
            rep.t_max = hi_s if rep.t_max is None else max(rep.t_max, hi_s)
            if size >= 1_000_000:
                write()
    write()
    rep.issues.extend(parser.issues)
    rep.nodes.update(n for n in ing.map.node if n)
    if ing.map.gpus:
        store.upsert_gpus(ing.map.gpus.values(), rep.t_max or 0.0)


@register("openmetrics")
def read_openmetrics(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    _metrics(store, path, opts, rep, millis=False)


@register("prometheus")
def read_prometheus(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    _metrics(store, path, opts, rep, millis=None)
