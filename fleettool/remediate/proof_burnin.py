"""The proof's burn-in: `fleettool burnin --node NODE --json --no-store --gpus N --tests gemm,hbm[,allreduce]` run on
the node through the runner, its report read back (burnin.report.from_dict) and stored here (burnin.report.save,
as `fleettool burnin --via` stores a remote run), so the lifecycle's `return` finds the PASS. The GPU passes only
when every GEMM and HBM row is PASS and no other row of the run (the busy check, DCGM) is worse: WARN, FAIL and
INCONCLUSIVE are no pass (floors are strict; a provisional floor's WARN too). SKIPPED rows count for nothing.
The all-reduce row (the NCCL loopback of a whole node) is judged by the nvlink part."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from fleettool.burnin.report import BurninReport, NotAReport, from_dict, save
from fleettool.remediate.model import ProofPart
from fleettool.remediate.proof_context import node_gpus

if TYPE_CHECKING:
    from fleettool.remediate.proof_context import ProofContext

BURNIN_TIMEOUT_S = 2 * 3600.0 + 300.0  # the burn-in's own --timeout default (2h) and a margin to start


def burnin_gpus(ctx: ProofContext) -> list[int]:
    """The GPUs stressed: the one reset; every GPU the store knows of the node when the whole node was out (the
    all-reduce spans them), the reset one among them."""
    known = [g for g, _ in node_gpus(ctx.store, ctx.node)]
    if ctx.gpu is not None and not ctx.whole_node:
        return [ctx.gpu]
    return sorted(set(known) | ({ctx.gpu} if ctx.gpu is not None else set()))


def burnin_argv(ctx: ProofContext) -> list[str]:
    gpus = burnin_gpus(ctx)
    tests = "gemm,hbm" + (",allreduce" if ctx.whole_node and len(gpus) > 1 else "")
    sel = ["--gpus", ",".join(map(str, gpus))] if gpus else []  # none known: every GPU of the node
    return ["fleettool", "burnin", "--node", ctx.node, "--json", "--no-store", *sel, "--tests", tests,
            *ctx.burnin_args]  # fmt: skip


def _figures(rep: BurninReport, gpus: list[int]) -> dict[str, Any]:
    rows = []
    for r in rep.results:
        rows.append(
            {"gpu": r.gpu, "test": r.test, "verdict": r.verdict.value, "figure": r.figure, "unit": r.unit,
             "floor": r.floor, "floor_source": r.floor_source}
        )  # fmt: skip
    tflops = {r.test.removeprefix("gemm-"): r.figure for r in rep.results if r.test.startswith("gemm-")}
    hbm = [r.figure for r in rep.results if r.test == "hbm"]
    return {"run_id": rep.run_id, "gpus": gpus, "tflops": tflops, "hbm_gbps": hbm[0] if len(hbm) == 1 else hbm,
            "rows": rows}  # fmt: skip


def burnin_part(ctx: ProofContext) -> tuple[ProofPart, BurninReport | None]:
    argv = burnin_argv(ctx)
    gpus = burnin_gpus(ctx)
    r = ctx.runner.on_node(argv, timeout_s=BURNIN_TIMEOUT_S)
    figs: dict[str, Any] = {"argv": argv, "rc": r.rc}
    if r.timed_out:
        return ProofPart("burnin", False, f"burn-in did not finish within {BURNIN_TIMEOUT_S:g} s", figs), None
    try:
        rep = from_dict(json.loads(r.stdout))
    except (json.JSONDecodeError, NotAReport) as e:
        why = f"burn-in gave no report (exit {r.rc}; {e}): {r.excerpt()[:300]}"
        return ProofPart("burnin", False, why, figs), None
    if rep.node != ctx.node:
        why = f"burn-in report {rep.run_id} is of {rep.node}, not {ctx.node}: not stored"
        return ProofPart("burnin", False, why, figs), None
    save(ctx.store, rep)
    figs.update(_figures(rep, gpus))
    judged = [x for x in rep.results if not x.test.startswith("allreduce") and x.verdict.value != "SKIPPED"]
    bad = [x for x in judged if x.verdict.value != "PASS"]
    if bad:
        words = "; ".join(
            f"{'GPU ' + str(x.gpu) if x.gpu is not None else 'node'} {x.test} {x.verdict.value}"
            + (
                f" ({x.figure:g} {x.unit}, floor {x.floor:g})"
                if x.figure is not None and x.floor is not None
                else ""
            )
            + (f": {x.reason}" if x.reason else "")
            for x in bad
        )
        return ProofPart("burnin", False, f"burn-in {rep.run_id}: {words}", figs), rep
    per_gpu = {g: {x.test.split("-")[0] for x in judged if x.gpu == g} for g in gpus} if gpus else {}
    lacking = [f"GPU {g}" for g, t in per_gpu.items() if not {"gemm", "hbm"} <= t]
    if lacking or not judged:
        what = ", ".join(lacking) or "any GPU"
        return ProofPart(
            "burnin", False, f"burn-in {rep.run_id}: no PASS GEMM and HBM row for {what}", figs
        ), rep
    return ProofPart("burnin", True, f"burn-in {rep.run_id}: GEMM and HBM PASS on GPU {', '.join(map(str, gpus))}"
                     if gpus else f"burn-in {rep.run_id}: GEMM and HBM PASS", figs), rep  # fmt: skip
