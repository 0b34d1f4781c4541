"""Run a burn-in on this host: find the devices, run each step of `steps.STEPS` that `--tests` names (GEMM,
HBM, all-reduce, DCGM diag), compare each GPU with its node's others, and save the report to the store.

`backend="cpu"` runs the same code paths on the CPU at small sizes (torch CPU, gloo with two processes), which
is how the test suite exercises them without a GPU; `cpu_devices=4` runs four CPU devices side by side as
GPUs 0-3, and a GPU source given to `run_burnin` (the fake) feeds their telemetry and busy check.

Before the first test, the busy check (busy.py) lists the processes on every GPU; each step's results are then
held to it (INCONCLUSIVE where another process was there) and to their floors' provenance (a provisional
floor holds a PASS at WARN); the report ends with the check's own row, `exclusive`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import uuid
from typing import TYPE_CHECKING, Any

from fleettool.burnin.busy import BusyCheck
from fleettool.burnin.context import CUDA_DTYPES, BurninConfig, Progress, StepContext, cpu_defaults
from fleettool.burnin.report import BurninReport, save
from fleettool.burnin.steps import ALL_TESTS, STEPS
from fleettool.burnin.verdict import Result, Verdict, apply_peers

if TYPE_CHECKING:
    from fleettool.sources.base import GpuSource
    from fleettool.store import Store

# steps that run an external tool, not torch: a host without torch still runs them
TORCHLESS = frozenset(s.name for s in STEPS if not s.needs_torch)


TORCH_MISSING = "torch is not installed (pip install 'fleettool[burnin]')"
TORCH_MISSING_CPU = (  # PyPI's default Linux wheel is the CUDA build, several GB a CPU-only machine never uses
    "torch is not installed (a machine without a GPU: pip install torch --index-url "
    "https://download.pytorch.org/whl/cpu, then pip install 'fleettool[burnin]')"
)


class NoSuchGpu(ValueError):
    """--gpus names an index the node does not have (the message names it and the node's GPUs)."""


def _import_torch() -> Any:
    import torch

    return torch


def run_burnin(
    cfg: BurninConfig,
    store: Store | None = None,
    progress: Progress | None = None,
    source: GpuSource | None = None,
) -> BurninReport:
    """Run the steps `cfg.tests` names and return the report (saved to `store` when given). `source` is an
    opened GPU source for telemetry and the busy check (the caller closes it); without one the cuda backend
    opens NVML and the cpu backend has none."""
    rep = BurninReport(uuid.uuid4().hex[:16], cfg.node, time.time())
    cfg = dataclasses.replace(cfg, tests=ALL_TESTS if cfg.tests is None else cfg.tests)
    if cfg.backend == "cpu":
        cfg = cpu_defaults(cfg)
    elif cfg.dtypes is None:
        cfg = dataclasses.replace(cfg, dtypes=CUDA_DTYPES)
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
                reason=TORCH_MISSING_CPU if cfg.backend == "cpu" else TORCH_MISSING,
            )
            for t in tests
            if t not in TORCHLESS
        ]
        bare = StepContext(cfg, None, [], rep, store=store, progress=progress)
        for step in STEPS:  # the external tools run without torch (DCGM diag, or its SKIPPED row)
            if step.name in tests and not step.needs_torch:
                rep.results += step.run(bare)
        rep.finished = time.time()
        return rep
    if cfg.backend == "cuda" and (not torch.cuda.is_available() or torch.cuda.device_count() == 0):
        rep.results = [
            Result(cfg.node, None, t, Verdict.SKIPPED, reason="no GPU on this host (CUDA not available)")
            for t in tests
        ]
        rep.finished = time.time()
        return rep
    opened, why_not = (None, "") if source is not None else _open_source(cfg)
    gpu_source = source or opened
    devices, model, driver = _devices(torch, cfg, gpu_source)
    if cfg.gpus is not None:
        try:
            devices = only_gpus(cfg.node, devices, cfg.gpus)
        except NoSuchGpu:
            if opened is not None:
                with contextlib.suppress(Exception):
                    opened.close()
            raise
    rep.devices = devices
    busy = BusyCheck(gpu_source, [d["gpu"] for d in devices if d["gpu"] is not None], why_not)
    busy.before_tests(time.time())  # before any test has made a context on a GPU
    steps = [s for s in STEPS if s.name in tests]
    ctx = StepContext(
        cfg,
        torch,
        devices,
        rep,
        store=store,
        nvml=gpu_source,
        model=model,
        driver=driver,
        progress=progress,
        total=sum(s.units(cfg) for s in steps),
        busy=busy,
    )
    try:
        for step in steps:
            busy.begin_step()
            rep.results += ctx.settle(step.run(ctx))
    finally:
        if opened is not None:
            with contextlib.suppress(Exception):
                opened.close()
    if cfg.backend != "cpu":  # CPU devices share the cores: their speeds say nothing about one another
        apply_peers(rep.results)
    rep.results.append(busy.result(cfg.node))
    rep.busy = busy.as_dict()
    rep.finished = time.time()
    if progress is not None:
        progress("done", 1.0)
    if store is not None:
        save(store, rep)
    return rep


def only_gpus(node: str, devices: list[dict[str, Any]], gpus: tuple[int, ...]) -> list[dict[str, Any]]:
    """The devices whose NVML index is in `gpus` (--gpus), in the node's order; NoSuchGpu naming the first index
    the node lacks (a device matched to no NVML index is no GPU it can name)."""
    have = [d["gpu"] for d in devices if d["gpu"] is not None]
    missing = [g for g in gpus if g not in have]
    if missing:
        listed = ", ".join(map(str, have)) or "none"
        raise NoSuchGpu(f"{node} has no GPU {missing[0]} (its GPUs: {listed})")
    return [d for d in devices if d["gpu"] in gpus]


def _open_source(cfg: BurninConfig) -> tuple[GpuSource | None, str]:
    """NVML on the cuda backend (or None and why not); the cpu backend has no GPU source of its own."""
    if cfg.backend == "cpu":
        return None, "no NVML on the CPU backend"
    from fleettool.burnin.telemetry import open_nvml

    return open_nvml()


def _devices(
    torch: Any, cfg: BurninConfig, source: GpuSource | None
) -> tuple[list[dict[str, Any]], str | None, str | None]:
    """The devices under test, and the GPUs' model and driver (for floors)."""
    if cfg.backend == "cpu":
        import platform

        name = platform.processor() or "cpu"
        if cfg.cpu_devices <= 1:
            return [{"gpu": None, "device": "cpu", "name": name}], None, None
        return [{"gpu": i, "device": "cpu", "name": name} for i in range(cfg.cpu_devices)], None, None
    from fleettool.burnin.identity import match, read_cuda, read_nvml

    nvml, why_not = read_nvml(source)
    devs = []
    for m in match(read_cuda(torch), nvml, why_not):  # cuda:i is not NVML's GPU i (identity.py)
        p = torch.cuda.get_device_properties(m.ordinal)
        devs.append(
            {
                "gpu": m.index,
                "device": f"cuda:{m.ordinal}",
                "name": p.name,
                "memory_bytes": int(p.total_memory),
                "uuid": m.uuid,
                "pci_bus_id": m.pci_bus_id,
                "identity": m.evidence(),
            }
        )
    driver = None
    if source is not None:
        with contextlib.suppress(Exception):
            driver = source.driver_version()
    return devs, devs[0]["name"] if devs else None, driver
