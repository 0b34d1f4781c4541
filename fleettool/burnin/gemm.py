"""GEMM stress through torch (cuBLAS on a GPU): TFLOP/s for a set duration, with a silent-data-corruption
check. The same inputs (a fixed seed) are multiplied again and again; every checked result must be bitwise
equal to the first. The checksum of the first result is returned so the runner can compare GPUs of a node:
identical GPUs running the same cuBLAS kernel on the same inputs produce identical bits.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

DTYPES = ("bf16", "fp16", "tf32", "fp8")


@dataclass
class GemmResult:
    dtype: str
    n: int
    iterations: int
    seconds: float
    tflops: float
    cold_tflops: float  # the first second
    checks: int
    mismatches: int
    checksum: float
    per_second: list[float] = field(default_factory=list)
    error: str | None = None


def supported(torch: Any, device: Any, dtype: str) -> str | None:
    """None when the device can run this dtype, else why not."""
    if dtype == "fp8":
        if device.type != "cuda":
            return "fp8 GEMM needs a GPU"
        major, minor = torch.cuda.get_device_capability(device)
        if (major, minor) < (8, 9) or not hasattr(torch, "_scaled_mm"):
            return f"fp8 needs compute capability 8.9+ (this GPU: {major}.{minor})"
    if dtype == "tf32" and device.type != "cuda":
        return "tf32 is a tensor-core mode of the GPU"
    return None


def run_gemm(
    torch: Any, device: Any, dtype: str, seconds: float, n: int, check_every: int = 20
) -> GemmResult:
    g = torch.Generator(device="cpu").manual_seed(1234)
    a32 = torch.randn(n, n, generator=g, dtype=torch.float32)
    b32 = torch.randn(n, n, generator=g, dtype=torch.float32)
    if dtype == "bf16":
        a, b = a32.to(device, torch.bfloat16), b32.to(device, torch.bfloat16)
        mm = lambda: a @ b  # noqa: E731
    elif dtype == "fp16":
        a, b = a32.to(device, torch.float16), b32.to(device, torch.float16)
        mm = lambda: a @ b  # noqa: E731
    elif dtype == "tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
        a, b = a32.to(device), b32.to(device)
        mm = lambda: a @ b  # noqa: E731
    elif dtype == "fp8":
        a = a32.to(device).to(torch.float8_e4m3fn)
        b = b32.to(device).t().contiguous().t().to(torch.float8_e4m3fn)  # column-major second operand
        one = torch.tensor(1.0, device=device)
        mm = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
    elif dtype == "fp32":
        a, b = a32.to(device), b32.to(device)
        mm = lambda: a @ b  # noqa: E731
    else:
        raise ValueError(f"unknown dtype {dtype}")
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    ref = mm()
    sync()
    checksum = float(ref.double().sum().item())
    flop = 2.0 * n**3
    iters = checks = mismatches = 0
    per_second: list[float] = []
    batch = 10 if cuda else 1
    t0 = time.perf_counter()
    mark, mark_iters = t0, 0
    while True:
        for _ in range(batch):
            c = mm()
        iters += batch
        if iters % check_every < batch:
            sync()
            checks += 1
            if not torch.equal(c, ref):
                mismatches += 1
        now = time.perf_counter()
        if now - mark >= 1.0:
            sync()
            now = time.perf_counter()
            per_second.append(flop * (iters - mark_iters) / (now - mark) / 1e12)
            mark, mark_iters = now, iters
        if now - t0 >= seconds:
            break
    sync()
    dt = time.perf_counter() - t0
    tflops = flop * iters / dt / 1e12
    return GemmResult(
        dtype,
        n,
        iters,
        dt,
        tflops,
        per_second[0] if per_second else tflops,
        checks,
        mismatches,
        checksum,
        per_second,
    )
