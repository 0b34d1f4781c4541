"""A burn-in run's report: its results, the telemetry watched during the tests and the all-reduce table; as
the JSON a remote run prints (and the local side reads back), and into the store."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fleettool.burnin.verdict import Result, Verdict

if TYPE_CHECKING:
    from fleettool.store import Store


@dataclass
class BurninReport:
    run_id: str
    node: str
    started: float
    finished: float = 0.0
    results: list[Result] = field(default_factory=list)
    allreduce: dict[str, Any] | None = None
    telemetry: list[Any] = field(default_factory=list)
    devices: list[dict[str, Any]] = field(default_factory=list)
    busy: dict[str, Any] | None = None  # the busy check (busy.BusyCheck.as_dict): other processes per GPU


def to_dict(rep: BurninReport, code: int) -> dict[str, Any]:
    """The `--json` report (telemetry stays in the store). `busy` is the busy check: `checked` (else
    `why_not`), and per GPU index the other processes seen `before` and `during` the tests (pid, kind C/G/C+G,
    used_memory_bytes), the `unattributed` ones and the GPUs whose processes could not be listed (`errors`)."""
    return {
        "run_id": rep.run_id,
        "node": rep.node,
        "started": rep.started,
        "finished": rep.finished,
        "exit_code": code,
        "devices": rep.devices,
        "results": [r.as_dict() for r in rep.results],
        "allreduce": rep.allreduce,
        "busy": rep.busy,
    }


class NotAReport(ValueError):
    """A `--json` document that is not a burn-in report; the message says what is wrong where (`results[2].gpu`)."""


def from_dict(d: Any) -> BurninReport:
    """A remote run's `--json` report back into a BurninReport; NotAReport when its shape is not a report's (every
    field the store and the verdict read is checked here, so a wrong one is never a crash further on)."""
    top = _obj(d, "the report")
    rep = BurninReport(_str(top, "run_id"), _str(top, "node"), _num(top, "started", lo=0))
    rep.finished = _num(top, "finished", optional=True, lo=0) or 0.0
    rep.devices = [_obj(x, f"devices[{i}]") for i, x in enumerate(_list(top, "devices"))]
    rep.allreduce = _allreduce(top.get("allreduce"))
    rep.busy = None if top.get("busy") is None else _obj(top["busy"], "busy")
    for i, x in enumerate(_list(top, "results")):
        r, at = _obj(x, f"results[{i}]"), f"results[{i}]."
        verdict = r.get("verdict")
        if verdict not in {v.value for v in Verdict}:
            raise NotAReport(f"{at}verdict {verdict!r} is not one of {', '.join(v.value for v in Verdict)}")
        gpu = _num(r, "gpu", at, optional=True, lo=0)
        if gpu is not None and gpu != int(gpu):
            raise NotAReport(f"{at}gpu is {gpu!r}, not a GPU index")
        rep.results.append(
            Result(
                _str(r, "node", at),
                None if gpu is None else int(gpu),
                _str(r, "test", at),
                Verdict(verdict),
                _num(r, "figure", at, optional=True),
                _str(r, "unit", at, optional=True) or "",
                _num(r, "floor", at, optional=True),
                _str(r, "floor_source", at, optional=True) or "",
                _str(r, "reason", at, optional=True) or "",
                _str(r, "uuid", at, optional=True),
                _obj(r.get("evidence") or {}, f"{at}evidence"),
            )
        )
    return rep


def _allreduce(a: Any) -> dict[str, Any] | None:
    """The all-reduce table as save() reads it: `world` and `rows` of numbers."""
    if a is None:
        return None
    a = _obj(a, "allreduce")
    _num(a, "world", "allreduce.")
    for i, x in enumerate(_list(a, "rows", "allreduce.")):
        for k in ("size_bytes", "time_us", "algbw_gbps", "busbw_gbps", "wrong"):
            _num(_obj(x, f"allreduce.rows[{i}]"), k, f"allreduce.rows[{i}].")
    return dict(a)


def _obj(x: Any, what: str) -> dict[str, Any]:
    if not isinstance(x, dict):
        raise NotAReport(f"{what} is {_kind(x)}, not a JSON object")
    return x


def _list(d: dict[str, Any], k: str, at: str = "") -> list[Any]:
    x = d.get(k)
    if x is None:
        return []
    if not isinstance(x, list):
        raise NotAReport(f"{at}{k} is {_kind(x)}, not a list")
    return x


def _str(d: dict[str, Any], k: str, at: str = "", *, optional: bool = False) -> Any:
    x = d.get(k)
    if x is None and optional:
        return None
    if isinstance(x, str) and (x or optional):
        return x
    why = "missing" if k not in d else "empty" if x == "" else _kind(x)
    raise NotAReport(f"{at}{k} is {why}, not {'text' if optional else 'a name'}")


def _num(d: dict[str, Any], k: str, at: str = "", *, optional: bool = False, lo: float = -math.inf) -> Any:
    x = d.get(k)
    if x is None and optional:
        return None
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        f = float(x) if abs(x) < 1e308 else math.inf  # a JSON integer of 400 digits is no float
        if lo <= f <= _HI.get(k, math.inf):
            return f
    why = "missing" if k not in d else _kind(x)
    bounds = f" in {lo:.0f}..{_HI[k]:.0f}" if k in _HI else ""
    raise NotAReport(f"{at}{k} is {why}, not a number{bounds}")


_HI = {"started": 4102444800.0, "finished": 4102444800.0, "gpu": 1023.0}  # unix times up to 2100; GPU indexes


def _kind(x: Any) -> str:
    """What a JSON value is, for a message: its type and a short repr."""
    if x is None:
        return "null"
    text = repr(x)
    return f"{type(x).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


def save(store: Store, rep: BurninReport) -> None:
    """Results into burnin_results, telemetry into samples, the all-reduce table as an NCCL run: one
    transaction."""
    from fleettool.formats.nccl_tests import NcclRow
    from fleettool.store.burnin import write_burnin_results

    store.begin()
    try:
        write_burnin_results(
            store, rep.run_id, rep.finished or time.time(), [r.as_dict() for r in rep.results]
        )
        if rep.telemetry:
            store.write_samples(rep.telemetry)
        if rep.allreduce:
            rows = [
                NcclRow(
                    x["size_bytes"],
                    x["size_bytes"] // 4,
                    "float",
                    "sum",
                    -1,
                    ip_time_us=x["time_us"],
                    ip_algbw_gbps=x["algbw_gbps"],
                    ip_busbw_gbps=x["busbw_gbps"],
                    ip_wrong=x["wrong"],
                )
                for x in rep.allreduce["rows"]
            ]
            big = rows[-1].ip_busbw_gbps if rows else None
            avg = sum(r.ip_busbw_gbps or 0 for r in rows) / len(rows) if rows else None
            store.write_nccl_run(
                run_id=f"burnin-{rep.run_id}",
                ts=rep.finished,
                op="all_reduce",
                ranks=int(rep.allreduce["world"]),
                nodes=[rep.node],
                avg_busbw_gbps=avg,
                peak_busbw_gbps=max((r.ip_busbw_gbps or 0 for r in rows), default=big),
                wrong=sum(r.ip_wrong or 0 for r in rows),
                version=None,
                source=f"fleettool burnin {rep.run_id}",
                rows=rows,
            )
        store.commit()
    except Exception:
        store.rollback()
        raise
