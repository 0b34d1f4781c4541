"""Ingest a recording (a file or a directory of files) into the store, and say what was read.

Each file is identified by content (recording.identify) and handed to the reader for its format
(ingest.readers). A file is ingested in one transaction: a file that fails (a bad value, or a bad line under
--strict) is rolled back, named with file:line, and the next file is read. A file already ingested is not
stored twice: the same content digest, and for a file whose content carries no time (a scrape saved with curl,
timed by its name, --at or its mtime) the same time given too, since byte-identical scrapes of an idle node at
two times are two samples (ingest_key). The store's own files (the database, its WAL) are never read.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from fleettool.formats.errors import ParseError
from fleettool.ingest.readers import READERS
from fleettool.ingest.report import FileReport, IngestOptions
from fleettool.recording.files import InputTooLarge, XmlRefused, digest_file, recording_files, watch_reads
from fleettool.recording.identify import identify_why
from fleettool.recording.times import file_time, iso
from fleettool.store import Store


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
    reports = [_ingest_one(store, path, root, opts) for path in recording_files(root)]
    store.resolve_event_gpus()
    return reports


def _ingest_one(store: Store, path: Path, root: Path, opts: IngestOptions) -> FileReport:
    why = _ignored(path, root, opts)
    if why is not None:
        return FileReport(str(path), "-", skipped=why, ignored=True)
    if not path.is_file():
        return FileReport(str(path), "unknown", skipped="not a regular file (a pipe, socket or device)")
    ident = identify_why(path)
    rep = FileReport(str(path), ident.format, ident.shape)
    reader = READERS.get(ident.format)
    if reader is None:
        rep.skipped = ident.why or f"no reader for {ident.format}"
        return rep
    later = _digest_alongside(store, path)
    if later is None:
        try:
            digest = digest_file(path)
        except OSError as e:
            rep.skipped = f"cannot read it ({e.strerror or e})"
            return rep
        seen = _seen(store, digest, path, opts)
        if seen is not None:
            rep.skipped = seen
            rep.ignored = True
            return rep
    store.begin()
    try:
        with watch_reads(opts.max_bytes) as notes:
            reader(store, path, opts, rep)
        if later is not None:
            try:
                digest = later()
            except OSError as e:
                store.rollback()
                rep.rows = rep.events = rep.runs = 0
                rep.skipped = f"cannot read it ({e.strerror or e})"
                return rep
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
        if (
            rep.nothing_stored() is None
        ):  # a file that stored nothing is read again next time, and says so again
            store.record_ingest(
                ingest_key(digest, rep.given_time),
                str(path),
                ident.format,
                ",".join(sorted(rep.nodes)) or None,
                rep.rows,
                len(rep.issues),
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
        _print_issues(rep, path, opts)
    return rep


def ingest_key(digest: str, given_time: float | None) -> str:
    """What the store's ingests table keys an ingest by: the content digest, and for a file that took its time
    from outside its content (FileReport.given_time) that time too (digest@2026-12-02T11:38:00.000000Z)."""
    if given_time is None:
        return digest
    return f"{digest}@{dt.datetime.fromtimestamp(given_time, tz=dt.timezone.utc):%Y-%m-%dT%H:%M:%S.%fZ}"


def _seen(store: Store, digest: str, path: Path, opts: IngestOptions) -> str | None:
    """Why the file is already ingested, or None. Its content alone decides whether its reader times it from
    outside (no sample timestamps, no report Timestamp): the same content stored with its own times is the
    same ingest; stored under a given time, only with the time this file would be given now."""
    if store.seen_digest(digest):
        return "already ingested (same content)"
    try:
        t, src = file_time(path, opts.at)
    except OSError:  # no mtime to be read: the reader will say why the file cannot be read
        return None
    if store.seen_digest(ingest_key(digest, t)):
        return f"already ingested (same content, same time {iso(t)} from {src.split(' (')[0]})"
    return None


DIGEST_ALONGSIDE = 32 << 20  # a file this large is hashed in a thread of its own while its reader runs


def _digest_alongside(store: Store, path: Path) -> Callable[[], str] | None:
    """For a large file going into a store that has ingested nothing yet (so no digest can be seen there): its
    content digest computed in a thread while the reader parses it (hashlib drops the GIL: the hash takes the
    other core), and a call that waits for it. None otherwise: the digest is taken first, and checked."""
    try:
        if path.stat().st_size < DIGEST_ALONGSIDE or store.scalar("SELECT count(*) FROM ingests"):
            return None
    except OSError:
        return None
    out: list[str] = []
    err: list[OSError] = []

    def work() -> None:
        try:
            out.append(digest_file(path))
        except OSError as e:
            err.append(e)

    th = threading.Thread(target=work, name="fleettool-digest", daemon=True)
    th.start()

    def wait() -> str:
        th.join()
        if err:
            raise err[0]
        return out[0]

    return wait


def _print_issues(rep: FileReport, path: Path, opts: IngestOptions) -> None:
    for issue in rep.issues[: opts.max_issue_lines]:
        # an issue whose message says what was kept (a bad gpu label keeps its samples) is not "skipped"
        note = "" if "kept" in issue.message else " (skipped)"
        print(f"fleettool: {issue}{note}", file=sys.stderr)
    if len(rep.issues) > opts.max_issue_lines:
        print(
            f"fleettool: {path}: {len(rep.issues) - opts.max_issue_lines} more issues (see --json)",
            file=sys.stderr,
        )


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
