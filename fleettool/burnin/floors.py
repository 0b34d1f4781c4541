"""Floors: the fleet's own baseline for the same SKU and driver when the store has enough of it, else a
cited default per SKU.

Defaults are 0.75 x the measured peak, fleettool's convention (docs/design.md, "Floors and thresholds").
The peaks are what this project measured on a lent H200 (driver 580.159.04; bench/README.md) and published
figures:
- H200 SXM bf16/fp16 GEMM 8192^3 sustained at the 700 W cap: 656-660 TFLOP/s (bench/README.md) -> 495.
- All-reduce, 8 GPUs, in place, >= 8 GiB: Azure's published 479.98 GB/s (ND H200 v5) and 478.87 (ND H100 v5);
  Azure's health checks fail ND H100 v5 under 460 GB/s at 16 GiB (Azure/azurehpc-health-checks,
  conf/nd96isr_h100_v5.conf); 0.75 x 480 = 360 as the hard floor.
The measured figures from this project's own runs on the H200 (HBM copy, tf32, fp8) are filled in from
bench/results/burnin-h200.json (see bench/README.md).

A fleet baseline built from the GPU under test itself (one run that included it, or only its own runs) is
provisional (`Provenance.provisional`): it can hold a result at WARN, never make it PASS.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleettool.store import Store

# (SKU substring, test) -> (floor, unit, source)
DEFAULTS: dict[tuple[str, str], tuple[float, str, str]] = {
    ("H200", "gemm-bf16"): (
        495.0,
        "TFLOP/s",
        "0.75 x 660 TFLOP/s measured on an H200 at 700 W (bench/README.md)",
    ),
    ("H200", "gemm-fp16"): (
        495.0,
        "TFLOP/s",
        "0.75 x 660 TFLOP/s (bf16 and fp16 run at the same rate on Hopper)",
    ),
    ("H100 80GB HBM3", "gemm-bf16"): (495.0, "TFLOP/s", "as H200: same GH100 die and 700 W cap (SXM5)"),
    ("H100 80GB HBM3", "gemm-fp16"): (495.0, "TFLOP/s", "as H200: same GH100 die and 700 W cap (SXM5)"),
    ("H200", "allreduce-8"): (
        360.0,
        "GB/s",
        "0.75 x 479.98 GB/s, Azure ND H200 v5 all_reduce in place at 8 GiB",
    ),
    ("H100 80GB HBM3", "allreduce-8"): (
        360.0,
        "GB/s",
        "0.75 x 478.87 GB/s, Azure ND H100 v5 all_reduce in place at 8 GiB",
    ),
}


def add_measured(
    defaults: dict[tuple[str, str], tuple[float, str, str]], measured: dict[str, float], sku: str, source: str
) -> None:
    for test, peak in measured.items():
        defaults.setdefault((sku, test), (round(0.75 * peak, 1), "", f"0.75 x {peak:.4g} measured: {source}"))


# measured on the lent H200 (driver 580.159.04, torch 2.11, 8192^3, power-capped at 700 W) by fleettool burnin
# itself, sustained over 15 s after a warm-up (bench/results/burnin-h200-cli.json, 2026-12-02)
H200_MEASURED: dict[str, float] = {"gemm-tf32": 342.7, "gemm-fp8": 1195.0, "hbm": 4266.0}
add_measured(DEFAULTS, H200_MEASURED, "H200", "bench/results/burnin-h200-cli.json")

# measured on a lent H100 80GB HBM3 (SXM5, driver 580.159.04, the device image's torch, 8192^3) by `fleettool burnin
# --gpus 0 --tests gemm,hbm --duration 15s` (bench/results/burnin-h100-cli.json, 2026-12-06): until then an H100
# had floors for bf16/fp16 only, so its tf32, fp8 and HBM rows WARNed and no H100 could pass a remediation proof
H100_MEASURED: dict[str, float] = {"gemm-tf32": 354.4, "gemm-fp8": 1221.0, "hbm": 3026.0}
add_measured(DEFAULTS, H100_MEASURED, "H100 80GB HBM3", "bench/results/burnin-h100-cli.json")


def default_floor(model: str | None, test: str) -> tuple[float, str] | None:
    if not model:
        return None
    for (sku, t), (floor, _unit, source) in DEFAULTS.items():
        if t == test and sku in model:
            return floor, source
    return None


MIN_RUNS = 2  # a fleet floor whose figures include the GPU under test must come from at least this many runs


@dataclass(frozen=True)
class Provenance:
    """Where a fleet-baseline floor's figures come from: how many runs, and which GPUs (by UUID and by node
    and index; a node-level test such as all-reduce has index None)."""

    runs: int
    uuids: frozenset[str]
    slots: frozenset[tuple[str, int | None]]

    def provisional(self, node: str, gpu: int | None, uuid: str | None) -> str | None:
        """Why this floor cannot make this GPU (or node) PASS, or None when it can: its figures come from
        fewer than MIN_RUNS runs that include this GPU's own, or from this GPU alone. A GPU judged against
        its own history would pass whatever it does now."""
        own = (uuid is not None and uuid in self.uuids) or (node, gpu) in self.slots
        here = "this node" if gpu is None else "this GPU"
        if own and self.runs < MIN_RUNS:
            return f"floor from {self.runs} run on {here}: provisional"
        if own and len(self.slots) == 1:
            return f"floor from {self.runs} runs, all on {here}: provisional"
        return None


def provenance(store: Store, model: str, driver: str, test: str) -> Provenance:
    """The PASSed results the stored baseline of (model, driver, test) was computed from, as
    fleettool.engine.baselines.compute selects them (up to the baseline's update time)."""
    rows = store.query(
        """SELECT DISTINCT b.run_id, b.node, b.gpu, b.uuid
           FROM burnin_results b LEFT JOIN gpus g ON g.node = b.node AND g.gpu = b.gpu
           WHERE b.verdict = 'PASS' AND b.figure IS NOT NULL AND b.test = ?
             AND coalesce(g.model, '?') = ? AND coalesce(g.driver, '?') = ?
             AND b.ts <= coalesce((SELECT max(updated) FROM baselines WHERE model = ? AND driver = ?
                                     AND metric = 'burnin' AND key = ?), b.ts)""",
        [test, model, driver, model, driver, test],
    )
    return Provenance(
        len({r["run_id"] for r in rows}),
        frozenset(r["uuid"] for r in rows if r["uuid"]),
        frozenset((r["node"], r["gpu"]) for r in rows),
    )


def floor_with_provenance(
    store: Store | None, model: str | None, driver: str | None, test: str, min_n: int = 8
) -> tuple[float | None, str, Provenance | None]:
    """The fleet baseline when it has at least min_n passed results of this SKU and driver: the lower of
    median - 3 sigma (sigma = 1.4826 x MAD) and 0.92 x median, with where its figures come from; else the
    cited default (no provenance); else none."""
    if store is not None and model:
        from fleettool.engine.baselines import lookup

        try:
            b = lookup(store, model, driver, "burnin", test)
        except Exception:  # a store without the baselines table (older) has none
            b = None
        if b is not None and b.n >= min_n:
            fl = min(b.floor(3.0), 0.92 * b.median)
            src = f"fleet baseline {model}/{b.driver}: median {b.median:.4g}, n={b.n}"
            return fl, src, provenance(store, b.model, b.driver, test)
    d = default_floor(model, test)
    if d is not None:
        return d[0], d[1], None
    return None, "", None


def floor_for(
    store: Store | None, model: str | None, driver: str | None, test: str, min_n: int = 8
) -> tuple[float | None, str]:
    """The floor of `test` and where it comes from (floor_with_provenance without the provenance)."""
    fl, src, _prov = floor_with_provenance(store, model, driver, test, min_n)
    return fl, src
