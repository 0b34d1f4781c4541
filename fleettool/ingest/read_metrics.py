"""Read an OpenMetrics / Prometheus text file (a fleettool recording, a saved dcgm-exporter scrape) into the
store, through the collectors' series mapping (collectors.series), the one dcgm-exporter's scrapes take."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from fleettool.collectors.series import iter_metric_tables
from fleettool.ingest.report import FileReport, IngestOptions
from fleettool.model import PodUse
from fleettool.recording.identify import exposition_timestamps
from fleettool.recording.times import file_time
from fleettool.store import Store

BATCH_ROWS = 1_000_000  # one insert per ~1 M rows: DuckDB's per-insert cost dominates small batches


def _metrics(store: Store, path: Path, opts: IngestOptions, rep: FileReport, millis: bool | None) -> None:
    with_ts, without = exposition_timestamps(path)
    default_ts = None
    if without:  # a scrape saved as is (curl node:9400/metrics > gpu-17.prom) carries no sample timestamps
        default_ts, src = file_time(path, opts.at)
        rep.time_source = (
            f"no sample timestamps: {src}" if not with_ts else f"sample timestamps; lines without one: {src}"
        )
    else:
        rep.time_source = "sample timestamps"
    parser, ing, tables = iter_metric_tables(
        path, default_node=opts.node or "unknown", millis=millis, strict=opts.strict, default_ts=default_ts
    )
    pending: list[pa.Table] = []
    size = 0

    def write() -> None:
        nonlocal pending, size
        if pending:
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
            if size >= BATCH_ROWS:
                write()
    write()
    rep.issues.extend(parser.issues)
    rep.nodes.update(n for n in ing.map.node if n)
    if not opts.node and "unknown" in rep.nodes:
        rep.notes.append("series without a Hostname label stored as node 'unknown' (give --node)")
    if rep.format == "openmetrics" and not parser.saw_eof:
        rep.partial.append(f"no '# EOF' (cut short?): kept {rep.rows} samples up to the last whole line")
    if rep.rows == 0 and not rep.issues:
        names = sorted(ing.map.unknown_names)[:3]
        rep.notes.append("no GPU series fleettool knows" + (f" (e.g. {', '.join(names)})" if names else ""))
    if ing.map.gpus:
        store.upsert_gpus(ing.map.gpus.values(), rep.t_max or 0.0)
    if ing.map.pods:
        uses = []
        for node, gpu, uuid, ns, pod, cont in ing.map.pods:
            for ts in (rep.t_min, rep.t_max):
                if ts is not None:
                    uses.append(PodUse(ts, node, gpu, uuid, ns, pod, cont))
        store.record_pods(uses)


def read_openmetrics(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    _metrics(store, path, opts, rep, millis=False)


def read_prometheus(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    _metrics(store, path, opts, rep, millis=None)
