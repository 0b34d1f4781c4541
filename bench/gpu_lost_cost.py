"""What judging a lost GPU costs: the absent kind (GpuSeriesStopped) that now reads every silence of a GPU
(gaps and islands: DISTINCT timestamps per GPU and lead()) beside the bare query it replaced (the newest sample
per GPU), and the GpuXid rule with a held XID 79 (one more query per held line) beside the same rule over a plain
XID, in one run over one store.

The store: one node, 8 GPUs, --metrics metrics each every second for --hours hours ending at T (generated as
Arrow tables, appended an hour at a time in time order, as the agent's flushes do). GPU 3 is silent from 6 h
before the end (an XID 79 at its last sample) and had an earlier silence of 30 min that ended. Each figure is
the median CPU time (process time: DuckDB's threads included) of --repeat evaluations, after one warm-up, with
DuckDB limited as the agent limits it (AgentConfig.duckdb_memory, duckdb_threads).

  python bench/gpu_lost_cost.py --hours 24 --json bench/results/gpu-lost-cost.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from fleettool.agent.config import AgentConfig
from fleettool.collectors.base import Collected
from fleettool.engine.evaluate import evaluate_rule
from fleettool.engine.incremental import lookback
from fleettool.engine.kinds._sql import read, ts_param
from fleettool.engine.rules import load_rules
from fleettool.model import Event
from fleettool.pipeline import Pipeline
from fleettool.store import Store

T = 1_800_000_000.0
GPUS = 8
LOST = 3
METRICS = ["gpu_temp_c", "power_w", "sm_clock_mhz", "mem_clock_mhz", "gpu_util_pct", "mem_used_bytes"]

# the absent kind's query before this change: the newest sample per GPU in the window
BARE = """WITH last AS (SELECT node, gpu, max(ts) AS t FROM samples WHERE gpu IS NOT NULL
             AND ts BETWEEN $start AND $end GROUP BY node, gpu),
           nl AS (SELECT node, max(t) AS t, count(*) AS n FROM last GROUP BY node)
        SELECT last.node, last.gpu, last.t AS t_gpu, nl.t AS t_node FROM last JOIN nl USING (node)
        WHERE nl.n >= 2 AND epoch(nl.t) - epoch(last.t) >= 120"""


def build(db: Path, hours: int, metrics: int) -> tuple[int, float]:
    lost_from = T - 6 * 3600
    old_gap = (T - 12 * 3600, T - 12 * 3600 + 1800)
    names = METRICS[:metrics]
    rows = 0
    with Store(db) as st:
        for h in range(hours):
            t0 = T - (hours - h) * 3600
            ts = np.arange(t0, t0 + 3600, 1.0)
            parts = []
            for g in range(GPUS):
                keep = np.ones(len(ts), bool)
                if g == LOST:
                    keep &= ~((ts >= old_gap[0]) & (ts < old_gap[1])) & (ts < lost_from)
                tg = ts[keep]
                for m in names:
                    n = len(tg)
                    parts.append(
                        pa.table(
                            {
                                "ts": pa.array((tg * 1e6).astype("int64"), pa.timestamp("us")),
                                "node": pa.array(["bench"] * n, pa.string()),
                                "gpu": pa.array(np.full(n, g, "int32")),
                                "uuid": pa.array([f"GPU-{g}"] * n, pa.string()),
                                "metric": pa.array([m] * n, pa.string()),
                                "value": pa.array(np.full(n, 50.0)),
                                "sub": pa.array([""] * n, pa.string()),
                            }
                        )
                    )
            tab = pa.concat_tables(parts).sort_by("ts")
            st.begin()
            rows += st.write_samples(tab)
            st.commit()
        xid = Event(
            lost_from - 1,
            "bench",
            "xid",
            "NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.",
            gpu=LOST,
            code=79,
        )
        plain = Event(
            lost_from - 1,
            "bench",
            "xid",
            "NVRM: Xid (PCI:0000:45:00): 13, Graphics Exception",
            gpu=5,
            code=13,
        )
        Pipeline(st).write(Collected(events=[xid, plain]), T)
    return rows, lost_from


def cpu_ms(fn: Any, repeat: int) -> float:
    fn()
    out = []
    for _ in range(repeat):
        c = time.process_time()
        fn()
        out.append((time.process_time() - c) * 1000)
    return round(statistics.median(out), 2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hours", type=int, default=24)
    ap.add_argument("--metrics", type=int, default=len(METRICS))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    rules = {r.alert: r for r in load_rules()}
    stopped, xid = rules["GpuSeriesStopped"], rules["GpuXid"]
    with tempfile.TemporaryDirectory() as d:
        db = Path(d) / "s.duckdb"
        c = time.perf_counter()
        rows, lost_from = build(db, a.hours, a.metrics)
        built = time.perf_counter() - c
        cfg = AgentConfig(db=db, node="bench")
        st = Store(db)
        st.limit_resources(cfg.duckdb_memory, cfg.duckdb_threads)
        start0 = T - a.hours * 3600
        windows = {
            "agent lookback (20 min)": T - lookback(stopped),
            "agent, GPU silent 6 h (window back to its last sample)": lost_from - 1,
            f"replay, whole store ({a.hours} h)": start0,
        }
        out: dict[str, Any] = {"rows": rows, "build_s": round(built, 1), "absent": [], "xid": []}
        for what, s in windows.items():
            bare = cpu_ms(lambda s=s: read(st, BARE, {"start": ts_param(s), "end": ts_param(T)}), a.repeat)
            new = cpu_ms(lambda s=s: evaluate_rule(st, stopped, s, T), a.repeat)
            out["absent"].append(
                {"window": what, "bare_ms": bare, "new_ms": new, "ratio": round(new / bare, 2)}
            )
        s = T - lookback(xid)
        codes = {"held (XID 79, GPU silent)": [79], "plain (XID 13)": [13]}
        for what, cs in codes.items():
            r = rules["GpuXid"]
            one = dataclasses.replace(r, params={**r.params, "codes": cs})
            out["xid"].append(
                {"line": what, "ms": cpu_ms(lambda one=one: evaluate_rule(st, one, s, T), a.repeat)}
            )
        st.close()
    print(json.dumps(out, indent=1))
    if a.json:
        a.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
