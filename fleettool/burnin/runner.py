"""Run a burn-in on this host: find the devices, run each step of `steps.STEPS` that `--tests` names (GEMM,
HBM, all-reduce, DCGM diag), compare each GPU with its node's others, and save the report to the store.

`backend="cpu"` runs the same code paths on the CPU at small sizes (torch CPU, gloo with two processes), which
is how the test suite exercises them without a GPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import uuid
from typing import TYPE_CHECKING, Any

from fleettool.burnin.context import BurninConfig, Progress, StepContext, cpu_defaults
from fleettool.burnin.report import BurninReport, save
from fleettool.burnin.steps import ALL_TESTS, STEPS
from fleettool.burnin.verdict import Result, Verdict, apply_peers

if TYPE_CHECKING:
    from fleettool.sources.base import GpuSource
    from fleettool.store import Store

# steps that run an external tool, not torch: a host without torch still runs them
TORCHLESS = frozenset(s.name for s in STEPS if not s.needs_torch)


def _import_torch() -> Any:
    import torch

    return torch


def run_burnin(
    cfg: BurninConfig, store: Store | None = None, progress: Progress | None = None
) -> BurninReport:
    rep = BurninReport(uuid.uuid4().hex[:16], cfg.node, time.time())
    cfg = dataclasses.replace(cfg, tests=ALL_TESTS if cfg.tests is None else cfg.tests)
    if cfg.backend == "cpu":
        cfg = cpu_defaults(cfg)
    tests = cfg.tests or ()
    try:
        torch = _import_torch()
    except ImportError:
        rep.results = [
            Result(
                cfg.node,
                None,
                t,
                Verdict.INCONCLUSIVE,
                reason="torch is not installed (pip install 'fleettool[burnin]')",
            )
            for t in tests
            if t not in TORCHLESS
        ]
        rep.finished = time.time()
        return rep
    if cfg.backend == "cuda" and (not torch.cuda.is_available() or torch.cuda.device_count() == 0):
        rep.results = [
            Result(cfg.node, None, t, Verdict.SKIPPED, reason="no GPU on this host (CUDA not available)")
            for t in tests
        ]
        rep.finished = time.time()
        return rep
    devices, model, driver, nvml = _devices(torch, cfg)
    rep.devices = devices
    steps = [s for s in STEPS if s.name in tests]
    ctx = StepContext(
        cfg,
        torch,
        devices,
        rep,
        store=store,
        nvml=nvml,
        model=model,
        driver=driver,
        progress=progress,
        total=sum(s.units(cfg) for s in steps),
    )
    for step in steps:
        rep.results += step.run(ctx)
    apply_peers(rep.results)
    if nvml is not None:
        with contextlib.suppress(Exception):
            nvml.close()
    rep.finished = time.time()
    if progress is not None:
        progress("done", 1.0)
    if store is not None:
        save(store, rep)
    return rep


def _devices(
    torch: Any, cfg: BurninConfig
) -> tuple[list[dict[str, Any]], str | None, str | None, GpuSource | None]:
    """The devices under test, the GPUs' model and driver (for floors), and NVML where it opens (telemetry)."""
    if cfg.backend == "cpu":
        import platform

        return [{"gpu": None, "device": "cpu", "name": platform.processor() or "cpu"}], None, None, None
    from fleettool.burnin.telemetry import open_nvml

    nvml = open_nvml()
    devs = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        d: dict[str, Any] = {
            "gpu": i,
            "device": f"cuda:{i}",
            "name": p.name,
            "memory_bytes": int(p.total_memory),
        }
        if nvml is not None:
            try:
                info = nvml.device_info(i)
                d["uuid"] = info.uuid
                d["pci_bus_id"] = info.pci_bus_id
            except Exception:
                pass
        devs.append(d)
    driver = nvml.driver_version() if nvml is not None else None
    return devs, devs[0]["name"] if devs else None, driver, nvml
