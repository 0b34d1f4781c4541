"""nccl-tests -J output (JSON, format version 3) -> runs, with every field checked: integers in range, finite
floats, a bad device or result entry reported as a file:line issue and skipped."""

from __future__ import annotations

import json
import math
from typing import Any

from fleettool.formats.errors import ParseIssue
from fleettool.formats.nccl_run import INT64_MAX, RE_OP, NcclRow, NcclRun, Rank, int_or_none


def parse_nccl_json(text: str, *, path: str = "<input>") -> tuple[list[NcclRun], list[ParseIssue]]:
    """nccl-tests -J output (format version 3) -> one run."""
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        return [], [ParseIssue(path, e.lineno, f"not JSON: {e.msg}")]
    docs = d if isinstance(d, list) else [d]
    runs: list[NcclRun] = []
    issues: list[ParseIssue] = []
    for doc in docs:
        if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
            issues.append(ParseIssue(path, 1, "no 'results' list in nccl-tests JSON"))
            continue
        try:
            runs.append(_json_run(doc, path, issues))
        except (TypeError, AttributeError, KeyError, ValueError) as e:
            issues.append(ParseIssue(path, 1, f"malformed nccl-tests JSON ({type(e).__name__}: {e})"))
    return runs, issues


def _json_run(doc: dict[str, Any], path: str, issues: list[ParseIssue]) -> NcclRun:
    run = NcclRun()
    args = doc.get("args") or []
    if args:
        mo = RE_OP.search(str(args[0]))
        run.op = mo.group(1) if mo else None
    nv = doc.get("nccl_version")
    if isinstance(nv, int):
        run.nccl_version = f"{nv // 10000}.{nv // 100 % 100}.{nv % 100}"
    run.start_time = doc.get("start_time")
    cfg = doc.get("config") or {}
    run.nthreads, run.ngpus = (
        _jint_or_none(cfg.get("nthreads"), 1 << 20),
        _jint_or_none(cfg.get("ngpus"), 1 << 20),
    )
    for dev in cfg.get("devices") or []:
        try:
            run.ranks.append(
                Rank(
                    _jint(dev["rank"], 1 << 31),
                    _jint(dev.get("pid", 0), 1 << 62),
                    str(dev.get("hostname", "")),
                    _jint(dev.get("device", 0), 1 << 31),
                    str(dev.get("device_hex", "")),
                    str(dev.get("device_info", "")),
                )
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            issues.append(ParseIssue(path, 1, f"bad device entry {dev!r:.80}"))
    for res in doc["results"]:
        try:
            root = str(res.get("root", "")).strip()
            row = NcclRow(
                _jint(res["size"], INT64_MAX),
                _jint(res.get("count", 0), INT64_MAX),
                str(res["type"]) if res.get("type") is not None else None,
                str(res["redop"]) if res.get("redop") is not None else None,
                int_or_none(root) if int_or_none(root) is not None and abs(int(root)) < (1 << 31) else None,
            )
            for key, pre in (("out_of_place", "oop"), ("in_place", "ip")):
                half = res.get(key) or {}
                setattr(row, f"{pre}_time_us", _f(half.get("time")))
                setattr(row, f"{pre}_algbw_gbps", _f(half.get("alg_bw")))
                setattr(row, f"{pre}_busbw_gbps", _f(half.get("bus_bw")))
                setattr(row, f"{pre}wrong_count", _jint_or_none(half.get("nwrong"), INT64_MAX))
            run.rows.append(row)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            issues.append(ParseIssue(path, 1, f"bad result entry ({e})"))
    avg = doc.get("average_bus_bandwidth") or {}
    run.avg_busbw_gbps = _f(avg.get("bandwidth")) if isinstance(avg, dict) else _f(avg)
    oob = doc.get("out_of_bounds") or {}
    if isinstance(oob, dict) and "count" in oob:
        run.out_of_bounds = _jint_or_none(oob["count"], INT64_MAX)
    return run


def _jint(v: object, limit: int) -> int:
    """A JSON integer (an int, an integral float, or digits) in 0..limit (rank -1 aside), else ValueError."""
    if isinstance(v, bool):
        raise ValueError(f"not an integer: {v!r}")
    if isinstance(v, float):
        if not math.isfinite(v) or v != int(v):
            raise ValueError(f"not an integer: {v!r}")
        v = int(v)
    elif isinstance(v, str):
        parsed = int_or_none(v.strip())
        if parsed is None:
            raise ValueError(f"not an integer: {v[:20]!r}")
        v = parsed
    if not isinstance(v, int) or not -1 <= v <= limit:
        raise ValueError(f"integer out of range: {v!r:.30}")
    return v


def _jint_or_none(v: object, limit: int) -> int | None:
    try:
        return None if v is None else _jint(v, limit)
    except ValueError:
        return None


def _f(v: object) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None
