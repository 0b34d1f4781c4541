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
from dataclasses import asdict, dataclass, field
from typing import Any

from fleettool.units import parse_size


@dataclass
class ArRow:
    size_bytes: int
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int  # elements that differed from the exact sum, over every rank and iteration
    checked: int = 0  # elements compared with the exact sum, over every rank and iteration
    wrong_ranks: list[int] = field(default_factory=list)  # the ranks that received a wrong value


# The largest integer below which every integer is exact in a dtype: a sum of non-negative integers no larger
# than this is the same in any order of addition (a ring, a tree, NVLS), so it can be compared for equality.
EXACT_BELOW = {"float32": 2**24, "float16": 2**11, "bfloat16": 2**8, "float64": 2**53}
PERIOD_MAX = 8191  # a prime: a chunk delivered at the wrong offset holds other values unless moved by k*8191


@dataclass(frozen=True)
class Pattern:
    """What each rank sends, chosen so that the sum over `world` ranks is exact in `dtype`: rank r sends
    a(j) + b(r) at element j, with a(j) = 1 + j mod period and b(r) = r mod period, every value >= 1 (a
    contribution that goes missing changes the sum). The sum is world * a(j) + sum of b(r): at most
    world * (2 * period - 1), kept at or below the dtype's EXACT_BELOW whatever the rank count."""

    world: int
    dtype: str = "float32"

    @property
    def period(self) -> int:
        limit = EXACT_BELOW[self.dtype]
        if self.world < 1 or self.world > limit:
            raise ValueError(f"{self.world} ranks cannot sum exactly in {self.dtype} (exact below {limit})")
        return max(1, min(PERIOD_MAX, (limit // self.world + 1) // 2))

    @property
    def rank_sum(self) -> int:
        """The sum over ranks of b(r)."""
        p = self.period
        return sum(r % p for r in range(self.world))

    def largest_sum(self) -> int:
        return self.world * self.period + self.rank_sum

    def describe(self) -> dict[str, Any]:
        """The check as the report names it."""
        return {
            "what": "every iteration's result, on every rank, against the exact sum",
            "dtype": self.dtype,
            "period": self.period,
            "largest_sum": self.largest_sum(),
            "exact_below": EXACT_BELOW[self.dtype],
        }

    def tensors(self, torch: Any, rank: int, n: int, device: Any) -> tuple[Any, Any]:
        """(what `rank` sends, the exact sum every rank must receive), n elements each on `device`."""
        p, dt = self.period, getattr(torch, self.dtype)
        a = torch.arange(1, p + 1, dtype=dt, device=device).repeat(-(-n // p))[:n]
        expected = a * self.world  # in place from here: three buffers of n at most, as sizes are chosen
        expected.add_(self.rank_sum)
        return a.add_(rank % p), expected


def sizes_between(lo: int, hi: int) -> list[int]:
    out = []
    s = lo
    while s <= hi:
        out.append(s)
        s *= 2
    return out


def _bench(
    torch: Any,
    dist: Any,
    device: Any,
    sizes: list[int],
    iters: int,
    warmup: int,
    corrupt: tuple[int, int] | None = None,
) -> list[ArRow]:
    """Every iteration (warm-up ones too) all-reduces the same inputs (`Pattern`) and compares what this rank
    received with the exact sum, element by element; only the all-reduce itself is timed (CUDA events around
    each one, or the host clock on the CPU). `corrupt=(rank, iteration)` is for tests and drills: that rank
    changes one received element after that timed iteration, as a fabric that delivered a wrong value would."""
    world = dist.get_world_size()
    rank = dist.get_rank()
    cuda = device.type == "cuda"
    pat = Pattern(world)
    wrong = torch.zeros((world, len(sizes)), dtype=torch.int64, device=device)
    times: list[list[Any]] = []
    checked: list[int] = []
    for si, size in enumerate(sizes):
        n = size // 4
        send, expected = pat.tensors(torch, rank, n, device)
        t = torch.empty_like(send)
        spans: list[Any] = []
        for k in range(-warmup, iters):
            t.copy_(send)
            if k == 0:
                dist.barrier()
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                dist.all_reduce(t)
                end.record()
                if k >= 0:
                    spans.append((start, end))
            else:
                t0 = time.perf_counter()
                dist.all_reduce(t)
                if k >= 0:
                    spans.append(time.perf_counter() - t0)
            if corrupt is not None and corrupt == (rank, k):
                t[n // 2] += 1
            wrong[rank, si] += (t != expected).sum()
        times.append(spans)
        checked.append(n * (warmup + iters) * world)
        del send, expected, t
    if cuda:
        torch.cuda.synchronize()
    dist.all_reduce(wrong)  # each rank's counts reach rank 0
    rows = []
    for si, size in enumerate(sizes):
        spans = times[si]
        secs = [s.elapsed_time(e) / 1e3 for s, e in spans] if cuda else spans
        dt = sum(secs) / len(secs)
        per_rank = wrong[:, si].tolist()
        alg = size / dt / 1e9
        rows.append(
            ArRow(
                size,
                dt * 1e6,
                alg,
                alg * 2 * (world - 1) / world,
                int(sum(per_rank)),
                checked[si],
                [r for r, w in enumerate(per_rank) if w],
            )
        )
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
    corrupt: tuple[int, int] | None = None,
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
        rows = _bench(torch, dist, device, sizes, iters, warmup, corrupt)
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
                    "check": Pattern(world).describe(),
                    "rows": [asdict(r) for r in rows],
                },
                f,
            )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_local(
    backend: str,
    nprocs: int,
    sizes: list[int],
    iters: int,
    warmup: int,
    out_path: str,
    corrupt: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Spawn one process per GPU (or CPU worker) on this node and return rank 0's results (every rank's
    wrong counts included). `corrupt=(rank, iteration)`: tests and drills only (see `_bench`)."""
    import torch.multiprocessing as mp

    init = f"tcp://127.0.0.1:{_free_port()}"
    args = (nprocs, backend, sizes, iters, warmup, init, out_path, corrupt)
    mp.spawn(worker, args=args, nprocs=nprocs, join=True)
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
