"""Run a burn-in on this host: GEMM per dtype and HBM copies on every GPU at once (a node is stressed as a
whole: power and heat add up), then all-reduce across the GPUs, then DCGM diag where installed. Telemetry is
watched during the GPU tests. Results, telemetry and the all-reduce table go into the store.

`backend="cpu"` runs the same code paths on the CPU at small sizes (torch CPU, gloo with two processes), which
is how the test suite exercises them without a GPU.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fleettool.burnin import dcgm
from fleettool.burnin.floors import floor_for
from fleettool.burnin.verdict import Result, Verdict, apply_peers, apply_telemetry, judge
from fleettool.store import Store

Progress = Callable[[str, float], None]  # message, fraction done


@dataclass
class BurninConfig:
    node: str
    backend: str = "cuda"  # cuda | cpu
    tests: tuple[str, ...] = ("gemm", "hbm", "allreduce", "dcgm")
    dtypes: tuple[str, ...] = ("bf16", "fp16", "tf32", "fp8")
    seconds: float = 30.0  # per GEMM dtype and for HBM
    gemm_n: int = 8192
    hbm_bytes: int = 4 << 30
    ar_min: int = 1 << 20
    ar_max: int = 8 << 30
    ar_iters: int = 20
    ar_procs: int | None = None  # default: every GPU (cuda) or 2 (cpu)
    ar_tool: str = "torch"  # torch, or nccl-tests (all_reduce_perf on PATH), parsed by the nccl-tests reader
    dcgm_level: int = 1


@dataclass
class BurninReport:
    run_id: str
    node: str
    started: float
    finished: float = 0.0
    results: list[Result] = field(default_factory=list)
    allreduce: dict[str, Any] | None = None
    telemetry: list[Any] = field(default_factory=list)
    devices: list[dict[str, Any]] = field(default_factory=list)


def cpu_defaults(cfg: BurninConfig) -> BurninConfig:
    """Small sizes for the CPU path (the test suite and a laptop)."""
    return BurninConfig(
        node=cfg.node,
        backend="cpu",
        tests=tuple(t for t in cfg.tests if t != "dcgm"),
        dtypes=("fp32", "bf16"),
        seconds=min(cfg.seconds, 3.0),
        gemm_n=256,
        hbm_bytes=32 << 20,
        ar_min=1 << 16,
        ar_max=4 << 20,
        ar_iters=5,
        ar_procs=cfg.ar_procs or 2,
        ar_tool=cfg.ar_tool,
    )


def _import_torch() -> Any:
    import torch

    return torch


def run_burnin(
    cfg: BurninConfig, store: Store | None = None, progress: Progress | None = None
) -> BurninReport:
    say = progress or (lambda _m, _f: None)
    rep = BurninReport(uuid.uuid4().hex[:16], cfg.node, time.time())
    if cfg.backend == "cpu":
        cfg = cpu_defaults(cfg)
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
            for t in cfg.tests
            if t != "dcgm"
        ]
        rep.finished = time.time()
        return rep
    if cfg.backend == "cuda" and (not torch.cuda.is_available() or torch.cuda.device_count() == 0):
        rep.results = [
            Result(cfg.node, None, t, Verdict.SKIPPED, reason="no GPU on this host (CUDA not available)")
            for t in cfg.tests
        ]
        rep.finished = time.time()
        return rep
    devices, model, driver, nvml = _devices(torch, cfg)
    rep.devices = devices
    gpu_ids = [d["gpu"] for d in devices]
    from fleettool.burnin.telemetry import TelemetryWatcher

    def floor(test: str) -> tuple[float | None, str]:
        if cfg.backend == "cpu":
            return None, ""
        return floor_for(store, model, driver, test)

    steps = [t for t in cfg.tests if t in ("gemm", "hbm", "allreduce", "dcgm")]
    total = (
        (len(cfg.dtypes) if "gemm" in steps else 0)
        + ("hbm" in steps)
        + ("allreduce" in steps)
        + ("dcgm" in steps)
    )
    done = 0
    if "gemm" in steps:
        for dtype in cfg.dtypes:
            say(f"GEMM {dtype} on {len(devices)} device(s) for {cfg.seconds:g}s", done / max(total, 1))
            with TelemetryWatcher(nvml, cfg.node, [g for g in gpu_ids if g is not None]) as w:
                outs = _on_each(torch, cfg, devices, lambda dev, d=dtype: _gemm(torch, dev, d, cfg))
            rep.telemetry += w.watch.samples
            rep.results += _judge_gemm(cfg, devices, dtype, outs, floor, w.watch.reasons)
            done += 1
    if "hbm" in steps:
        say(f"HBM copy on {len(devices)} device(s) for {cfg.seconds:g}s", done / max(total, 1))
        from fleettool.burnin.hbm import run_hbm

        with TelemetryWatcher(nvml, cfg.node, [g for g in gpu_ids if g is not None]) as w:
            outs = _on_each(torch, cfg, devices, lambda dev: run_hbm(torch, dev, cfg.seconds, cfg.hbm_bytes))
        rep.telemetry += w.watch.samples
        fl, src = floor("hbm")
        for d, o in zip(devices, outs, strict=True):
            if isinstance(o, BaseException):
                rep.results.append(
                    Result(
                        cfg.node,
                        d["gpu"],
                        "hbm",
                        Verdict.INCONCLUSIVE,
                        reason=f"error: {o}",
                        uuid=d.get("uuid"),
                    )
                )
                continue
            v, why = judge(o.gbps, fl)
            r = Result(
                cfg.node,
                d["gpu"],
                "hbm",
                v,
                _sig(o.gbps),
                "GB/s",
                fl,
                src,
                why,
                d.get("uuid"),
                {"bytes_per_copy": o.bytes_per_copy, "copies": o.copies, "seconds": round(o.seconds, 2)},
            )
            apply_telemetry(r, w.watch.reasons.get(d["gpu"]) if d["gpu"] is not None else None)
            rep.results.append(r)
        done += 1
    if "allreduce" in steps:
        say("all-reduce across the node's devices", done / max(total, 1))
        rep.results.append(_allreduce(cfg, devices, floor, rep))
        done += 1
    if "dcgm" in steps and cfg.backend == "cuda" and dcgm.available():
        say(f"dcgmi diag -r {cfg.dcgm_level}", done / max(total, 1))
        rep.results += dcgm.run_diag(cfg.node, cfg.dcgm_level)
    apply_peers(rep.results)
    if nvml is not None:
        import contextlib

        with contextlib.suppress(Exception):
            nvml.close()
    rep.finished = time.time()
    say("done", 1.0)
    if store is not None:
        save(store, rep)
    return rep


def _devices(torch: Any, cfg: BurninConfig) -> tuple[list[dict[str, Any]], str | None, str | None, Any]:
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


def _on_each(
    torch: Any, cfg: BurninConfig, devices: list[dict[str, Any]], fn: Callable[[Any], Any]
) -> list[Any]:
    """Run fn on every device at once (one thread per GPU; CUDA work releases the GIL)."""
    outs: list[Any] = [None] * len(devices)

    def one(i: int) -> None:
        try:
            dev = torch.device(devices[i]["device"])
            if dev.type == "cuda":
                torch.cuda.set_device(dev)
            outs[i] = fn(dev)
        except BaseException as e:  # a failing GPU must not take the others' results with it
            outs[i] = e

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(devices))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outs


def _gemm(torch: Any, dev: Any, dtype: str, cfg: BurninConfig) -> Any:
    from fleettool.burnin.gemm import run_gemm, supported

    why = supported(torch, dev, dtype)
    if why is not None:
        return why
    return run_gemm(torch, dev, dtype, cfg.seconds, cfg.gemm_n)


def _judge_gemm(
    cfg: BurninConfig,
    devices: list[dict[str, Any]],
    dtype: str,
    outs: list[Any],
    floor: Callable[[str], tuple[float | None, str]],
    reasons: dict[int, int],
) -> list[Result]:
    test = f"gemm-{dtype}"
    fl, src = floor(test)
    res: list[Result] = []
    sums = [o.checksum for o in outs if hasattr(o, "checksum")]
    majority = max(set(sums), key=sums.count) if sums else None
    for d, o in zip(devices, outs, strict=True):
        if isinstance(o, str):
            res.append(Result(cfg.node, d["gpu"], test, Verdict.SKIPPED, reason=o, uuid=d.get("uuid")))
            continue
        if isinstance(o, BaseException):
            res.append(
                Result(
                    cfg.node, d["gpu"], test, Verdict.INCONCLUSIVE, reason=f"error: {o}", uuid=d.get("uuid")
                )
            )
            continue
        v, why = judge(o.tflops, fl)
        ev = {
            "n": o.n,
            "iterations": o.iterations,
            "seconds": round(o.seconds, 2),
            "cold_tflops": round(o.cold_tflops, 1),
            "sdc_checks": o.checks,
            "sdc_mismatches": o.mismatches,
            "checksum": o.checksum,
            "per_second": [round(x, 1) for x in o.per_second],
        }
        r = Result(cfg.node, d["gpu"], test, v, _sig(o.tflops), "TFLOP/s", fl, src, why, d.get("uuid"), ev)
        if o.mismatches:
            r.verdict, r.reason = (
                Verdict.FAIL,
                f"silent data corruption: {o.mismatches} of {o.checks} checked results differ from the first",
            )
        elif majority is not None and len(sums) >= 2 and o.checksum != majority and sums.count(majority) > 1:
            r.verdict, r.reason = (
                Verdict.FAIL,
                "silent data corruption: its result differs from the other GPUs' for the same inputs",
            )
        apply_telemetry(r, reasons.get(d["gpu"]) if d["gpu"] is not None else None)
        res.append(r)
    return res


def _allreduce_nccl_tests(cfg: BurninConfig, nprocs: int) -> dict[str, Any]:
    """Run nccl-tests' all_reduce_perf (one process, -g GPUs) and read its table with the nccl-tests parser."""
    import shutil
    import subprocess

    from fleettool.formats.nccl_tests import parse_nccl_text

    exe = shutil.which("all_reduce_perf")
    if exe is None:
        raise RuntimeError("all_reduce_perf is not on PATH")
    argv = [
        exe,
        "-b",
        str(cfg.ar_min),
        "-e",
        str(cfg.ar_max),
        "-f",
        "2",
        "-g",
        str(nprocs),
        "-n",
        str(cfg.ar_iters),
    ]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    runs, _issues = parse_nccl_text(p.stdout.splitlines(), path="all_reduce_perf", op_hint="all_reduce")
    if p.returncode != 0 or not runs or not runs[-1].rows:
        raise RuntimeError(f"all_reduce_perf exit {p.returncode}: {(p.stderr or p.stdout).strip()[-200:]}")
    run = runs[-1]
    rows = [
        {
            "size_bytes": r.size_bytes,
            "time_us": r.ip_time_us or r.oop_time_us or 0.0,
            "algbw_gbps": r.ip_algbw_gbps or r.oop_algbw_gbps or 0.0,
            "busbw_gbps": r.ip_busbw_gbps or r.oop_busbw_gbps or 0.0,
            "wrong": (r.ip_wrong or 0) + (r.oop_wrong or 0),
        }
        for r in run.rows
    ]
    return {
        "world": run.nranks or nprocs,
        "backend": "nccl-tests",
        "rows": rows,
        "footer_avg_busbw_gbps": run.avg_busbw_gbps,
    }


def _allreduce(
    cfg: BurninConfig,
    devices: list[dict[str, Any]],
    floor: Callable[[str], tuple[float | None, str]],
    rep: BurninReport,
) -> Result:
    from fleettool.burnin.allreduce import run_local, sizes_between

    backend = "gloo" if cfg.backend == "cpu" else "nccl"
    nprocs = cfg.ar_procs or (2 if cfg.backend == "cpu" else len(devices))
    sizes = sizes_between(cfg.ar_min, cfg.ar_max)
    if cfg.backend == "cuda":
        mem = min(int(d.get("memory_bytes", 0)) for d in devices)
        sizes = [s for s in sizes if s * 3 < mem] or sizes[:1]
    with tempfile.TemporaryDirectory(prefix="fleettool-ar-") as tmp:
        try:
            if cfg.ar_tool == "nccl-tests":
                out = _allreduce_nccl_tests(cfg, nprocs)
                backend = "nccl-tests"
            else:
                out = run_local(backend, nprocs, sizes, cfg.ar_iters, 3, os.path.join(tmp, "r.json"))
        except Exception as e:
            return Result(
                cfg.node, None, "allreduce", Verdict.INCONCLUSIVE, reason=f"all-reduce did not run: {e}"
            )
    rep.allreduce = out
    rows = out["rows"]
    big = rows[-1]
    test = f"allreduce-{nprocs}"
    ev = {"world": out["world"], "backend": backend, "rows": rows, "largest_size": big["size_bytes"]}
    if any(r["wrong"] for r in rows):
        return Result(
            cfg.node,
            None,
            test,
            Verdict.FAIL,
            big["busbw_gbps"],
            "GB/s",
            reason="all-reduce returned wrong values",
            evidence=ev,
        )
    if nprocs < 2:
        return Result(
            cfg.node,
            None,
            test,
            Verdict.SKIPPED,
            round(big["algbw_gbps"], 1),
            "GB/s algbw",
            reason="one GPU: all-reduce has no peer (busbw = algbw x 2(n-1)/n = 0)",
            evidence=ev,
        )
    fl, src = floor(test)
    v, why = judge(big["busbw_gbps"], fl)
    return Result(
        cfg.node,
        None,
        test,
        v,
        round(big["busbw_gbps"], 2),
        "GB/s busbw",
        fl,
        src,
        why + f" at {big['size_bytes'] / 2**30:.3g} GiB",
        evidence=ev,
    )


def _sig(x: float) -> float:
    return float(f"{x:.4g}")


def _dt(t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(t, tz=dt.timezone.utc).replace(tzinfo=None)


def save(store: Store, rep: BurninReport) -> None:
    """Results into burnin_results, telemetry into samples, the all-reduce table as an NCCL run."""
    from fleettool.formats.nccl_tests import NcclRow
    from fleettool.store.db import dumps_evidence

    store.begin()
    try:
        for r in rep.results:
            store.con.execute(
                "INSERT INTO burnin_results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    rep.run_id,
                    _dt(rep.finished or time.time()),
                    r.node,
                    r.gpu,
                    r.uuid,
                    r.test,
                    r.figure,
                    r.unit,
                    r.floor,
                    r.verdict.value,
                    r.reason,
                    dumps_evidence(r.evidence),
                ],
            )
        if rep.telemetry:
            store.write_samples(rep.telemetry)
        if rep.allreduce:
            rows = [
                NcclRow(
                    x["size_bytes"],
                    x["size_bytes"] // 4,
                    "float",
                    "sum",
                    -1,
                    ip_time_us=x["time_us"],
                    ip_algbw_gbps=x["algbw_gbps"],
                    ip_busbw_gbps=x["busbw_gbps"],
                    ip_wrong=x["wrong"],
                )
                for x in rep.allreduce["rows"]
            ]
            big = rows[-1].ip_busbw_gbps if rows else None
            avg = sum(r.ip_busbw_gbps or 0 for r in rows) / len(rows) if rows else None
            store.write_nccl_run(
                run_id=f"burnin-{rep.run_id}",
                ts=rep.finished,
                op="all_reduce",
                ranks=int(rep.allreduce["world"]),
                nodes=[rep.node],
                avg_busbw_gbps=avg,
                peak_busbw_gbps=max((r.ip_busbw_gbps or 0 for r in rows), default=big),
                wrong=sum(r.ip_wrong or 0 for r in rows),
                version=None,
                source=f"fleettool burnin {rep.run_id}",
                rows=rows,
            )
        store.commit()
    except Exception:
        store.rollback()
        raise
