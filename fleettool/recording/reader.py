"""Ingest a recording (a file or a directory of files) into the store.

Each file is identified by content and handed to the reader for its format. A file is ingested in one
transaction: a file that fails (strict mode) leaves the store as it was. A file already ingested (same content
digest) is skipped, so replaying a recording twice stores it once.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fleettool.formats.errors import ParseError, ParseIssue
from fleettool.recording.files import identify
from fleettool.store import Store


@dataclass
class FileReport:
    path: str
    format: str
    rows: int = 0
    events: int = 0
    runs: int = 0
    issues: list[ParseIssue] = field(default_factory=list)
    nodes: set[str] = field(default_factory=set)
    t_min: float | None = None
    t_max: float | None = None
    skipped: str | None = None  # why the file was not read

    def as_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "format": self.format,
            "rows": self.rows,
            "events": self.events,
            "runs": self.runs,
            "issues": len(self.issues),
            "nodes": sorted(self.nodes),
            "skipped": self.skipped,
        }


Reader = Callable[[Store, Path, "IngestOptions", FileReport], None]
READERS: dict[str, Reader] = {}


def register(fmt: str) -> Callable[[Reader], Reader]:
    def deco(fn: Reader) -> Reader:
        READERS[fmt] = fn
        return fn

    return deco


@dataclass
class IngestOptions:
    node: str | None = None  # the node for files that do not name one
    strict: bool = False  # stop at the first malformed line instead of skipping it
    max_issue_lines: int = 20  # how many issue lines to print per file
    quiet: bool = False
    year: int | None = None  # for syslog lines without a year (default: from the recording's context)


def digest_file(path: Path) -> str:
    """Content digest of the file as stored (a gzip and its plain twin count as different files)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def recording_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    return sorted(
        p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".") and p.name != "expect.json"
    )


def ingest(store: Store, root: Path, opts: IngestOptions | None = None) -> list[FileReport]:
    opts = opts or IngestOptions()
    _load_readers()
    reports = []
    for path in recording_files(root):
        fmt = identify(path)
        rep = FileReport(str(path), fmt)
        reader = READERS.get(fmt)
        if reader is None:
            rep.skipped = f"no reader for format {fmt}"
            reports.append(rep)
            continue
        digest = digest_file(path)
        if store.seen_digest(digest):
            rep.skipped = "already ingested (same content)"
            reports.append(rep)
            continue
        store.begin()
        try:
            reader(store, path, opts, rep)
            store.record_ingest(
                digest, str(path), fmt, ",".join(sorted(rep.nodes)) or None, rep.rows, len(rep.issues)
            )
            store.commit()
        except ParseError:
            store.rollback()
            raise
        except Exception:
            store.rollback()
            raise
        if not opts.quiet:
            for issue in rep.issues[: opts.max_issue_lines]:
                print(f"fleettool: {issue} (skipped)", file=sys.stderr)
            if len(rep.issues) > opts.max_issue_lines:
                print(
                    f"fleettool: {path}: {len(rep.issues) - opts.max_issue_lines} more bad lines skipped",
                    file=sys.stderr,
                )
        reports.append(rep)
    store.resolve_event_gpus()
    return reports


def _load_readers() -> None:
    # importing the modules registers their readers
    from fleettool.recording import readers  # noqa: F401


def read_own_openmetrics(
    path: Path,
) -> tuple[list[tuple[float, int | None, str, str, float]], dict[str, str]]:
    """A fleettool recording of NVML series -> rows (ts, gpu, metric, sub, value) and GPU facts (model, driver)."""
    from fleettool.recording.ingest_metrics import iter_metric_tables

    parser, ing, tables = iter_metric_tables(path, default_node="local", millis=False, strict=True)
    rows: list[tuple[float, int | None, str, str, float]] = []
    for t in tables:  # type: ignore[attr-defined]
        d = t.to_pydict()
        for ts, gpu, metric, sub, value in zip(
            d["ts"], d["gpu"], d["metric"], d["sub"], d["value"], strict=True
        ):
            rows.append((ts.timestamp() if hasattr(ts, "timestamp") else float(ts), gpu, metric, sub, value))
    info: dict[str, str] = {}
    for g in ing.map.gpus.values():
        if g.model:
            info["model"] = g.model
        if g.driver:
            info["driver"] = g.driver
    return rows, info
