"""DCGM diagnostics where `dcgmi` is installed: `dcgmi diag -r LEVEL -j`, folded into burn-in results.
A skipped DCGM test is INCONCLUSIVE, not PASS."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

from fleettool.burnin.verdict import Result, Verdict
from fleettool.formats.dcgmi_diag import parse_diag_json


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
        doc = json.loads(p.stdout, strict=False)
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
    """`dcgmi diag -j` JSON -> results, read by the same parser as a recorded diag (formats.dcgmi_diag): per test
    and GPU, with the measured and expected figures DCGM gives (DCGM_FR_GFLOPS_THRESHOLD_VIOLATION)."""
    out = [
        Result(
            node,
            r.gpu,
            r.test_key,
            Verdict(r.verdict),
            figure=r.figure,
            unit=r.unit,
            floor=r.floor,
            floor_source="dcgmi diag" if r.floor is not None else "",
            reason=f"DCGM {r.test}: {r.status or 'no status'}"
            + (f" ({r.warnings[0]})" if r.warnings else ""),
            evidence={
                "dcgm_status": r.status,
                "warnings": r.warnings,
                "info": r.info,
                "dcgm_errors": r.error_ids,
            },
        )
        for r in parse_diag_json(doc).results
    ]
    if not out:
        out.append(
            Result(node, None, "dcgm-diag", Verdict.INCONCLUSIVE, reason="dcgmi diag returned no results")
        )
    return out
