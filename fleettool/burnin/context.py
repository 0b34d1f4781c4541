"""What a burn-in step is and what it is given: the run's config, a `StepContext` (torch, the devices, floors,
telemetry, progress, the report) and the `Step` record the runner's table lists. Steps are in `steps.py`."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fleettool.burnin.busy import BusyCheck
from fleettool.burnin.floors import Provenance, floor_with_provenance
from fleettool.burnin.report import BurninReport
from fleettool.burnin.telemetry import TelemetryWatcher, Watch
from fleettool.burnin.verdict import Result, apply_provisional

if TYPE_CHECKING:
    from fleettool.sources.base import GpuSource
    from fleettool.store import Store

Progress = Callable[[str, float], None]  # message, fraction done
Floor = Callable[[str], tuple[float | None, str]]  # test -> (floor, where it comes from)
CUDA_DTYPES = ("bf16", "fp16", "tf32", "fp8")  # the GEMM dtypes when --dtypes is not given, per backend
CPU_DTYPES = ("fp32", "bf16")


@dataclass
class BurninConfig:
    node: str
    backend: str = "cuda"  # cuda | cpu
    tests: tuple[str, ...] | None = None  # names of steps.STEPS to run; None: every one
    dtypes: tuple[str, ...] | None = None  # GEMM dtypes; None: the backend's (CUDA_DTYPES, CPU_DTYPES)
    seconds: float = 30.0  # per GEMM dtype and for HBM
    gemm_n: int = 8192
    hbm_bytes: int = 4 << 30
    ar_min: int = 1 << 20
    ar_max: int = 8 << 30
    ar_iters: int = 20
    ar_procs: int | None = None  # default: every GPU (cuda) or 2 (cpu)
    ar_tool: str = "torch"  # torch, or nccl-tests (all_reduce_perf on PATH), parsed by the nccl-tests reader
    dcgm_level: int = 1
    cpu_devices: int = 1  # cpu backend: devices to run side by side, as GPUs 0..n-1 when more than one
    gpus: tuple[int, ...] | None = None  # --gpus: the NVML indices to stress and judge; None: every GPU
    sdc_inject: tuple[int, ...] = ()  # drills, tests: the devices (positions) whose GEMM products are corrupt
    ar_inject: tuple[int, int] | None = (
        None  # drills, tests: (rank, iteration) that receives one wrong element
    )


def cpu_defaults(cfg: BurninConfig) -> BurninConfig:
    """Small sizes for the CPU path (the test suite and a laptop); the dtypes asked for, else CPU_DTYPES.
    `cfg.tests` is resolved."""
    return BurninConfig(
        node=cfg.node,
        backend="cpu",
        tests=cfg.tests,
        dtypes=cfg.dtypes or CPU_DTYPES,
        seconds=min(cfg.seconds, 3.0),
        gemm_n=256,
        hbm_bytes=32 << 20,
        ar_min=1 << 16,
        ar_max=4 << 20,
        ar_iters=5,
        ar_procs=cfg.ar_procs or 2,
        ar_tool=cfg.ar_tool,
        cpu_devices=cfg.cpu_devices,
        gpus=cfg.gpus,
        sdc_inject=cfg.sdc_inject,
        ar_inject=cfg.ar_inject,
    )


@dataclass
class StepContext:
    """One run as its steps see it. `devices` are dicts with gpu (index, None on the CPU), device ('cuda:0',
    'cpu'), name, and where known memory_bytes, uuid, pci_bus_id and identity (how cuda:i was matched to the
    NVML index in gpu: identity.Match.evidence; gpu is None where it could not be)."""

    cfg: BurninConfig
    torch: Any
    devices: list[dict[str, Any]]
    report: BurninReport
    store: Store | None = None
    nvml: GpuSource | None = None
    model: str | None = None
    driver: str | None = None
    progress: Progress | None = None
    total: int = 1  # progress units of the whole run
    done: int = 0
    busy: BusyCheck | None = None  # fed by every watched test
    provenance: dict[str, Provenance] = field(default_factory=dict)  # test -> its fleet floor's provenance

    def say(self, msg: str) -> None:
        """Report progress: `msg` starts now, `done` of `total` units are behind."""
        if self.progress is not None:
            self.progress(msg, self.done / max(self.total, 1))

    def tick(self) -> None:
        self.done += 1

    def floor(self, test: str) -> tuple[float | None, str]:
        """The floor a figure of `test` is judged against (none on the CPU backend); a fleet floor's
        provenance is kept for the runner (`provenance`), which holds a provisional one's PASS at WARN."""
        if self.cfg.backend == "cpu":
            return None, ""
        fl, src, prov = floor_with_provenance(self.store, self.model, self.driver, test)
        if prov is not None:
            self.provenance[test] = prov
        return fl, src

    def settle(self, results: list[Result]) -> list[Result]:
        """One step's results held to the busy check (another process on the GPU: INCONCLUSIVE) and to their
        floors' provenance (a provisional fleet floor: a PASS is a WARN); a GPU's result names its device's
        identity (identity.Match.evidence)."""
        if self.busy is not None:
            self.busy.apply(results)
        ident = {d["uuid"]: d["identity"] for d in self.devices if d.get("uuid") and d.get("identity")}
        for r in results:
            if r.uuid in ident:  # the NVML index and UUID it was measured on, and how cuda:i was matched
                r.evidence.setdefault("identity", ident[r.uuid])
            prov = self.provenance.get(r.test)
            apply_provisional(r, prov.provisional(r.node, r.gpu, r.uuid) if prov else None)
        return results

    @contextmanager
    def watched(self) -> Iterator[Watch]:
        """Watch telemetry of the GPUs under test while the block runs; the samples join the report."""
        gpus = [d["gpu"] for d in self.devices if d["gpu"] is not None]
        with TelemetryWatcher(self.nvml, self.cfg.node, gpus) as w:
            yield w.watch
        self.report.telemetry += w.watch.samples
        if self.busy is not None:
            self.busy.observe(w.watch.processes, w.watch.self_seen, w.watch.listed)

    def on_each(self, fn: Callable[[Any], Any]) -> list[Any]:
        """Run fn(torch device) on every device at once (one thread per GPU; CUDA work releases the GIL).
        Each slot holds fn's return or the exception it raised."""
        return self.on_each_at(lambda _i, dev: fn(dev))

    def on_each_at(self, fn: Callable[[int, Any], Any]) -> list[Any]:
        """on_each, with fn(position in `devices`, torch device)."""
        torch = self.torch
        outs: list[Any] = [None] * len(self.devices)

        def one(i: int) -> None:
            try:
                dev = torch.device(self.devices[i]["device"])
                if dev.type == "cuda":
                    torch.cuda.set_device(dev)
                outs[i] = fn(i, dev)
            except BaseException as e:  # a failing GPU must not take the others' results with it
                outs[i] = e

        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(self.devices))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return outs


@dataclass(frozen=True)
class Step:
    """One burn-in test: `name` is its --tests word; `run` measures and judges, returning its results;
    `units` is how many progress units it takes (one by default); `needs_torch` is False for a test that runs
    an external tool (DCGM)."""

    name: str
    run: Callable[[StepContext], list[Result]]
    units: Callable[[BurninConfig], int] = lambda _cfg: 1
    needs_torch: bool = True
