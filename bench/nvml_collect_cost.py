"""CPU per tick of the NVML collector (tier schedule, per-read hang guard, samples) beside a bare loop making
the same source calls, in one run; optionally also the collector as it was at a git revision (--ref).

The source is the fake one with `costs=True`: each read spins for the CPU time the same NVML calls took on an
H200 (sources/fake.py READ_COST_US), so the bare loop is the floor any collector pays for these reads. Ticks
are 1 s apart on the collector's own clock (no sleeping), so --ticks 3000 covers 50 minutes of tiers: the
1 s gauges every tick, the 10 s counters, the 60 s energy/violations/field batches, the 10 min limits.

Completeness: the same collectors driven by ticks that each start 0 to --jitter-ms late (seeded uniform, as
a loop beside busy CLI commands starts them), counting the gpu_temp_c samples against the ticks (no costs).

The bare loop replays the exact (tick, GPU, read) calls the collector made, recorded in a first pass. CPU is
time.process_time() over the whole loop (this process's threads; the collections run on the main thread),
best of --repeat, per tick in microseconds. `ratio` is collector / bare.

  python bench/nvml_collect_cost.py --gpus 8 --ticks 3000 --ref 9282bdc --json bench/results/nvml-collect.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fleettool.sources.base import Row, Tier  # noqa: E402
from fleettool.sources.fake import FakeSource  # noqa: E402

T0 = 1_800_000_000.0


class Recording(FakeSource):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.calls: list[tuple[float, int, str]] = []

    def read(self, index: int, what: str, now: float) -> list[Row]:
        self.calls.append((now, index, what))
        return super().read(index, what, now)


def load_collector(ref: str | None) -> Any:
    """NvmlCollector from the working tree, or from collectors/nvml.py at a git revision."""
    if ref is None:
        from fleettool.collectors.nvml import NvmlCollector

        return NvmlCollector
    text = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{ref}:collectors/nvml.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / f"nvml_{ref}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"nvml_{ref}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.NvmlCollector


def run_collector(cls: Any, gpus: int, ticks: int) -> tuple[float, int, list[tuple[float, int, str]]]:
    src = Recording(gpus=gpus, costs=True, clock=T0)
    c = cls(src, "bench")
    assert c.start()
    c.collect(T0 - 1)  # first collection: every tier, unsupported reads learned; not measured
    src.calls.clear()
    samples = 0
    cpu0 = time.process_time()
    for k in range(ticks):
        samples += len(c.collect(T0 + k).samples)
    cpu = time.process_time() - cpu0
    c.close()
    return cpu, samples, src.calls


def completeness(cls: Any, gpus: int, ticks: int, jitter_ms: float) -> dict[str, float]:
    import random

    rnd = random.Random(27)
    src = FakeSource(gpus=gpus, clock=T0)
    c = cls(src, "bench")
    assert c.start()
    temps = 0
    for k in range(ticks):
        got = c.collect(T0 + k + rnd.uniform(0, jitter_ms / 1000)).samples
        temps += sum(1 for s in got if s.metric == "gpu_temp_c")
    sched = getattr(c, "schedule", None)
    skipped = sched.skipped[Tier.FAST] if sched is not None else -1  # -1: a collector that counts none
    c.close()
    missing = 1 - temps / (ticks * gpus)
    return {"gpu_temp_c_missing_pct": round(100 * missing, 2), "fast_periods_counted_skipped": skipped}


def run_bare(gpus: int, calls: list[tuple[float, int, str]]) -> float:
    src = FakeSource(gpus=gpus, costs=True, clock=T0)
    src.open()
    cpu0 = time.process_time()
    for now, i, what in calls:
        src.read(i, what, now)
    cpu = time.process_time() - cpu0
    src.close()
    return cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--ticks", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ref", help="also measure collectors/nvml.py at this git revision")
    ap.add_argument("--jitter-ms", type=float, default=20.0)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    impls = {"collector": load_collector(None)}
    if a.ref:
        impls[f"collector@{a.ref}"] = load_collector(a.ref)
    best: dict[str, float] = {}
    info: dict[str, Any] = {}
    for _ in range(a.repeat):
        for name, cls in impls.items():
            cpu, samples, calls = run_collector(cls, a.gpus, a.ticks)
            bare = run_bare(a.gpus, calls)
            best[name] = min(best.get(name, cpu), cpu)
            best[f"bare ({name}'s calls)"] = min(best.get(f"bare ({name}'s calls)", bare), bare)
            info[name] = {"samples": samples, "reads": len(calls)}
    per_tick = {k: v / a.ticks * 1e6 for k, v in best.items()}
    out: dict[str, Any] = {
        "machine": f"{platform.node()} {platform.processor() or platform.machine()}",
        "python": platform.python_version(),
        "gpus": a.gpus,
        "ticks": a.ticks,
        "repeat": a.repeat,
        "cpu_us_per_tick": {k: round(v, 1) for k, v in per_tick.items()},
        "ratio_to_bare": {
            name: round(per_tick[name] / per_tick[f"bare ({name}'s calls)"], 3) for name in impls
        },
        "pct_of_one_core_at_1hz": {name: round(per_tick[name] / 1e4, 4) for name in impls},
        "counts": info,
        f"late_ticks_0_to_{a.jitter_ms:g}ms": {
            name: completeness(cls, a.gpus, a.ticks, a.jitter_ms) for name, cls in impls.items()
        },
    }
    print(json.dumps(out, indent=2))
    if a.json:
        a.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
