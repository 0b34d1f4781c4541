#!/usr/bin/env python3
"""On a GPU: fleettool's burn-in GEMM and HBM loops against a bare torch loop of the same shape and dtype, in
the same process, one after the other (bare first, then fleettool's, per dtype; after a warm-up so both see a
hot, power-capped GPU). Writes JSON with TFLOP/s, GB/s and the ratios.

    python3 bench/burnin_h200.py --seconds 15 --out bench/results/burnin-h200.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fleettool.burnin.gemm import run_gemm, supported  # noqa: E402
from fleettool.burnin.hbm import run_hbm  # noqa: E402


def bare_gemm(dtype: str, seconds: float, n: int) -> float:
    dev = torch.device("cuda")
    g = torch.Generator(device="cpu").manual_seed(1234)
    a32 = torch.randn(n, n, generator=g)
    b32 = torch.randn(n, n, generator=g)
    if dtype == "fp8":
        a = a32.to(dev).to(torch.float8_e4m3fn)
        b = b32.to(dev).t().contiguous().t().to(torch.float8_e4m3fn)
        one = torch.tensor(1.0, device=dev)
        f = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
    else:
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}[dtype]
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        a, b = a32.to(dev, dt), b32.to(dev, dt)
        f = lambda: torch.matmul(a, b)  # noqa: E731
    f()
    torch.cuda.synchronize()
    k = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            f()
        k += 10
        torch.cuda.synchronize()
    return 2 * n**3 * k / (time.perf_counter() - t0) / 1e12


def bare_copy(seconds: float, nbytes: int) -> float:
    x = torch.ones(nbytes // 4, device="cuda")
    y = torch.empty_like(x)
    k = 0
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            y.copy_(x)
        k += 10
        torch.cuda.synchronize()
    return 2 * nbytes * k / (time.perf_counter() - t0) / 1e9


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    dev = torch.device("cuda")
    res: dict = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "n": a.n,
        "seconds": a.seconds,
        "gemm": {},
    }
    bare_gemm("bf16", 8, a.n)  # warm: reach the power cap before anything is measured
    for dtype in ("bf16", "fp16", "tf32", "fp8"):
        why = supported(torch, dev, dtype)
        if why:
            res["gemm"][dtype] = {"skipped": why}
            continue
        bare = bare_gemm(dtype, a.seconds, a.n)
        ours = run_gemm(torch, dev, dtype, a.seconds, a.n)
        res["gemm"][dtype] = {
            "bare_tflops": round(bare, 1),
            "fleettool_tflops": round(ours.tflops, 1),
            "ratio": round(ours.tflops / bare, 4),
            "cold_tflops": round(ours.cold_tflops, 1),
            "per_second": [round(x, 1) for x in ours.per_second],
            "sdc_checks": ours.checks,
            "sdc_mismatches": ours.mismatches,
        }
        print(dtype, res["gemm"][dtype], flush=True)
    nb = 4 << 30
    bare = bare_copy(a.seconds, nb)
    ours = run_hbm(torch, dev, a.seconds, nb)
    res["hbm"] = {
        "bare_gbps": round(bare, 1),
        "fleettool_gbps": round(ours.gbps, 1),
        "ratio": round(ours.gbps / bare, 4),
    }
    print("hbm", res["hbm"], flush=True)
    a.out.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
