"""The burn-in's steps, in the order they run: GEMM per dtype and HBM copies on every GPU at once (a node is
stressed as a whole: power and heat add up), then all-reduce across the GPUs, then DCGM diag where installed.
Each step measures with its kernel module (gemm.py, hbm.py, allreduce.py, dcgm.py) and judges with verdict.py.

Adding a test: write `def run_x(ctx: StepContext) -> list[Result]` (here or in its own module) and add one
`Step("x", run_x)` line to STEPS; `--tests x` then runs it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import Any

from fleettool.burnin import allreduce, dcgm, gemm, hbm
from fleettool.burnin.context import BurninConfig, Floor, Step, StepContext
from fleettool.burnin.report import BurninReport
from fleettool.burnin.verdict import Result, Verdict, judge_allreduce, judge_gemm, judge_hbm


def run_gemm(ctx: StepContext) -> list[Result]:
    """Each dtype in turn, on every device at once, with telemetry watched. The tf32 switch is set for the
    dtype around all the devices' threads and put back afterwards (gemm.matmul_mode)."""
    cfg, torch = ctx.cfg, ctx.torch

    res: list[Result] = []
    for dtype in cfg.dtypes or ():

        def one(i: int, dev: Any, dtype: str = dtype) -> gemm.GemmResult | str:
            why = gemm.supported(torch, dev, dtype)
            if why is not None:
                return why
            bad = i in cfg.sdc_inject
            return gemm.run_gemm(torch, dev, dtype, cfg.seconds, cfg.gemm_n, corrupt=bad)

        ctx.say(f"GEMM {dtype} on {len(ctx.devices)} device(s) for {cfg.seconds:g}s")
        with ctx.watched() as watch, gemm.matmul_mode(torch, dtype):
            outs = ctx.on_each_at(one)
        res += judge_gemm(cfg.node, dtype, ctx.devices, outs, ctx.floor(f"gemm-{dtype}"), watch.reasons)
        ctx.tick()
    return res


def run_hbm(ctx: StepContext) -> list[Result]:
    cfg = ctx.cfg
    ctx.say(f"HBM copy on {len(ctx.devices)} device(s) for {cfg.seconds:g}s")
    with ctx.watched() as watch:
        outs = ctx.on_each(lambda dev: hbm.run_hbm(ctx.torch, dev, cfg.seconds, cfg.hbm_bytes))
    ctx.tick()
    return judge_hbm(cfg.node, ctx.devices, outs, ctx.floor("hbm"), watch.reasons)


def measure_allreduce(
    cfg: BurninConfig, devices: list[dict[str, Any]], floor: Floor, rep: BurninReport
) -> Result:
    """All-reduce across the node's devices (torch.distributed, or nccl-tests' all_reduce_perf), judged; its
    table goes into the report."""
    backend = "gloo" if cfg.backend == "cpu" else "nccl"
    nprocs = cfg.ar_procs or (2 if cfg.backend == "cpu" else len(devices))
    sizes = allreduce.sizes_between(cfg.ar_min, cfg.ar_max)
    if cfg.backend == "cuda":
        mem = min(int(d.get("memory_bytes", 0)) for d in devices)
        sizes = [s for s in sizes if s * 3 < mem] or sizes[:1]
    with tempfile.TemporaryDirectory(prefix="fleettool-ar-") as tmp, _visible(cfg, devices):
        try:
            if cfg.ar_tool == "nccl-tests":
                out = allreduce.run_nccl_tests(nprocs, cfg.ar_min, cfg.ar_max, cfg.ar_iters)
                backend = "nccl-tests"
            else:
                path = os.path.join(tmp, "r.json")
                out = allreduce.run_local(backend, nprocs, sizes, cfg.ar_iters, 3, path, cfg.ar_inject)
        except Exception as e:
            return Result(
                cfg.node, None, "allreduce", Verdict.INCONCLUSIVE, reason=f"all-reduce did not run: {e}"
            )
    rep.allreduce = out
    return judge_allreduce(cfg.node, nprocs, out, backend, floor)


@contextlib.contextmanager
def _visible(cfg: BurninConfig, devices: list[dict[str, Any]]) -> Iterator[None]:
    """Under --gpus, the all-reduce's processes (rank k on cuda:k) see only the GPUs named, by UUID in the
    devices' order (CUDA_VISIBLE_DEVICES takes UUIDs: no question of CUDA's order against NVML's)."""
    uuids = [d.get("uuid") for d in devices]
    if cfg.gpus is None or cfg.backend != "cuda" or not all(uuids):
        yield
        return
    old = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(u) for u in uuids)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = old


def run_allreduce(ctx: StepContext) -> list[Result]:
    ctx.say("all-reduce across the node's devices")
    res = measure_allreduce(ctx.cfg, ctx.devices, ctx.floor, ctx.report)
    ranks = sorted({k for r in res.evidence.get("rows", []) for k in r.get("wrong_ranks") or []})
    if ranks and ctx.cfg.backend == "cuda":  # rank k ran on cuda:k: the GPUs that received wrong values
        res.evidence["wrong_devices"] = [
            ctx.devices[k].get("identity") for k in ranks if k < len(ctx.devices)
        ]
    ctx.tick()
    return [res]


def run_dcgm(ctx: StepContext) -> list[Result]:
    """`dcgmi diag` on a GPU node where DCGM is installed; a SKIPPED row saying why not otherwise."""
    if ctx.cfg.backend != "cuda":
        why = f"DCGM diagnostics test GPUs: not run on the {ctx.cfg.backend} backend"
        return [Result(ctx.cfg.node, None, "dcgm-diag", Verdict.SKIPPED, reason=why)]
    if not dcgm.available():
        why = "dcgmi not found on PATH: DCGM diagnostics not run (install DCGM to include them)"
        return [Result(ctx.cfg.node, None, "dcgm-diag", Verdict.SKIPPED, reason=why)]
    ctx.say(f"dcgmi diag -r {ctx.cfg.dcgm_level}")
    return dcgm.run_diag(ctx.cfg.node, ctx.cfg.dcgm_level)


STEPS: tuple[Step, ...] = (
    Step("gemm", run_gemm, units=lambda cfg: len(cfg.dtypes or ())),
    Step("hbm", run_hbm),
    Step("allreduce", run_allreduce),
    Step("dcgm", run_dcgm, needs_torch=False),
)
ALL_TESTS = tuple(s.name for s in STEPS)  # the --tests words, in the order the steps run
