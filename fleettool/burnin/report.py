"""A burn-in run's report: its results, the telemetry watched during the tests and the all-reduce table; as
the JSON a remote run prints (and the local side reads back), and into the store."""

from __future__ import annotations

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


def from_dict(d: dict[str, Any]) -> BurninReport:
    """A remote run's `--json` report back into a BurninReport."""
    rep = BurninReport(str(d["run_id"]), str(d["node"]), float(d["started"]), float(d.get("finished") or 0))
    rep.devices = list(d.get("devices") or [])
    rep.allreduce = d.get("allreduce")
    rep.busy = d.get("busy")
    for r in d.get("results") or []:
        rep.results.append(
            Result(
                r["node"],
                r.get("gpu"),
                r["test"],
                Verdict(r["verdict"]),
                r.get("figure"),
                r.get("unit", ""),
                r.get("floor"),
                r.get("floor_source", ""),
                r.get("reason", ""),
                r.get("uuid"),
                r.get("evidence") or {},
            )
        )
    return rep


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
