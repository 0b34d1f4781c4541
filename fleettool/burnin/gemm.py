"""GEMM stress through torch (cuBLAS on a GPU): TFLOP/s for a set duration, with a silent-data-corruption
check. The same inputs (a fixed seed) are multiplied again and again; every checked result must be bitwise
equal to the first. The checksum of the first result is returned so the runner can compare GPUs of a node:
identical GPUs running the same cuBLAS kernel on the same inputs produce identical bits.

tf32 is a process-wide torch switch (`torch.backends.cuda.matmul.allow_tf32`; `fp32_precision` since torch
2.9): `matmul_mode` sets it for one dtype and puts the previous value back, even when the GEMM fails. The GPUs
of a node run their GEMMs in threads of one process, so the step holds the mode around all of them (a thread
that set and restored it itself would switch it under the others); `run_gemm` sets it itself only when called
on its own with the switch in the other position. cuDNN's switch (`torch.backends.cudnn.allow_tf32`) is not
touched: a matmul does not go through cuDNN.

`corrupt=True` flips the lowest bit of one element of every product (a drill: a GPU whose results are wrong the
same way each time), which only the comparison across GPUs can catch.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

DTYPES = ("bf16", "fp16", "tf32", "fp8", "fp32")


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
    tf32: bool = False  # fp32 matmuls ran as TF32 while it ran (torch's allow_tf32 / fp32_precision)


def tf32_on(torch: Any) -> bool:
    """Whether fp32 matmuls run as TF32 now. torch 2.9+ keeps the switch as `fp32_precision` (and raises on a
    read of the old `allow_tf32` once the new API has set it); older torch has only `allow_tf32`."""
    matmul = torch.backends.cuda.matmul
    try:
        prec = matmul.fp32_precision
    except AttributeError:
        return bool(matmul.allow_tf32)
    if prec == "none":  # not set for cuBLAS: the global setting holds
        prec = torch.backends.fp32_precision
    return bool(prec == "tf32")


@contextmanager
def matmul_mode(torch: Any, dtype: str) -> Iterator[None]:
    """fp32 matmuls on tensor cores (TF32) for dtype tf32, in full fp32 for the others, while the block runs;
    the switch exactly as it was afterwards, however the block ends (through the API torch has: setting
    `fp32_precision` back to what it read, 'none' included, leaves `allow_tf32` as it was too)."""
    matmul = torch.backends.cuda.matmul
    want = dtype == "tf32"
    try:
        before = matmul.fp32_precision
    except AttributeError:  # torch before 2.9
        legacy = bool(matmul.allow_tf32)
        matmul.allow_tf32 = want
        try:
            yield
        finally:
            matmul.allow_tf32 = legacy
        return
    matmul.fp32_precision = "tf32" if want else "ieee"
    try:
        yield
    finally:
        matmul.fp32_precision = before


def _flip_low_bit(torch: Any, t: Any) -> Any:
    """t with the lowest bit of its first element flipped (the same bits as t otherwise)."""
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    out = t.clone()
    flat = out.view(ints).view(-1)
    flat[0] = flat[0] ^ 1
    return out


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
    torch: Any,
    device: Any,
    dtype: str,
    seconds: float,
    n: int,
    check_every: int = 20,
    *,
    corrupt: bool = False,
) -> GemmResult:
    if tf32_on(torch) != (dtype == "tf32"):
        with matmul_mode(torch, dtype):
            return _run_gemm(torch, device, dtype, seconds, n, check_every, corrupt)
    return _run_gemm(torch, device, dtype, seconds, n, check_every, corrupt)


def _run_gemm(
    torch: Any, device: Any, dtype: str, seconds: float, n: int, check_every: int, corrupt: bool
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
    elif dtype == "tf32":  # fp32 operands; allow_tf32 (matmul_mode) puts them on the tensor cores
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
    if corrupt:
        good = mm
        mm = lambda: _flip_low_bit(torch, good())  # noqa: E731
    tf32 = tf32_on(torch)
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
        tf32=tf32,
    )
