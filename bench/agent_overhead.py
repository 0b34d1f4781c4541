"""Agent overhead: CPU (% of one core) and peak RSS of the collection loop, DuckDB flushes included.

Runs the real Agent in this process: a short warm-up run, then a measured run of --seconds, reading
getrusage before and after. --source nvml uses the live GPUs; --source fake --costs replays recorded H200
data for --gpus GPUs and spins for each NVML call's measured H200 cost (sources/fake.py READ_COST_US).

  python bench/agent_overhead.py --source fake --gpus 8 --costs --seconds 60
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

from fleettool.agent.loop import Agent, AgentConfig
from fleettool.collectors.nvml import NvmlCollector
from fleettool.sources.base import GpuSource


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", default="fake", choices=["fake", "nvml"])
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--costs", action="store_true")
    ap.add_argument("--recording", type=Path, default=None)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--flush", type=float, default=30)  # the agent's default
    ap.add_argument("--db", type=Path, default=None)
    ap.add_argument(
        "--rules", action="store_true", help="evaluate the built-in rules after flushes, as the agent does"
    )
    a = ap.parse_args()
    db = a.db or Path(tempfile.mkdtemp()) / "agent.duckdb"

    def make_source() -> GpuSource:
        if a.source == "nvml":
            from fleettool.sources.nvml import NvmlSource

            return NvmlSource()
        from fleettool.sources.fake import FakeSource

        return FakeSource(gpus=a.gpus, recording=a.recording, costs=a.costs)

    def run(seconds: float) -> tuple[Agent, float, float, float]:
        cfg = AgentConfig(
            db=db, node="bench", interval_s=1.0, flush_s=a.flush, duration_s=seconds, quiet=True
        )
        sched = None
        if a.rules:
            from fleettool.engine.incremental import RuleScheduler
            from fleettool.engine.rules import load_rules

            sched = RuleScheduler(load_rules())
        ag = Agent(cfg, [NvmlCollector(make_source(), "bench")], scheduler=sched)
        ag.start()  # opening the source (NVML init, or loading the fake's recording) is not the loop's cost
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        w0 = time.monotonic()
        ag.run()
        w1 = time.monotonic()
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        return ag, cpu, w1 - w0, r1.ru_maxrss / 1024

    run(5)  # warm-up: imports, NVML init, first STATIC tier, database creation
    ag, cpu, wall, maxrss = run(a.seconds)
    out = {
        "source": a.source,
        "gpus": a.gpus if a.source == "fake" else None,
        "costs": a.costs,
        "rules": a.rules,
        "seconds": round(wall, 2),
        "cpu_s": round(cpu, 4),
        "cpu_pct_of_one_core": round(100 * cpu / wall, 3),
        "peak_rss_mib": round(maxrss, 1),
        "rss_now_mib": round(_rss_mib(), 1),
        "ticks": ag.stats.ticks,
        "rows_flushed": ag.stats.flushed_rows,
        "flushes": ag.stats.flushes,
        "db_bytes": db.stat().st_size if db.exists() else 0,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
