"""HBM bandwidth: device-to-device copies of a large buffer; bytes read plus written per second."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any


@dataclass
class HbmResult:
    bytes_per_copy: int
    copies: int
    seconds: float
    gbps: float  # (read + written) / s, in GB/s (1e9)


def run_hbm(torch: Any, device: Any, seconds: float, nbytes: int) -> HbmResult:
    n = nbytes // 4
    x = torch.empty(n, dtype=torch.float32, device=device).fill_(1.0)
    y = torch.empty_like(x)
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    y.copy_(x)
    sync()
    copies = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10 if cuda else 1):
            y.copy_(x)
        copies += 10 if cuda else 1
        sync()
    dt = time.perf_counter() - t0
    return HbmResult(n * 4, copies, dt, 2 * n * 4 * copies / dt / 1e9)
