"""DCGM diagnostics where `dcgmi` is installed: `dcgmi diag -r LEVEL -j`, folded into burn-in results.
A skipped DCGM test is INCONCLUSIVE, not PASS."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

from fleettool.burnin.verdict import Result, Verdict

STATUS = {
    "pass": Verdict.PASS,
    "fail": Verdict.FAIL,
    "warn": Verdict.WARN,
    "skip": Verdict.INCONCLUSIVE,
    "skipped": Verdict.INCONCLUSIVE,
    "not run": Verdict.INCONCLUSIVE,
}


def available() -> bool:
    return shutil.which("dcgmi") is not None


def run_diag(node: str, level: int = 1, timeout_s: float = 1800) -> list[Result]:
    argv = ["dcgmi", "diag", "-r", str(level), "-j"]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as e:
        return [
            Result(node, None, "dcgm-diag", Verdict.INCONCLUSIVE, reason=f"dcgmi diag did not complete: {e}")
        ]
    try:
        doc = json.loads(p.stdout)
    except json.JSONDecodeError:
        msg = (p.stderr or p.stdout).strip().splitlines()[:1]
        return [
            Result(
                node,
                None,
                "dcgm-diag",
                Verdict.INCONCLUSIVE,
                reason=f"dcgmi diag exit {p.returncode}: {msg[0] if msg else 'no JSON'}",
            )
        ]
    return parse_diag(doc, node)


def parse_diag(doc: dict[str, Any], node: str) -> list[Result]:
    """`dcgmi diag -j` JSON (DCGM 3 'DCGM GPU Diagnostic' layout, and DCGM 4's 'tests' list) -> results."""
    out: list[Result] = []
    diag = doc.get("DCGM GPU Diagnostic") or doc
    for cat in diag.get("test_categories", []) or []:
        for t in cat.get("tests", []) or []:
            name = str(t.get("name", "?"))
            for r in t.get("results", []) or []:
                status = str(r.get("status", "")).lower()
                gid = r.get("gpu_id", r.get("gpu_ids"))
                gpu = int(gid) if isinstance(gid, (int, str)) and str(gid).isdigit() else None
                v = STATUS.get(status, Verdict.INCONCLUSIVE)
                warn = r.get("warnings") or r.get("info") or ""
                out.append(
                    Result(
                        node,
                        gpu,
                        f"dcgm-{name.lower().replace(' ', '-')}",
                        v,
                        reason=f"DCGM {name}: {status or 'no status'}" + (f" ({warn})" if warn else ""),
                    )
                )
    for t in doc.get("tests", []) or []:  # DCGM 4 layout
        name = str(t.get("name", "?"))
        for r in t.get("results", []) or []:
            status = str(r.get("status", "")).lower()
            ent = r.get("entity_id")
            out.append(
                Result(
                    node,
                    int(ent) if isinstance(ent, int) else None,
                    f"dcgm-{name.lower()}",
                    STATUS.get(status, Verdict.INCONCLUSIVE),
                    reason=f"DCGM {name}: {status}",
                )
            )
    if not out:
        out.append(
            Result(node, None, "dcgm-diag", Verdict.INCONCLUSIVE, reason="dcgmi diag returned no results")
        )
    return out
