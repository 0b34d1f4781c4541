"""Ingest a recording (a file or a directory of files) into the store, and say what was read.

Each file is identified by content (recording.files) and handed to the reader for its format. A file is
ingested in one transaction: a file that fails (a bad value, or a bad line under --strict) is rolled back,
named with file:line, and the next file is read. A file already ingested (same content digest) is not stored
twice. The store's own files (the database, its WAL) are never read.

Every file gets a FileReport: its reader and what it stored, or why it was skipped, or what a partial file
kept; and where the times came from (the file's own, the file name, --at, the file's mtime, or boot-relative).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fleettool.formats.errors import ParseError, ParseIssue
from fleettool.recording.files import MAX_BYTES, InputTooLarge, identify_why, watch_reads
from fleettool.store import Store


class XmlRefused(ValueError):
    """An XML document fleettool will not expand (entity declarations: the billion-laughs shape)."""


# status of a file in a replay
READ, PARTIAL, SKIPPED, FAILED, IGNORED = "read", "partial", "skipped", "failed", "ignored"

READER_NAMES = {
    "openmetrics": "OpenMetrics",
    "prometheus": "Prometheus text",
    "kmsg": "kernel log",
    "kmsg-journal-json": "kernel log",
    "kmsg-raw": "kernel log",
    "nccl-tests": "nccl-tests",
    "nccl-tests-json": "nccl-tests -J",
    "nvidia-smi-xml": "nvidia-smi -q -x",
    "nvidia-smi-text": "nvidia-smi -q",
}


@dataclass
class FileReport:
    path: str
    format: str
    shape: str = ""  # within the format: "dmesg -T", "journalctl -o json", ...
    rows: int = 0
    events: int = 0
    runs: int = 0
    issues: list[ParseIssue] = field(default_factory=list)
    nodes: set[str] = field(default_factory=set)
    t_min: float | None = None
    t_max: float | None = None
    skipped: str | None = None  # why the file was not read (or why what it stored was rolled back)
    ignored: bool = False  # not an input problem: the store's own file, already ingested, hidden
    failed: bool = False  # recognised, but reading it failed; nothing from it was stored
    partial: list[str] = field(default_factory=list)  # why only part of the file was read
    time_source: str | None = None  # where the stored times came from
    boot_relative: int = 0  # events stored with only an uptime (no wall time in the file)
    untimed: int = 0  # events stored with no time at all
    identities: int = 0  # the driver's GPU announcement lines (PCI id -> UUID, serial)
    notes: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.ignored:
            return IGNORED
        if self.failed:
            return FAILED
        if self.skipped:
            return SKIPPED
        return PARTIAL if self.partial else READ

    @property
    def reader(self) -> str:
        return READER_NAMES.get(self.format, self.format)

    @property
    def recognised(self) -> bool:
        return self.format in READER_NAMES

    def stored(self) -> str:
        kernel = self.format.startswith("kmsg")
        if self.format.startswith("nccl"):
            runs = f"{self.runs} runs" if self.runs != 1 else "1 run"
            return f"{runs} ({self.rows} table rows)"
        parts = [f"{self.rows} samples"] if self.rows or not (self.events or self.runs or kernel) else []
        if kernel or self.events:
            parts.append(f"{self.events} events" if self.events != 1 else "1 event")
        if self.runs or self.format.startswith("nccl"):
            parts.append(f"{self.runs} runs" if self.runs != 1 else "1 run")
        if self.identities:
            parts.append(f"{self.identities} GPU identities (PCI id -> UUID)")
        return ", ".join(parts)

    def as_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "format": self.format,
            "reader": self.reader if self.recognised else None,
            "shape": self.shape or None,
            "status": self.status,
            "rows": self.rows,
            "events": self.events,
            "runs": self.runs,
            "issues": len(self.issues),
            "first_issue": str(self.issues[0]) if self.issues else None,
            "nodes": sorted(self.nodes),
            "skipped": self.skipped,
            "partial": self.partial or None,
            "time_source": self.time_source,
            "boot_relative_events": self.boot_relative,
            "untimed_events": self.untimed,
            "notes": self.notes,
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
    strict: bool = False  # a file with a malformed line is not stored (and the replay fails)
    max_issue_lines: int = 20  # how many issue lines to print per file
    quiet: bool = False
    year: int | None = None  # for syslog lines without a year (default: from the recording's context)
    at: float | None = None  # --at: the time of files that carry none and whose name gives none
    exclude: list[Path] = field(default_factory=list)  # the store's own files: never read
    max_bytes: int = MAX_BYTES  # decompressed bytes per file


def digest_file(path: Path) -> str:
    """Content digest of the file as stored (a gzip and its plain twin count as different files)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def store_files(db: Path | str | None) -> list[Path]:
    """The files a store at `db` writes beside itself: the database, its WAL, its temp directory."""
    if db is None or str(db) == ":memory:":
        return []
    p = Path(db).absolute()
    return [p, p.with_name(p.name + ".wal"), p.with_name(p.name + ".tmp")]


def _own(path: Path, exclude: list[Path]) -> bool:
    a = path.absolute()
    for e in exclude:
        if a == e or e in a.parents:
            return True
        try:
            if a.exists() and e.exists() and a.samefile(e):
                return True
        except OSError:
            pass
    return False


def recording_files(root: Path) -> list[Path]:
    """Every file of the recording, sorted; nothing is left out here (see _ignored for what is not read)."""
    if not root.is_dir():
        return [root]
    return sorted(p for p in root.rglob("*") if p.is_file() or (p.exists() and not p.is_dir()))


def _ignored(path: Path, root: Path, opts: IngestOptions) -> str | None:
    if _own(path, opts.exclude):
        return "the store's own file (never read)"
    if path.name.endswith(".wal") and path.with_name(path.name[:-4]).is_file():
        return f"write-ahead log of the database {path.name[:-4]} (never read)"
    rel = path.relative_to(root) if path != root and root in path.parents else Path(path.name)
    if any(part.startswith(".") for part in rel.parts):
        return "hidden file"
    if path.name == "expect.json" and path != root:
        return "a scenario's expectations (expect.json)"
    return None


def ingest(store: Store, root: Path, opts: IngestOptions | None = None) -> list[FileReport]:
    """Read every file of `root` into the store; one FileReport per file, in path order."""
    opts = opts or IngestOptions()
    _load_readers()
    reports = []
    for path in recording_files(root):
        rep = _ingest_one(store, path, root, opts)
        reports.append(rep)
    store.resolve_event_gpus()
    return reports


def _ingest_one(store: Store, path: Path, root: Path, opts: IngestOptions) -> FileReport:
    why = _ignored(path, root, opts)
    if why is not None:
        rep = FileReport(str(path), "-", skipped=why, ignored=True)
        return rep
    if not path.is_file():
        return FileReport(str(path), "unknown", skipped="not a regular file (a pipe, socket or device)")
    ident = identify_why(path)
    rep = FileReport(str(path), ident.format, ident.shape)
    reader = READERS.get(ident.format)
    if reader is None:
        rep.skipped = ident.why or f"no reader for {ident.format}"
        return rep
    try:
        digest = digest_file(path)
    except OSError as e:
        rep.skipped = f"cannot read it ({e.strerror or e})"
        return rep
    if store.seen_digest(digest):
        rep.skipped = "already ingested (same content)"
        rep.ignored = True
        return rep
    store.begin()
    try:
        with watch_reads(opts.max_bytes) as notes:
            reader(store, path, opts, rep)
        if rep.skipped:  # the reader found nothing it could store
            store.rollback()
            rep.rows = rep.events = rep.runs = 0
            return rep
        if notes.truncated:
            rep.partial.insert(0, notes.truncated)
        if notes.long_lines:
            rep.partial.append(f"{notes.long_lines} lines longer than 1 MiB cut")
        rep.notes.extend(notes.notes)
        if opts.strict and rep.issues:
            raise ParseError(rep.issues[0])
        store.record_ingest(
            digest, str(path), ident.format, ",".join(sorted(rep.nodes)) or None, rep.rows, len(rep.issues)
        )
        store.commit()
    except ParseError as e:
        _rollback(store, rep)
        rep.skipped = f"{e} (stopped; nothing from this file was stored)"
        print(f"fleettool: {rep.skipped}", file=sys.stderr)
        return rep
    except (InputTooLarge, XmlRefused) as e:
        _rollback(store, rep)
        rep.skipped = str(e).removeprefix(f"{path}: ")
        print(f"fleettool: {path}: {rep.skipped}", file=sys.stderr)
        return rep
    except Exception as e:  # one bad file never stops the others, and never shows a traceback
        _rollback(store, rep)
        where = _where(e, path)
        rep.skipped = f"{where}: {_describe(e)} (nothing from this file was stored)"
        print(f"fleettool: {rep.skipped}", file=sys.stderr)
        return rep
    if not opts.quiet:
        for issue in rep.issues[: opts.max_issue_lines]:
            # an issue whose message says what was kept (a bad gpu label keeps its samples) is not "skipped"
            note = "" if "kept" in issue.message else " (skipped)"
            print(f"fleettool: {issue}{note}", file=sys.stderr)
        if len(rep.issues) > opts.max_issue_lines:
            print(
                f"fleettool: {path}: {len(rep.issues) - opts.max_issue_lines} more issues (see --json)",
                file=sys.stderr,
            )
    return rep


def _rollback(store: Store, rep: FileReport) -> None:
    rep.failed = True
    with contextlib.suppress(Exception):  # the transaction may already be gone with the error
        store.rollback()
    rep.rows = rep.events = rep.runs = 0
    rep.partial = []


def _where(e: Exception, path: Path) -> str:
    line = getattr(e, "lineno", None) or getattr(getattr(e, "issue", None), "line", None)
    return f"{path}:{line}" if line else str(path)


def _describe(e: Exception) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text[:200]}" if text else type(e).__name__


def _load_readers() -> None:
    # importing the modules registers their readers
    from fleettool.recording import readers  # noqa: F401


# -- the time of a file that carries none ---------------------------------------------------------------
_RE_NAME_MS = re.compile(r"(?<!\d)(1\d{12}|[2-3]\d{12})(?!\d)")
_RE_NAME_S = re.compile(r"(?<!\d)(1\d{9}|[2-3]\d{9})(?!\d)")
_RE_NAME_ISO = re.compile(
    r"(?<!\d)(\d{4})-?(\d\d)-?(\d\d)[T_ -]?(\d\d)[:_.-]?(\d\d)(?:[:_.-]?(\d\d))?(?:[.,](\d{1,9}))?"
    r"(Z|[+-]\d\d:?\d\d)?(?!\d)"
)


def time_from_name(name: str) -> float | None:
    """A time in a file name: unix ms (13 digits), ISO date-time (2026-12-02T14:40:12Z, 20261202T144012,
    2026-12-02_14-40-12; UTC unless an offset is given), unix seconds (10 digits). None if none."""
    m = _RE_NAME_MS.search(name)
    if m:
        return int(m.group(1)) / 1000.0
    for m in _RE_NAME_ISO.finditer(name):
        y, mo, d, h, mi, s, frac, tz = m.groups()
        try:
            base = dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(s or 0), tzinfo=dt.timezone.utc)
        except ValueError:
            continue
        if not 1990 <= base.year <= 2200:
            continue
        t = base.timestamp() + (int(frac) / 10 ** len(frac) if frac else 0.0)
        if tz and tz != "Z":
            sign = -1 if tz[0] == "-" else 1
            digits = tz[1:].replace(":", "")
            t -= sign * (int(digits[:2]) * 3600 + int(digits[2:4]) * 60)
        return t
    m = _RE_NAME_S.search(name)
    if m:
        return float(m.group(1))
    return None


def file_time(path: Path, opts: IngestOptions) -> tuple[float, str]:
    """The time of a file that carries none: from its name, else --at, else its mtime; and which it was."""
    t = time_from_name(path.name)
    if t is not None:
        return t, f"the file name ({_iso(t)})"
    if opts.at is not None:
        return opts.at, f"--at ({_iso(opts.at)})"
    m = path.stat().st_mtime
    return m, f"the file's mtime ({_iso(m)}; give --at TIME if the file was copied since)"


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, tz=dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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
