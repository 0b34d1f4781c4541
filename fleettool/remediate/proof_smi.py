"""The proof's parts read from nvidia-smi on the node: the recovery action (and whether the GPU is there at all),
and the NVLink active-link count against the GPU's own count before the fault."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from fleettool.formats.nvidia_smi import parse_text
from fleettool.model import normalize_pci_bus_id
from fleettool.remediate.model import ProofPart
from fleettool.remediate.proof_context import node_gpus
from fleettool.remediate.runner import RunResult

if TYPE_CHECKING:
    from fleettool.burnin.report import BurninReport
    from fleettool.remediate.proof_context import ProofContext

# what nvidia-smi prints when it cannot reach a GPU (fixtures/remediate/proof/SOURCES.md cites real pastes)
LOST = ("No devices were found", "Unable to determine the device handle", "GPU is lost")
RECOVERY_KEY = "gpu_recovery_action"  # "GPU Recovery Action : None" (R565 and later)
SMI_TIMEOUT_S = 90.0
WEEK_S = 7 * 86400.0


def _lost_line(r: RunResult) -> str | None:
    """The line that says the GPU is gone, or why nvidia-smi gave nothing to read."""
    text = f"{r.stdout}\n{r.stderr}"
    for line in text.splitlines():
        if any(w in line for w in LOST):
            return line.strip()
    if r.timed_out:
        return f"nvidia-smi did not answer within {SMI_TIMEOUT_S:g} s"
    if r.rc != 0:
        return f"nvidia-smi exit {r.rc}: {r.excerpt()[:200] or 'no output'}"
    return None


def recovery_action_part(ctx: ProofContext) -> ProofPart:
    """The GPU (every GPU the store knows of the node, for gpu None) is listed and its recovery action is None."""
    argv = ["nvidia-smi", "-q"] + ([] if ctx.gpu is None else ["-i", str(ctx.gpu)])
    r = ctx.runner.on_node(argv, timeout_s=SMI_TIMEOUT_S)
    figs: dict[str, Any] = {"argv": argv, "rc": r.rc}
    lost = _lost_line(r)
    which = "the node's GPUs" if ctx.gpu is None else f"GPU {ctx.gpu}"
    if lost is not None:
        return ProofPart("recovery-action", False, f"GPU lost: {which}: {lost}", {**figs, "lost": True})
    rep = parse_text(r.stdout.splitlines(), path=" ".join(argv))
    figs["driver"] = rep.driver
    if ctx.gpu is not None:
        gpus = rep.gpus[:1]  # -i N prints that GPU alone (parse_text numbers the blocks from 0)
        want: list[tuple[int, str | None]] = [(ctx.gpu, None)]
    else:
        gpus = rep.gpus
        want = node_gpus(ctx.store, ctx.node) or [(g.index or 0, g.pci_bus_id) for g in rep.gpus]
    by_pci = {g.pci_bus_id: g for g in gpus if g.pci_bus_id}
    by_index = {g.index: g for g in gpus}
    actions: dict[str, str | None] = {}
    missing: list[str] = []
    for idx, pci in want:
        if ctx.gpu is not None:
            g = gpus[0] if gpus else None
        elif pci:  # by PCI id only: after a GPU is lost the others' indices shift
            g = by_pci.get(normalize_pci_bus_id(pci))
        else:
            g = by_index.get(idx)
        if g is None:
            missing.append(f"GPU {idx}" + (f" ({pci})" if pci else ""))
            continue
        actions[str(idx)] = g.values.get(RECOVERY_KEY)
    figs["recovery_action"] = actions
    if missing:
        detail = f"GPU lost: {', '.join(missing)} not listed by {' '.join(argv)}"
        return ProofPart("recovery-action", False, detail, {**figs, "lost": True, "missing": missing})
    bad = {k: v for k, v in actions.items() if v is not None and v.strip() != "None"}
    if bad:
        words = ", ".join(f"GPU {k}: {v}" for k, v in bad.items())
        return ProofPart("recovery-action", False, f"recovery action is not None ({words})", figs)
    unread = [k for k, v in actions.items() if v is None]
    if unread:
        detail = f"recovery action not reported by driver {rep.driver or 'of unknown version'} (GPU {', '.join(unread)})"
        return ProofPart("recovery-action", None, detail, figs)
    return ProofPart("recovery-action", True, f"{which}: listed, recovery action None", figs)


# `nvidia-smi nvlink -s`: a GPU line, then one line per link, its speed or <inactive>
_RE_GPU = re.compile(r"^GPU (\d+):")
_RE_LINK = re.compile(r"^\s*Link (\d+):\s*(.*?)\s*$")


def parse_nvlink_status(text: str, default_gpu: int | None) -> dict[int, tuple[int, int]]:
    """GPU index -> (links with a speed, links <inactive>)."""
    out: dict[int, tuple[int, int]] = {}
    cur = default_gpu
    for line in text.splitlines():
        m = _RE_GPU.match(line.strip())
        if m:
            cur = int(m.group(1))
            out.setdefault(cur, (0, 0))
            continue
        m = _RE_LINK.match(line)
        if m and cur is not None:
            up, down = out.get(cur, (0, 0))
            if "inactive" in m.group(2).lower():
                out[cur] = (up, down + 1)
            elif re.search(r"\d", m.group(2)):
                out[cur] = (up + 1, down)
    return out


def links_before(ctx: ProofContext, gpu: int) -> tuple[int | None, str]:
    """The GPU's own active-link count before the fault, and where it came from."""
    if ctx.before_fault is not None:
        from fleettool.store.values import db_time

        hi = ctx.store.scalar(
            "SELECT max(value) FROM samples WHERE node = ? AND gpu = ? AND metric = 'nvlink_links_active' "
            "AND ts >= ? AND ts <= ?",
            [ctx.node, gpu, db_time(ctx.before_fault - WEEK_S), db_time(ctx.before_fault)],
        )
        if hi is not None:
            return int(hi), "the store's nvlink_links_active, its maximum in the 7 days before the fault"
    if ctx.links_before is not None:
        return ctx.links_before, "the count read when the plan was made"
    return None, "no count before the fault (none stored in the 7 days before it, none read at plan time)"


def _loopback(
    ctx: ProofContext, report: BurninReport | None, n_gpus: int
) -> tuple[bool | None, str, dict[str, Any]]:
    """The NCCL loopback (the burn-in's all-reduce over the node's GPUs): PASS needed where the whole node was out
    and has peers; None where it does not apply."""
    if not ctx.whole_node or n_gpus < 2:
        return None, "", {}
    rows = [x for x in (report.results if report else []) if x.test.startswith("allreduce")]
    if not rows:
        return False, "no all-reduce row in the burn-in (the NCCL loopback did not run)", {}
    a = rows[0]
    figs = {
        "allreduce_verdict": a.verdict.value,
        "allreduce_busbw_gbps": a.figure,
        "allreduce_floor": a.floor,
    }
    if a.verdict.value != "PASS":
        return False, f"NCCL loopback (all-reduce over {n_gpus} GPUs) {a.verdict.value}: {a.reason}", figs
    return True, f"NCCL loopback PASS ({a.figure:g} {a.unit})" if a.figure else "NCCL loopback PASS", figs


def nvlink_part(ctx: ProofContext, report: BurninReport | None) -> ProofPart:
    argv = ["nvidia-smi", "nvlink", "-s"] + ([] if ctx.gpu is None else ["-i", str(ctx.gpu)])
    r = ctx.runner.on_node(argv, timeout_s=SMI_TIMEOUT_S)
    figs: dict[str, Any] = {"argv": argv, "rc": r.rc}
    known = node_gpus(ctx.store, ctx.node)
    if r.rc != 0:
        return ProofPart("nvlink", False, f"{' '.join(argv)} failed: {_lost_line(r)}", figs)
    counts = parse_nvlink_status(r.stdout, ctx.gpu)
    if ctx.gpu is not None:  # -i N prints that GPU alone, whatever number its line gives it
        counts = {ctx.gpu: (sum(u for u, _ in counts.values()), sum(d for _, d in counts.values()))}
    gpus = [ctx.gpu] if ctx.gpu is not None else sorted({g for g, _ in known} | set(counts))
    worse, unjudged, notes = [], [], []
    per: dict[str, Any] = {}
    for g in gpus:
        up, down = counts.get(g, (0, 0))
        before, src = links_before(ctx, g)
        per[str(g)] = {"active": up, "inactive": down, "before": before, "before_from": src}
        if before is None:
            unjudged.append(g)
            notes.append(f"GPU {g}: {up} active, {down} inactive; {src}")
        elif up < before:
            worse.append(f"GPU {g}: {up} links active, {before} before the fault ({src})")
        else:
            notes.append(f"GPU {g}: {up} links active, {before} before the fault ({src})")
    figs["gpus"] = per
    lb_ok, lb_detail, lb_figs = _loopback(ctx, report, len(known))
    figs.update(lb_figs)
    if worse or lb_ok is False:
        return ProofPart("nvlink", False, "; ".join(worse + ([lb_detail] if lb_ok is False else [])), figs)
    if unjudged and len(unjudged) == len(gpus):
        if all(per[str(g)]["active"] + per[str(g)]["inactive"] == 0 for g in gpus):
            notes = ["no NVLink (nvidia-smi printed no links) and no count before the fault"]
        return ProofPart("nvlink", None, "; ".join(notes + ([lb_detail] if lb_detail else [])), figs)
    return ProofPart("nvlink", True, "; ".join(notes + ([lb_detail] if lb_detail else [])), figs)
