#!/usr/bin/env python3
"""All rules over a synthetic fleet: N GPUs (8 per node) x one day of 1-minute rollups.

The generator writes samples_1m straight from DuckDB (range joins), 16 metrics per GPU with realistic values
(a loaded H100/H200: power-capped, ~1.8 GHz, 99 % busy, slowly rising counters) and a handful of faults so
the rules have something to find: thermal slowdown, power brake, a narrow PCIe link, an NVLink CRC storm,
a DBE, a remap trend, XIDs and a slow NCCL pair.

    python3 bench/bench_rules.py [--gpus 1000] [--db /tmp/fleet.duckdb] [--json bench/results/rules.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fleettool.engine.evaluate import evaluate, write_alerts  # noqa: E402
from fleettool.engine.rules import load_rules  # noqa: E402
from fleettool.store import Store  # noqa: E402

T0 = "2026-11-30 00:00:00"

# metric, base value, per-GPU jitter, per-minute noise, kind (g gauge / c counter slope per minute)
METRICS = [
    ("gpu_temp_c", 65, 4, 1, "g"),
    ("mem_temp_c", 60, 4, 1, "g"),
    ("power_w", 690, 5, 8, "g"),
    ("sm_clock_mhz", 1820, 10, 20, "g"),
    ("gpu_util_pct", 99, 0.5, 0.5, "g"),
    ("tensor_active_ratio", 0.82, 0.01, 0.01, "g"),
    ("clock_event_reasons", 4, 0, 0, "g"),
    ("pcie_link_width", 16, 0, 0, "g"),
    ("pcie_link_width_max", 16, 0, 0, "g"),
    ("pcie_link_gen", 5, 0, 0, "g"),
    ("pcie_link_gen_max", 5, 0, 0, "g"),
    ("pcie_replay_total", 0, 0, 0.002, "c"),
    ("nvlink_crc_flit_errors_total", 0, 0, 0.01, "c"),
    ("ecc_sbe_volatile", 0, 0, 0.001, "c"),
    ("ecc_dbe_volatile", 0, 0, 0, "g"),
    ("remap_correctable_rows", 0, 0, 0, "g"),
]


def generate(db: Path, gpus: int) -> float:
    t = time.perf_counter()
    if db.exists():
        db.unlink()
    nodes = (gpus + 7) // 8
    with Store(db) as st:
        con = st.con
        con.execute(
            f"CREATE TEMP TABLE g AS SELECT 'node-' || lpad((i // 8)::VARCHAR, 5, '0') AS node, "
            f"(i % 8)::SMALLINT AS gpu, i FROM range({gpus}) r(i)"
        )
        con.execute(
            f"CREATE TEMP TABLE m AS SELECT TIMESTAMP '{T0}' + to_minutes(k) AS minute, k FROM range(1440) r(k)"
        )
        for name, base, jit, noise, kind in METRICS:
            val = (
                f"{base} + {jit} * (hash(g.i, '{name}') % 1000 / 1000.0 - 0.5) + "
                f"{noise} * (hash(g.i, m.k, '{name}') % 1000 / 1000.0 - 0.5)"
            )
            if kind == "c":
                val = f"floor(m.k * {noise} * (1 + hash(g.i) % 3))"
            con.execute(
                f"INSERT INTO samples_1m SELECT minute, node, gpu, NULL, '{name}', '', v, v, v, 2 "
                f"FROM (SELECT m.minute, g.node, g.gpu, {val} AS v FROM g, m)"
            )
        # faults, on a few GPUs
        con.execute(
            "UPDATE samples_1m SET vmin = 104, vmean = 104, vmax = 104 WHERE metric = 'clock_event_reasons' "
            "AND node = 'node-00003' AND gpu = 2 AND minute BETWEEN TIMESTAMP '2026-11-30 10:00' AND TIMESTAMP '2026-11-30 10:30'"
        )
        con.execute(
            "UPDATE samples_1m SET vmin = 136, vmean = 136, vmax = 136 WHERE metric = 'clock_event_reasons' "
            "AND node = 'node-00010' AND gpu = 6 AND minute >= TIMESTAMP '2026-11-30 12:00'"
        )
        con.execute(
            "UPDATE samples_1m SET vmin = 860, vmean = 860, vmax = 860 WHERE metric = 'sm_clock_mhz' "
            "AND node = 'node-00010' AND gpu = 6 AND minute >= TIMESTAMP '2026-11-30 12:00'"
        )
        con.execute(
            "UPDATE samples_1m SET vmin = 8, vmean = 8, vmax = 8 WHERE metric = 'pcie_link_width' "
            "AND node = 'node-00020' AND gpu = 7"
        )
        con.execute(
            "UPDATE samples_1m SET vmax = vmax + 300 * 60 * greatest(0, epoch(minute) - epoch(TIMESTAMP '2026-11-30 08:00')) / 60 "
            "WHERE metric = 'nvlink_crc_flit_errors_total' AND node = 'node-00030' AND gpu = 0"
        )
        con.execute(
            "UPDATE samples_1m SET vmin = 1, vmean = 1, vmax = 1 WHERE metric = 'ecc_dbe_volatile' "
            "AND node = 'node-00040' AND gpu = 4 AND minute >= TIMESTAMP '2026-11-30 20:00'"
        )
        con.execute(
            "INSERT INTO gpus SELECT node, gpu, NULL, NULL, 'NVIDIA H100 80GB HBM3', '550.54.15', NULL, "
            f"TIMESTAMP '{T0}', TIMESTAMP '{T0}' + INTERVAL 1 DAY FROM g"
        )
        con.execute(
            "INSERT INTO events VALUES (TIMESTAMP '2026-11-30 20:00', 'node-00040', 4, NULL, NULL, 'xid', 48, "
            "'DBE', '', 'bench', NULL), (TIMESTAMP '2026-11-30 05:00', 'node-00050', 1, NULL, NULL, 'xid', 13, "
            "'Graphics Exception', '', 'bench', NULL)"
        )
        print(
            f"generated {gpus} GPUs on {nodes} nodes: {st.scalar('SELECT count(*) FROM samples_1m'):,} rollup rows",
            file=sys.stderr,
        )
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=1000)
    ap.add_argument("--db", type=Path, default=Path("/tmp/fleettool-bench-rules.duckdb"))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--reuse", action="store_true", help="reuse an existing database")
    a = ap.parse_args()
    gen_s = 0.0 if (a.reuse and a.db.exists()) else generate(a.db, a.gpus)
    rules = load_rules()
    with Store(a.db) as st:
        t = time.perf_counter()
        incidents = evaluate(st, rules)
        eval_s = time.perf_counter() - t
        per_rule = {}
        from fleettool.engine.evaluate import data_range, evaluate_rule

        s, e = data_range(st)  # type: ignore[misc]
        for r in rules:
            t1 = time.perf_counter()
            evaluate_rule(st, r, s, e)
            per_rule[r.alert] = round(time.perf_counter() - t1, 3)
        st.begin()
        write_alerts(st, incidents)
        st.commit()
    res = {
        "gpus": a.gpus,
        "rules": len(rules),
        "generate_s": round(gen_s, 2),
        "evaluate_s": round(eval_s, 2),
        "incidents": len(incidents),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "slowest": sorted(per_rule.items(), key=lambda kv: -kv[1])[:6],
        "found": sorted((i.node, i.gpu, i.primary.rule.alert) for i in incidents),
    }
    print(json.dumps(res, indent=1))
    if a.json:
        a.json.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
