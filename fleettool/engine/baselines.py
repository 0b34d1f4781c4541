"""Fleet baselines per (SKU, driver): the median and a robust spread (MAD) of what healthy GPUs of the same
model and driver do, from the store. Peer rules compare against them; burn-in floors start from them. They are
stored (save, lookup) by fleettool.store.baselines.

Figures:
- telemetry under load (utilisation >= 80 %): per-GPU mean SM clock, tensor activity, power, temperature;
- NCCL: busbw at the largest size of runs with the same op and rank count (key "op/ranks");
- burn-in: the figure of PASSed results per test (key = test name).
Each GPU (or run) counts once, so a chatty node does not outvote a quiet one.
"""

from __future__ import annotations

import statistics

from fleettool.store import Store
from fleettool.store.baselines import (
    Baseline,
    loaded_gpu_means,
    lookup,
    nccl_largest_busbw,
    passed_burnin_figures,
    save,
)

__all__ = ["LOADED_METRICS", "Baseline", "compute", "lookup", "save"]

LOADED_METRICS = ("sm_clock_mhz", "tensor_active_ratio", "power_w", "gpu_temp_c")


def _robust(values: list[float]) -> tuple[float, float]:
    med = statistics.median(values)
    return med, statistics.median(abs(v - med) for v in values)


def compute(store: Store, *, load_min: float = 80.0) -> list[Baseline]:
    """Every baseline the store's history supports (store them with save)."""
    out: list[Baseline] = []
    groups: dict[tuple[str, str, str, str], list[float]] = {}
    for metric in LOADED_METRICS:
        for model, driver, mean in loaded_gpu_means(store, metric, load_min):
            groups.setdefault((model, driver, metric, ""), []).append(mean)
    for model, driver, op, ranks, bw in nccl_largest_busbw(store):
        if bw:
            groups.setdefault((model, driver, "nccl_busbw_gbps", f"{op}/{ranks}"), []).append(float(bw))
    for model, driver, test, fig in passed_burnin_figures(store):
        groups.setdefault((model, driver, "burnin", test), []).append(fig)
    for (model, driver, metric, key), vals in sorted(groups.items()):
        med, mad = _robust(vals)
        out.append(Baseline(model, driver, metric, key, med, mad, len(vals)))
    return out
