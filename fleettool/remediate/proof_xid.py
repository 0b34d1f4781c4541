"""The proof's quiet window: no new XID on the GPU (on any GPU, for the whole node) from `since` until
`since + quiet_s`. The node's kernel log is read through the runner (`journalctl -k -o short-iso-precise`, or
`dmesg --time-format iso` where the node has no journalctl) and parsed by fleettool's own kernel-log parser
(formats.kmsg.KernelLogParser, what replay and the agent use); the GPU is matched by its PCI id from the store's
gpus table. The store's own XID events after `since` count too (the agent may have seen what the log rotated
away). The window is waited out, polling every min(30 s, window); the first new XID fails it at once."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from fleettool.burnin.dispatch import ToolMissing
from fleettool.formats.kmsg import KernelLogParser
from fleettool.model import normalize_pci_bus_id
from fleettool.remediate.model import ProofPart
from fleettool.remediate.proof_context import node_gpus
from fleettool.store.values import db_time, epoch

if TYPE_CHECKING:
    from fleettool.remediate.proof_context import ProofContext

POLL_S = 30.0
READ_TIMEOUT_S = 120.0
KINDS = ("xid", "fell-off-bus")


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, tz=dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_kernel_log(ctx: ProofContext) -> tuple[str, list[str], str]:
    """(the command that answered, its lines, why it could not be read or '')."""
    argv = ["journalctl", "-k", "-o", "short-iso-precise", "--since", f"@{int(ctx.since)}", "--no-pager"]
    try:
        r = ctx.runner.on_node(argv, timeout_s=READ_TIMEOUT_S)
        missing = r.rc == 127 or "not found" in r.stderr and r.rc != 0
    except ToolMissing:
        missing, r = True, None
    if not missing and r is not None:
        if r.rc == 0:
            return " ".join(argv), r.stdout.splitlines(), ""
        return " ".join(argv), [], f"journalctl exit {r.rc}: {r.excerpt()[:200]}"
    argv = ["dmesg", "--time-format", "iso"]
    r = ctx.runner.on_node(argv, timeout_s=READ_TIMEOUT_S)
    if r.rc != 0:
        return " ".join(argv), [], f"dmesg exit {r.rc}: {r.excerpt()[:200]}"
    return " ".join(argv), r.stdout.splitlines(), ""


def _gpu_pcis(ctx: ProofContext) -> dict[str, int] | None:
    """normalised PCI id -> GPU index of the GPUs the window watches; None: every XID of the node counts (the
    store knows no PCI id for the GPU)."""
    known = {normalize_pci_bus_id(p): g for g, p in node_gpus(ctx.store, ctx.node) if p}
    if ctx.gpu is None:
        return known or None
    mine = {p: g for p, g in known.items() if g == ctx.gpu}
    return mine or None


def _from_log(
    ctx: ProofContext, lines: list[str], until: float, pcis: dict[str, int] | None
) -> list[dict[str, Any]]:
    seen = []
    parser = KernelLogParser(
        year=dt.datetime.fromtimestamp(ctx.since, tz=dt.timezone.utc).year, host=ctx.node
    )
    for rec in parser.feed_all(lines):
        if rec.kind not in KINDS or rec.ts is None or not (ctx.since < rec.ts <= until):
            continue
        pci = normalize_pci_bus_id(rec.pci_bus_id) if rec.pci_bus_id else None
        if pcis is not None and pci not in pcis:
            continue
        gpu = pcis.get(pci) if pcis is not None and pci else None
        seen.append({"code": rec.code, "ts": rec.ts, "gpu": gpu, "pci": pci, "line": rec.raw.strip()[:300]})
    return seen


def _from_store(ctx: ProofContext, until: float, pcis: dict[str, int] | None) -> list[dict[str, Any]]:
    rows = ctx.store.query(
        "SELECT ts, gpu, pci_bus_id, code, coalesce(raw, message) AS line FROM events WHERE node = ? "
        "AND kind IN ('xid', 'fell-off-bus') AND ts > ? AND ts <= ? ORDER BY ts",
        [ctx.node, db_time(ctx.since), db_time(until)],
    )
    out = []
    for r in rows:
        pci = normalize_pci_bus_id(r["pci_bus_id"]) if r["pci_bus_id"] else None
        mine = ctx.gpu is None or r["gpu"] == ctx.gpu or (pcis is not None and pci in pcis) or pcis is None
        if mine:
            line = str(r["line"] or "")[:300]
            out.append({"code": r["code"], "ts": epoch(r["ts"]), "gpu": r["gpu"], "pci": pci, "line": line})
    return out


def xid_quiet_part(ctx: ProofContext) -> ProofPart:
    until = ctx.since + ctx.quiet_s
    pcis = _gpu_pcis(ctx)
    which = "the node's GPUs" if ctx.gpu is None else f"GPU {ctx.gpu}"
    figs: dict[str, Any] = {
        "window_s": ctx.quiet_s,
        "since": _iso(ctx.since),
        "until": _iso(until),
        "polls": 0,
    }
    if pcis is None and ctx.gpu is not None:
        figs["note"] = f"no PCI id stored for GPU {ctx.gpu}: every XID of the node counts"
    poll = max(0.001, min(POLL_S, ctx.quiet_s))
    while True:
        done = ctx.clock() >= until  # read once more after the window closed: what it logged last counts
        source, lines, why = read_kernel_log(ctx)
        figs.update(source=source, lines_read=len(lines), polls=figs["polls"] + 1)
        if why:
            return ProofPart("xid-quiet", False, f"kernel log not read: {why}", figs)
        seen = _from_log(ctx, lines, until, pcis) + _from_store(ctx, until, pcis)
        figs["xids_seen"] = len(seen)
        if seen:
            first = min(seen, key=lambda x: x["ts"] or 0.0)
            figs["first_xid"] = {**first, "ts": _iso(first["ts"]) if first["ts"] else None}
            gpu = f"GPU {first['gpu']}" if first["gpu"] is not None else first["pci"] or "the node"
            detail = f"new XID {first['code']} on {gpu} at {figs['first_xid']['ts']}: {first['line']}"
            return ProofPart("xid-quiet", False, detail, figs)
        if done:
            return ProofPart("xid-quiet", True, f"no new XID on {which} for {ctx.quiet_s:g} s", figs)
        ctx.sleep(min(poll, max(0.0, until - ctx.clock())))
