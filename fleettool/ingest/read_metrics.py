"""Read an OpenMetrics / Prometheus text file (a fleettool recording, a saved dcgm-exporter scrape) into the
store, through the collectors' series mapping (collectors.series), the one dcgm-exporter's scrapes take."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain
from pathlib import Path

import numpy as np

from fleettool.formats.openmetrics import Chunk, ExpositionParser, parse_stream
from fleettool.ingest.metric_batches import SAMPLE_BATCH_SCHEMA, BatchIngest, prefetched
from fleettool.ingest.report import FileReport, IngestOptions, outside_time
from fleettool.model import PodUse
from fleettool.recording.files import GZIP_MAGIC, iter_blocks
from fleettool.recording.identify import exposition_timestamps
from fleettool.store import Store

READ_SIZE = 1 << 20  # bytes per read (plain files); the parser works on ~4 MiB of whole lines at a time


def _metrics(store: Store, path: Path, opts: IngestOptions, rep: FileReport, millis: bool | None) -> None:
    with_ts, without = exposition_timestamps(path)
    default_ts = None
    if without:  # a scrape saved as is (curl node:9400/metrics > gpu-17.prom) carries no sample timestamps
        default_ts, src = outside_time(path, opts, rep)
        rep.time_source = (
            f"no sample timestamps: {src}" if not with_ts else f"sample timestamps; lines without one: {src}"
        )
    else:
        rep.time_source = "sample timestamps"
    parser = ExpositionParser(str(path), millis=millis, strict=opts.strict, default_ts=default_ts)
    ing = BatchIngest(parser, opts.node or "unknown")
    with open(path, "rb") as f:
        plain = f.read(2) != GZIP_MAGIC
    if plain:  # read straight into the parser's buffer (parse_stream over the open file)
        with open(path, "rb", buffering=0) as raw:
            _insert(store, ing, parse_stream(parser, raw), rep)
    else:
        # the first read here, in the file's own thread: it binds the read's bound and notes (recording.files'
        # watch_reads); DuckDB then pulls the rest from its own threads, block by block
        blocks = iter_blocks(path, READ_SIZE)
        first = next(blocks, None)
        _insert(store, ing, parse_stream(parser, blocks if first is None else chain([first], blocks)), rep)
    _after(store, parser, ing, opts, rep)


def _insert(store: Store, ing: BatchIngest, stream: Iterator[Chunk], rep: FileReport) -> None:
    def batches() -> Iterator[object]:
        for chunk in stream:
            b = ing.batch(chunk)
            if b.num_rows:
                us = b.column(0).to_numpy().view(np.int64)
                lo_s, hi_s = int(us.min()) / 1e6, int(us.max()) / 1e6
                rep.t_min = lo_s if rep.t_min is None else min(rep.t_min, lo_s)
                rep.t_max = hi_s if rep.t_max is None else max(rep.t_max, hi_s)
                yield b

    rep.rows += store.write_sample_batches(SAMPLE_BATCH_SCHEMA, prefetched(batches()))  # type: ignore[arg-type]


def _after(
    store: Store, parser: ExpositionParser, ing: BatchIngest, opts: IngestOptions, rep: FileReport
) -> None:
    rep.issues.extend(parser.issues)
    rep.nodes.update(n for n in ing.map.node if n)
    if not opts.node and "unknown" in rep.nodes:
        rep.notes.append("series without a Hostname label stored as node 'unknown' (give --node)")
    if rep.format == "openmetrics" and not parser.saw_eof:
        rep.partial.append(f"no '# EOF' (cut short?): kept {rep.rows} samples up to the last whole line")
    dropped = ing.dropped_notes()
    rep.notes.extend(dropped)
    if rep.rows == 0 and not rep.issues and not dropped:
        rep.notes.append("no GPU series fleettool knows")
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
