#!/usr/bin/env python3
"""Fleet storage at scale: export the synthetic fleet of bench_rules.py (1,000 GPUs x one day of 1-minute
rollups, 16 metrics) as Parquet segments, report bytes per stored value, then run every rule over the
segments (the fleet reader: DuckDB over the Arrow datasets) and time it.

    python3 bench/bench_rules.py --gpus 1000           # builds /tmp/fleettool-bench-rules.duckdb
    python3 bench/bench_fleet.py [--json bench/results/fleet.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fleettool.engine.evaluate import evaluate  # noqa: E402
from fleettool.engine.rules import load_rules  # noqa: E402
from fleettool.fleet.location import open_location  # noqa: E402
from fleettool.fleet.read import open_fleet  # noqa: E402
from fleettool.fleet.segments import export  # noqa: E402
from fleettool.store import Store  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", type=Path, default=Path("/tmp/fleettool-bench-rules.duckdb"))
    ap.add_argument("--out", type=Path, default=Path("/tmp/fleettool-bench-fleet"))
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--materialize", action="store_true", help="load the segments into memory before the rules"
    )
    a = ap.parse_args()
    if a.out.exists():
        shutil.rmtree(a.out)
    # (the export used to issue one query per node and hour: 3,000 scans of the whole table, > 10 min; now one
    # query per hour, sliced by node)
    work = a.out.with_suffix(".duckdb")
    shutil.copy(a.db, work)  # the export writes its watermark into the store
    with Store(work) as st:
        rows = st.scalar("SELECT count(*) FROM samples_1m")
        gpus = st.scalar("SELECT count(DISTINCT (node, gpu)) FROM samples_1m")
        t = time.perf_counter()
        rep = export(st, open_location(str(a.out)), "bench", 1_900_000_000.0)
        export_s = time.perf_counter() - t
    seg_bytes = sum(p.stat().st_size for p in (a.out / "samples_1m").rglob("*.parquet"))
    t = time.perf_counter()
    with open_fleet(str(a.out), materialize=a.materialize) as fl:
        open_s = time.perf_counter() - t
        t = time.perf_counter()
        incidents = evaluate(fl, load_rules())
        eval_s = time.perf_counter() - t
    res = {
        "gpus": gpus,
        "rollup_rows": rows,
        "values_per_row": 3,
        "segments": rep.segments,
        "export_s": round(export_s, 2),
        "segment_bytes": seg_bytes,
        "bytes_per_rollup_row": round(seg_bytes / rows, 3),
        "bytes_per_value": round(seg_bytes / rows / 3, 3),
        "materialize": a.materialize,
        "load_segments_s": round(open_s, 2),
        "rules_s": round(eval_s, 2),
        "load_and_rules_s": round(open_s + eval_s, 2),
        "incidents": len(incidents),
        "found": sorted((i.node, i.gpu, i.primary.rule.alert) for i in incidents),
    }
    print(json.dumps(res, indent=1))
    if a.json:
        a.json.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
