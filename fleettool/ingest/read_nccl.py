"""Read nccl-tests output (the text tables, or -J JSON) into the store as runs with their table rows."""

from __future__ import annotations

import hashlib
from pathlib import Path

from fleettool.formats.nccl_run import op_in_name
from fleettool.formats.nccl_tests import NcclRun, parse_nccl_json, parse_nccl_text
from fleettool.ingest.report import FileReport, IngestOptions, outside_time
from fleettool.recording.files import iter_lines, read_text
from fleettool.store import Store
from fleettool.units import parse_iso


def _file_op_hint(path: Path) -> str | None:
    """The collective the file's name gives (`all_gather_perf.log`, `nccl-allgather-h100.txt`)."""
    return op_in_name(path.name)


def _start_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return parse_iso(text)
    except ValueError:
        return None


def _store_nccl_runs(
    store: Store, path: Path, opts: IngestOptions, rep: FileReport, runs: list[NcclRun]
) -> None:
    sources: set[str] = set()
    for i, run in enumerate(runs):
        run_id = hashlib.sha256(f"{path.resolve()}:{i}:{run.first_line}".encode()).hexdigest()[:16]
        nodes = run.nodes or ([opts.node] if opts.node else [])
        ts = _start_time(run.start_time)
        if ts is not None:
            sources.add("the run's start_time (UTC assumed)")
        else:  # nccl-tests text carries no time: the file's, never the replaying machine's clock
            ts, src = outside_time(path, opts, rep)
            sources.add(f"none in the output: {src}")
        store.write_nccl_run(
            run_id=run_id,
            ts=ts,
            op=run.op or "unknown",
            ranks=run.nranks,
            nodes=nodes,
            avg_busbw_gbps=run.avg_busbw_gbps,
            peak_busbw_gbps=run.peak_busbw_gbps,
            wrong=run.wrong,
            version=run.version or run.nccl_version,
            source=str(path),
            rows=run.rows,
            model=run.model,
            finished=run.finished,
        )
        rep.runs += 1
        rep.rows += len(run.rows)
        rep.nodes.update(nodes)
        if not run.rows:
            rep.notes.append(
                f"run {i + 1} (line {run.first_line}) did not finish: its device list and no result row "
                "(hung or killed); stored as a run that did not finish"
            )
        elif getattr(run, "truncated", False):
            rep.partial.append(
                f"run {i + 1} (line {run.first_line}) cut before its footer: kept {len(run.rows)} rows"
            )
        if not nodes:
            rep.notes.append(f"run {i + 1} names no host (no '#  Rank' lines): give --node")
    rep.time_source = "; ".join(sorted(sources)) or None
    if not runs and not rep.issues:
        rep.skipped = "looked like nccl-tests output but holds no run"


def read_nccl_text(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    runs, issues = parse_nccl_text(iter_lines(path), path=str(path), op_hint=_file_op_hint(path))
    rep.issues.extend(issues)
    _store_nccl_runs(store, path, opts, rep, runs)


def read_nccl_json(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    runs, issues = parse_nccl_json(read_text(path), path=str(path))
    rep.issues.extend(issues)
    _store_nccl_runs(store, path, opts, rep, runs)
