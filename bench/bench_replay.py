"""Replay and ingest throughput, measured side by side in one run.

1. parse: fleettool's bulk OpenMetrics parser over a scenario file (decompression included), samples/s;
   prometheus_client's OpenMetrics parser over the first 50,000 lines of the same file, samples/s.
2. ingest: `fleettool replay`'s whole path into a fresh DuckDB file (parse + map + insert + commit), against a
   raw DuckDB insert of the same rows from one ready-made Arrow table.

  python bench/bench_replay.py [fixtures/scenarios/row-remap-trend/dcgm-exporter.om.gz]
"""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pyarrow as pa

from fleettool.formats.openmetrics import ExpositionParser, parse_stream
from fleettool.ingest.report import IngestOptions
from fleettool.ingest.run import ingest
from fleettool.recording.files import iter_blocks
from fleettool.store import Store

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    path = (
        Path(sys.argv[1])
        if len(sys.argv) > 1
        else ROOT / "fixtures/scenarios/row-remap-trend/dcgm-exporter.om.gz"
    )
    out: dict[str, object] = {"file": str(path)}

    t = time.perf_counter()
    p = ExpositionParser(str(path))
    n = sum(len(c.sid) for c in parse_stream(p, iter_blocks(path)))
    dt = time.perf_counter() - t
    out["samples"] = n
    out["parse_samples_per_s"] = round(n / dt)

    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    lines = gzip.decompress(path.read_bytes()).decode().splitlines()[:50_000]
    cut = max(i for i, ln in enumerate(lines) if ln.startswith("# TYPE"))
    text = "\n".join(lines[:cut]) + "\n# EOF\n"
    t = time.perf_counter()
    m = sum(len(f.samples) for f in text_string_to_metric_families(text))
    out["prometheus_client_samples_per_s"] = round(m / (time.perf_counter() - t))

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "a.duckdb"
        t = time.perf_counter()
        with Store(db) as s:
            rep = ingest(s, path, IngestOptions(quiet=True))[0]
        dt_ingest = time.perf_counter() - t
        out["replay_into_store_samples_per_s"] = round(rep.rows / dt_ingest)
        # the same rows as one Arrow table, inserted raw into a fresh file with the same schema
        with Store(db, read_only=True) as s:
            table: pa.Table = s.con.sql("SELECT * FROM samples").to_arrow_table()
            if not isinstance(table, pa.Table):
                table = table.read_all()
        raw = Path(tmp) / "raw.duckdb"
        Store(raw).close()
        con = duckdb.connect(str(raw))
        t = time.perf_counter()
        con.register("t", table)
        con.execute("BEGIN")
        con.execute("INSERT INTO samples SELECT * FROM t")
        con.execute("COMMIT")
        dt_raw = time.perf_counter() - t
        con.close()
        out["raw_arrow_insert_rows_per_s"] = round(table.num_rows / dt_raw)
        # the store's write path alone, on the chunks replay produces (parsed beforehand, untimed)
        from fleettool.collectors.series import iter_metric_tables

        _, _, gen = iter_metric_tables(path, default_node="x", millis=False, strict=False)
        chunks = list(gen)  # type: ignore[call-overload]
        store_db = Path(tmp) / "store.duckdb"
        with Store(store_db) as s2:
            t = time.perf_counter()
            s2.begin()
            rows = s2.write_samples(pa.concat_tables(chunks))  # as replay does: one insert per ~1 M rows
            s2.commit()
            dt_store = time.perf_counter() - t
        out["store_write_rows_per_s"] = round(rows / dt_store)
        out["store_write_vs_raw_insert"] = round(dt_raw / dt_store, 3)
        out["replay_vs_raw_insert"] = round(dt_raw / dt_ingest, 3)
        out["db_bytes_per_sample"] = round(db.stat().st_size / rep.rows, 2)
    out["speedup_vs_prometheus_client"] = round(
        out["parse_samples_per_s"] / out["prometheus_client_samples_per_s"], 1
    )  # type: ignore[operator]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
