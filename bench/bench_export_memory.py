#!/usr/bin/env python3
"""Peak memory of the fleet export: a day of 8 GPUs (a store from bench/agent_store7d.py) exported to a
directory by a process limited as the agent limits DuckDB (AgentConfig's memory_limit and threads), beside a bare
baseline measured in the same run: a process that imports the same modules and connects DuckDB to the same
store, limited the same way, and exports nothing. Each in its own process; peak RSS from getrusage(RUSAGE_CHILDREN).

    fleettool agent --source fake --gpus 8 --db /tmp/template.duckdb --duration 65s --no-rules --kmsg off \
        --dcgm-exporter off --quiet
    python bench/agent_store7d.py --template-db /tmp/template.duckdb --out /tmp/day.duckdb --days 1
    python bench/bench_export_memory.py --db /tmp/day.duckdb [--json bench/results/export_memory.json]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import resource, shutil, sys, time
from fleettool.agent.config import AgentConfig
from fleettool.fleet.location import open_location
from fleettool.fleet.segments import export
from fleettool.store import Store
db, out, mode = sys.argv[1], sys.argv[2], sys.argv[3]
st = Store(db)
st.limit_resources(AgentConfig.duckdb_memory, AgentConfig.duckdb_threads)
rows = st.scalar("SELECT count(*) FROM samples")
t = time.perf_counter()
if mode == "export":
    newest = st.scalar("SELECT epoch(max(ts)) FROM samples")
    rep = export(st, open_location(out), "bench", newest + 2 * 86400)
    assert rep.by_table["samples"] == rows, (rep.by_table, rows)
st.close()
print(rows, round(time.perf_counter() - t, 1))
"""


def run(db: Path, mode: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "store.duckdb"
        shutil.copy(db, work)  # the export writes its bookkeeping into the store
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        p = subprocess.run(
            [sys.executable, "-c", CHILD, str(work), str(Path(tmp) / "fleet"), mode],
            capture_output=True,
            text=True,
            check=True,
        )
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        rows, secs = p.stdout.split()
        seg = sum(f.stat().st_size for f in (Path(tmp) / "fleet").rglob("*.parquet"))
    # RUSAGE_CHILDREN is the largest child so far: run the baseline first, then the export
    return {
        "peak_rss_mib": round(max(peak, before) / 1024, 1),
        "rows": int(rows),
        "s": float(secs),
        "bytes": seg,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", type=Path, required=True)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    t = time.time()
    base = run(a.db, "bare")
    exp = run(a.db, "export")
    res = {
        "rows": exp["rows"],
        "bare_peak_rss_mib": base["peak_rss_mib"],
        "export_peak_rss_mib": exp["peak_rss_mib"],
        "ratio": round(exp["peak_rss_mib"] / base["peak_rss_mib"], 2),
        "added_mib": round(exp["peak_rss_mib"] - base["peak_rss_mib"], 1),
        "export_s": exp["s"],
        "segment_bytes": exp["bytes"],
        "wall_s": round(time.time() - t, 1),
    }
    print(json.dumps(res, indent=1))
    if a.json:
        a.json.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
