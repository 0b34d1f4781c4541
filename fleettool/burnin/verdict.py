"""Verdicts, results, floors and exit codes of a burn-in. Pure: no torch, no NVML.

A figure is judged against its floor: below the floor is FAIL; within 10 % above it is WARN (marginal);
slower than its node's other GPUs by more than 15 % is FAIL even above the floor (NVIDIA/DCGM#122: a GPU at a
third of its speed passed DCGM's longest diag, whose cross-GPU check is off by default); any silent data
corruption is FAIL; thermal or HW slowdown during the test is at least WARN (power capping is normal).
The judges of each step's measurements (`judge_gemm`, `judge_hbm`, `judge_allreduce`) are here as well.

SKIPPED: the test does not apply (fp8 on a GPU without it, all-reduce with one GPU, DCGM where dcgmi is not
installed, the busy check without NVML); it counts for nothing unless nothing at all was tested.
INCONCLUSIVE: the test should have said and could not: an error, a GPU busy with another process (busy.py),
a cross-GPU checksum split with no strict majority. A provisional floor (floors.py) holds a PASS at WARN.
"""

from __future__ import annotations

import enum
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fleettool.burnin.gemm import GemmResult
    from fleettool.burnin.hbm import HbmResult


class Verdict(str, enum.Enum):
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIPPED = "SKIPPED"
    INCONCLUSIVE = "INCONCLUSIVE"

    @property
    def rank(self) -> int:
        return {"PASS": 0, "WARN": 1, "SKIPPED": 2, "INCONCLUSIVE": 3, "FAIL": 4}[self.value]


@dataclass
class Result:
    node: str
    gpu: int | None
    test: str  # gemm-bf16, gemm-fp16, gemm-tf32, gemm-fp8, hbm, allreduce, dcgm-diag
    verdict: Verdict
    figure: float | None = None
    unit: str = ""
    floor: float | None = None
    floor_source: str = ""
    reason: str = ""
    uuid: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["verdict"] = self.verdict.value
        return d


MARGIN = 0.10  # within 10 % above the floor: WARN
PEER_SLOW = 0.15  # more than 15 % below the node's median: FAIL


def judge(figure: float | None, floor: float | None, *, higher_is_better: bool = True) -> tuple[Verdict, str]:
    if figure is None:
        return Verdict.INCONCLUSIVE, "no figure"
    if floor is None:
        return (
            Verdict.WARN,
            "no floor for this SKU yet (no fleet baseline, no published default): judged by peers only",
        )
    if figure < floor:
        return Verdict.FAIL, f"{figure:.4g} below the floor {floor:.4g}"
    if figure < floor * (1 + MARGIN):
        return Verdict.WARN, f"{figure:.4g} within {MARGIN:.0%} of the floor {floor:.4g}"
    return Verdict.PASS, f"{figure:.4g} at or above the floor {floor:.4g}"


def apply_peers(results: list[Result]) -> None:
    """Within one node and test, a GPU more than PEER_SLOW below the median of the others fails."""
    groups: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        per_gpu = r.gpu is not None or r.uuid is not None  # a GPU CUDA sees that NVML did not name: its UUID
        if per_gpu and r.figure is not None and r.verdict in (Verdict.PASS, Verdict.WARN):
            groups.setdefault((r.node, r.test), []).append(r)
    for rs in groups.values():
        if len(rs) < 2:
            continue
        med = statistics.median(r.figure for r in rs if r.figure is not None)
        for r in rs:
            assert r.figure is not None
            if med > 0 and r.figure < med * (1 - PEER_SLOW):
                r.verdict = Verdict.FAIL
                r.reason = f"{r.figure:.4g} is {1 - r.figure / med:.0%} below the median of its node's GPUs ({med:.4g})"
                r.evidence["peer_median"] = med
            elif r.verdict == Verdict.WARN and r.floor is None and med > 0:
                r.verdict = Verdict.PASS
                r.reason = (
                    f"{r.figure:.4g}, in line with its node's GPUs (median {med:.4g}); no SKU floor yet"
                )
                r.evidence["peer_median"] = med


def apply_telemetry(r: Result, reasons_mask: int | None) -> None:
    """Thermal (0x20/0x40) or HW slowdown / power brake (0x8/0x80) during the test: a finding, at least WARN.
    Power capping (0x4) is how a healthy loaded GPU runs and changes nothing."""
    if reasons_mask is None:
        return
    r.evidence["clock_event_reasons_seen"] = hex(reasons_mask)
    bad = reasons_mask & (0x8 | 0x20 | 0x40 | 0x80)
    if bad and r.verdict == Verdict.PASS:
        r.verdict = Verdict.WARN
        r.reason += (
            f"; clocks held by {'thermal' if bad & 0x60 else 'HW'} slowdown during the test ({hex(bad)})"
        )
    elif reasons_mask & 0x4:
        r.evidence["power_capped"] = True


def apply_provisional(r: Result, why: str | None) -> None:
    """A floor that cannot be trusted to pass this GPU (floors.Provenance.provisional says why): a PASS
    against it is a WARN, the reason and the evidence saying so. WARN and FAIL stand."""
    if why is None or r.floor is None:
        return
    r.evidence["floor_provisional"] = why
    if r.verdict in (Verdict.PASS, Verdict.WARN):
        r.verdict = Verdict.WARN
        r.reason += f"; {why}"


def exit_code(results: list[Result]) -> int:
    """1 on any FAIL. 7 when nothing was tested (all SKIPPED: no GPU, no torch) or a test that should have run
    could not say (INCONCLUSIVE: an error, a GPU busy with another process, a cross-GPU checksum split with no
    majority, a DCGM test DCGM skipped). 0 when every test PASSed or WARNed; a test SKIPPED because it does
    not apply (fp8 on a GPU without it, all-reduce on a one-GPU node, no dcgmi) does not count."""
    if not results:
        return 7
    if any(r.verdict == Verdict.FAIL for r in results):
        return 1
    if any(r.verdict == Verdict.INCONCLUSIVE for r in results):
        return 7
    if all(r.verdict == Verdict.SKIPPED for r in results):
        return 7
    return 0


def sig(x: float) -> float:
    """Four significant digits, as figures are reported."""
    return float(f"{x:.4g}")


def _not_run(node: str, dev: dict[str, Any], test: str, out: str | BaseException) -> Result:
    """A device's outcome that is no measurement: why the test does not apply (SKIPPED), or its error."""
    if isinstance(out, str):
        return Result(node, dev["gpu"], test, Verdict.SKIPPED, reason=out, uuid=dev.get("uuid"))
    return Result(node, dev["gpu"], test, Verdict.INCONCLUSIVE, reason=f"error: {out}", uuid=dev.get("uuid"))


def _reasons(reasons: dict[int, int], dev: dict[str, Any]) -> int | None:
    return reasons.get(dev["gpu"]) if dev["gpu"] is not None else None


def _label(dev: dict[str, Any], i: int) -> str:
    return f"GPU {dev['gpu']}" if dev.get("gpu") is not None else f"device {i}"


def checksum_groups(outs: Sequence[GemmResult | str | BaseException]) -> dict[str, list[int]]:
    """The positions of the devices that produced a result, grouped by the checksum of their result (its
    repr: exact, and NaN equal to NaN), largest group first."""
    groups: dict[str, list[int]] = {}
    for i, o in enumerate(outs):
        if not isinstance(o, (str, BaseException)):
            groups.setdefault(repr(o.checksum), []).append(i)
    return dict(sorted(groups.items(), key=lambda kv: -len(kv[1])))


def cross_gpu(
    devices: Sequence[dict[str, Any]], groups: dict[str, list[int]]
) -> tuple[dict[int, tuple[Verdict, str]], dict[str, Any]]:
    """The cross-GPU corruption check: identical GPUs given the same inputs return the same bits. A device
    outside a strict majority (more than half of the devices that returned a result) FAILs; with no strict
    majority (2 against 2, 1 against 1, 2-2-1, ...) nobody can say which group is wrong: every device in the
    disagreement is INCONCLUSIVE, the groups named. Returns the verdict per device position that changes, and
    the evidence."""
    total = sum(len(g) for g in groups.values())
    named = [{"checksum": c, "devices": [_label(devices[i], i) for i in idx]} for c, idx in groups.items()]
    ev: dict[str, Any] = {"cross_gpu_groups": named} if len(groups) > 1 else {}
    if len(groups) <= 1:
        return {}, ev
    sizes = [len(g) for g in groups.values()]
    if sizes[0] * 2 > total:  # a strict majority: the others are wrong
        major = next(iter(groups))
        out = {
            i: (
                Verdict.FAIL,
                f"silent data corruption: its result differs from the {sizes[0]} of {total} devices "
                f"that agree, for the same inputs",
            )
            for c, idx in groups.items()
            if c != major
            for i in idx
        }
        return out, ev
    desc = "; ".join(f"{', '.join(g['devices'])}: checksum {g['checksum']}" for g in named)
    why = (
        f"results differ across devices with no majority ({' vs '.join(map(str, sizes))}): which are "
        f"corrupt cannot be told ({desc})"
    )
    return {i: (Verdict.INCONCLUSIVE, why) for idx in groups.values() for i in idx}, ev


def judge_gemm(
    node: str,
    dtype: str,
    devices: Sequence[dict[str, Any]],
    outs: Sequence[GemmResult | str | BaseException],
    floor: tuple[float | None, str],
    reasons: dict[int, int],
) -> list[Result]:
    """One GEMM dtype on every device: TFLOP/s against the floor; any mismatch within a device is silent data
    corruption (FAIL), and so is a result that differs from a strict majority of the node's devices; a split
    with no strict majority is INCONCLUSIVE (`cross_gpu`). A corruption FAIL carries evidence corruption=True."""
    test = f"gemm-{dtype}"
    fl, src = floor
    res: list[Result] = []
    cross, cross_ev = cross_gpu(devices, checksum_groups(outs))
    for i, (d, o) in enumerate(zip(devices, outs, strict=True)):
        if isinstance(o, (str, BaseException)):
            res.append(_not_run(node, d, test, o))
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
            "tf32": o.tf32,
            "per_second": [round(x, 1) for x in o.per_second],
            **cross_ev,
        }
        r = Result(node, d["gpu"], test, v, sig(o.tflops), "TFLOP/s", fl, src, why, d.get("uuid"), ev)
        if o.mismatches:
            r.verdict, r.reason = (
                Verdict.FAIL,
                f"silent data corruption: {o.mismatches} of {o.checks} checked results differ from the first",
            )
            r.evidence["corruption"] = True
        elif i in cross and (cross[i][0] == Verdict.FAIL or cross[i][0].rank > r.verdict.rank):
            r.verdict, r.reason = cross[i]  # a FAIL below the floor stays one within a tie
            if r.verdict == Verdict.FAIL:
                r.evidence["corruption"] = True
        apply_telemetry(r, _reasons(reasons, d))
        res.append(r)
    return res


def judge_hbm(
    node: str,
    devices: Sequence[dict[str, Any]],
    outs: Sequence[HbmResult | BaseException],
    floor: tuple[float | None, str],
    reasons: dict[int, int],
) -> list[Result]:
    """HBM copy bandwidth (GB/s) on every device against the floor."""
    fl, src = floor
    res: list[Result] = []
    for d, o in zip(devices, outs, strict=True):
        if isinstance(o, BaseException):
            res.append(_not_run(node, d, "hbm", o))
            continue
        v, why = judge(o.gbps, fl)
        ev = {"bytes_per_copy": o.bytes_per_copy, "copies": o.copies, "seconds": round(o.seconds, 2)}
        r = Result(node, d["gpu"], "hbm", v, sig(o.gbps), "GB/s", fl, src, why, d.get("uuid"), ev)
        apply_telemetry(r, _reasons(reasons, d))
        res.append(r)
    return res


def judge_allreduce(
    node: str,
    nprocs: int,
    out: dict[str, Any],
    backend: str,
    floor: Callable[[str], tuple[float | None, str]],
) -> Result:
    """The node's all-reduce table: wrong values FAIL; one GPU has no peer (SKIPPED); else the busbw at the
    largest size against the floor of `allreduce-<nprocs>`."""
    rows = out["rows"]
    big = rows[-1]
    test = f"allreduce-{nprocs}"
    ev = {"world": out["world"], "backend": backend, "rows": rows, "largest_size": big["size_bytes"]}
    if out.get("check"):
        ev["check"] = out["check"]
    if any(r["wrong"] for r in rows):
        ev["corruption"] = True
        wrong = sum(r["wrong"] for r in rows)
        ranks = sorted({k for r in rows for k in r.get("wrong_ranks") or []})
        where = f" (received on rank {', '.join(map(str, ranks))})" if ranks else ""
        return Result(
            node,
            None,
            test,
            Verdict.FAIL,
            big["busbw_gbps"],
            "GB/s",
            reason=f"all-reduce returned wrong values: {wrong} element(s) differ from the exact sum{where}",
            evidence=ev,
        )
    if nprocs < 2:
        return Result(
            node,
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
        node,
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
