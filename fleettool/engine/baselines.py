"""Fleet baselines per (SKU, driver): the median and a robust spread (MAD) of what healthy GPUs of the same
model and driver do, from the store. Peer rules compare against them; burn-in floors start from them. They are
stored (save, lookup) by fleettool.store.baselines.

Figures:
- telemetry under load (utilisation >= 80 %): per-GPU mean SM clock, tensor activity, power, temperature;
- NCCL: busbw at the largest size of runs with the same op and rank count (key "op/ranks");
- burn-in: the figure of PASSed results per test (key = test name).
Each GPU (or run) counts once, so a chatty node does not outvote a quiet one. The store gives one figure per GPU
(or run); polars groups them and takes the median and MAD per (model, driver, metric, key).
"""

from __future__ import annotations

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


KEYS = ("model", "driver", "metric", "key")


def compute(store: Store, *, load_min: float = 80.0) -> list[Baseline]:
    """Every baseline the store's history supports (store them with save)."""
    import polars as pl  # here, not at the top: the agent imports the engine and never computes baselines

    rows: list[tuple[str, str, str, str, float]] = []
    for metric in LOADED_METRICS:
        rows += [(m, d, metric, "", v) for m, d, v in loaded_gpu_means(store, metric, load_min)]
    rows += [
        (m, d, "nccl_busbw_gbps", f"{op}/{ranks}", float(bw))
        for m, d, op, ranks, bw in nccl_largest_busbw(store)
        if bw
    ]
    rows += [(m, d, "burnin", test, fig) for m, d, test, fig in passed_burnin_figures(store)]
    if not rows:
        return []
    schema = {k: pl.String for k in KEYS} | {"value": pl.Float64}
    figures = pl.DataFrame(rows, schema=schema, orient="row")
    per_key = (
        figures.with_columns(pl.col("value").median().over(KEYS).alias("med"))
        .group_by(KEYS)
        .agg(
            pl.col("med").first().alias("median"),
            (pl.col("value") - pl.col("med")).abs().median().alias("mad"),
            pl.len().alias("n"),
        )
        .sort(KEYS)
    )
    return [
        Baseline(r["model"], r["driver"], r["metric"], r["key"], r["median"], r["mad"], r["n"])
        for r in per_key.iter_rows(named=True)
    ]
