"""A bf16 GEMM load for recordings: 8192^3 matmuls for --seconds, printing TFLOP/s per second."""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=25)
    ap.add_argument("--n", type=int, default=8192)
    a = ap.parse_args()
    n = a.n
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    end = time.time() + a.seconds
    while time.time() < end:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        k = 0
        while time.perf_counter() - t0 < 1.0:
            for _ in range(20):
                x @ y
            k += 20
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        print(f"{time.time():.1f} bf16 {2 * n**3 * k / dt / 1e12:.1f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
