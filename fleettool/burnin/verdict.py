"""Verdicts, results, floors and exit codes of a burn-in. Pure: no torch, no NVML.

A figure is judged against its floor: below the floor is FAIL; within 10 % above it is WARN (marginal);
slower than its node's other GPUs by more than 15 % is FAIL even above the floor (NVIDIA/DCGM#122: a GPU at a
third of its speed passed DCGM's longest diag, whose cross-GPU check is off by default); any silent data
corruption is FAIL; thermal or HW slowdown during the test is at least WARN (power capping is normal).
"""

from __future__ import annotations

import enum
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any


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
        if r.gpu is not None and r.figure is not None and r.verdict in (Verdict.PASS, Verdict.WARN):
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


def exit_code(results: list[Result]) -> int:
    """1 on any FAIL. 7 when nothing was tested (all SKIPPED: no GPU, no torch) or a test that should have run
    could not say (INCONCLUSIVE: an error, a DCGM test skipped). 0 when every test PASSed or WARNed; a test
    SKIPPED because it does not apply (fp8 on a GPU without it, all-reduce on a one-GPU node) does not count."""
    if not results:
        return 7
    if any(r.verdict == Verdict.FAIL for r in results):
        return 1
    if any(r.verdict == Verdict.INCONCLUSIVE for r in results):
        return 7
    if all(r.verdict == Verdict.SKIPPED for r in results):
        return 7
    return 0
