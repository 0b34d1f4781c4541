"""All-reduce stress with torch.distributed: one process per GPU (NCCL) or per CPU worker (gloo), sizes from
1 MiB up, algbw and busbw as nccl-tests defines them (busbw = algbw x 2(n-1)/n). The same worker runs under
torchrun or srun for several nodes (it reads RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR from the
environment), or is spawned here for one node.

    python -m fleettool.burnin.allreduce --backend nccl --max-size 8G      # under torchrun / srun
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from fleettool.units import parse_size


@dataclass
class ArRow:
    size_bytes: int
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int


def sizes_between(lo: int, hi: int) -> list[int]:
    out = []
    s = lo
    while s <= hi:
        out.append(s)
        s *= 2
    return out


def _bench(torch: Any, dist: Any, device: Any, sizes: list[int], iters: int, warmup: int) -> list[ArRow]:
    world = dist.get_world_size()
    rank = dist.get_rank()
    rows = []
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for size in sizes:
        n = size // 4
        t = torch.full((n,), float(rank + 1), dtype=torch.float32, device=device)
        for _ in range(warmup):
            dist.all_reduce(t)
        sync()
        dist.barrier()
        t.fill_(float(rank + 1))
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        sync()
        dt = (time.perf_counter() - t0) / iters
        # check: after `iters` sums of (1..world), each element is sum(1..world) * world^(iters-1)
        expect = world * (world + 1) / 2 * float(world) ** (iters - 1)
        wrong = int((t != expect).sum().item()) if expect < 2**24 else 0
        alg = size / dt / 1e9
        rows.append(ArRow(size, dt * 1e6, alg, alg * 2 * (world - 1) / world, wrong))
    return rows


def worker(
    local_rank: int,
    world: int,
    backend: str,
    sizes: list[int],
    iters: int,
    warmup: int,
    init: str,
    out_path: str | None,
) -> None:
    import torch
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", local_rank))
    world = int(os.environ.get("WORLD_SIZE", world))
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world)
    try:
        rows = _bench(torch, dist, device, sizes, iters, warmup)
    finally:
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0 and out_path:
        with open(out_path, "w") as f:
            json.dump(
                {
                    "world": world,
                    "backend": backend,
                    "host": socket.gethostname(),
                    "rows": [asdict(r) for r in rows],
                },
                f,
            )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_local(
    backend: str, nprocs: int, sizes: list[int], iters: int, warmup: int, out_path: str
) -> dict[str, Any]:
    """Spawn one process per GPU (or CPU worker) on this node and return rank 0's results."""
    import torch.multiprocessing as mp

    init = f"tcp://127.0.0.1:{_free_port()}"
    mp.spawn(worker, args=(nprocs, backend, sizes, iters, warmup, init, out_path), nprocs=nprocs, join=True)
    with open(out_path) as f:
        return dict(json.load(f))


def run_nccl_tests(nprocs: int, min_size: int, max_size: int, iters: int) -> dict[str, Any]:
    """Run nccl-tests' all_reduce_perf (one process, -g GPUs) and read its table with the nccl-tests parser;
    the same shape as run_local's results, plus the footer's average busbw."""
    import shutil
    import subprocess

    from fleettool.formats.nccl_tests import parse_nccl_text

    exe = shutil.which("all_reduce_perf")
    if exe is None:
        raise RuntimeError("all_reduce_perf is not on PATH")
    argv = [exe, "-b", str(min_size), "-e", str(max_size), "-f", "2", "-g", str(nprocs), "-n", str(iters)]
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    ap.add_argument("--min-size", default="1M")
    ap.add_argument("--max-size", default="4G")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", default="-")
    a = ap.parse_args(argv)
    sizes = sizes_between(parse_size(a.min_size), parse_size(a.max_size))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    out = None if a.out == "-" else a.out
    worker(local, int(os.environ.get("WORLD_SIZE", "1")), a.backend, sizes, a.iters, a.warmup, "env://", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
