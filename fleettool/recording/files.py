"""Open recording files: .gz read transparently (by magic number, not by name) and bounded.

Reads are bounded: a gzip stream may decompress to at most `max_bytes` (2 GiB by default) per file, a whole
document (JSON, XML) read into memory to at most `DOC_LIMIT`, and a text line is cut at `LINE_LIMIT`. What a
read had to leave out (a gzip stream cut short, corrupt gzip data, overlong lines) is noted in the active
`ReadNotes` (see `watch_reads`), so the reader can name the file as partial with what it kept.

What a file is, is told by recording.identify; an XML document is made whole (or refused) by complete_xml.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GZIP_MAGIC = b"\x1f\x8b"
MAX_BYTES = 2 << 30  # decompressed bytes per file
DOC_LIMIT = 256 << 20  # a whole document held in memory (nvidia-smi XML, nccl-tests JSON)
LINE_LIMIT = 1 << 20  # one text line
HEAD = 64 << 10  # what identification reads


class InputTooLarge(OSError):
    """A file that decompresses (or reads) past its bound: refused, never read into memory."""


class XmlRefused(ValueError):
    """An XML document fleettool will not expand (entity declarations: the billion-laughs shape)."""


@dataclass
class ReadNotes:
    """What the reads of one file had to leave out. Filled by iter_blocks / iter_lines while active."""

    max_bytes: int = MAX_BYTES
    bytes_out: int = 0
    truncated: str | None = None  # why the stream ended early (cut gzip, corrupt gzip data)
    long_lines: int = 0
    gzip: bool = False
    notes: list[str] = field(default_factory=list)


_ACTIVE: contextvars.ContextVar[ReadNotes | None] = contextvars.ContextVar(
    "fleettool_read_notes", default=None
)


@contextlib.contextmanager
def watch_reads(max_bytes: int = MAX_BYTES) -> Iterator[ReadNotes]:
    """Collect ReadNotes for every read of the block (one file's reader) and bound what it decompresses."""
    notes = ReadNotes(max_bytes=max_bytes)
    tok = _ACTIVE.set(notes)
    try:
        yield notes
    finally:
        _ACTIVE.reset(tok)


def _fmt_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}".replace(".0 ", " ")
    return f"{n} bytes"


def iter_blocks(path: Path, size: int = 1 << 16, *, limit: int | None = None) -> Iterator[bytes]:
    """The file's bytes in blocks, gunzipped when the file is gzip (by magic number, not by name).

    A gzip stream that would decompress past the bound raises InputTooLarge; a stream cut short or corrupt
    ends the iteration after what could be read, with the reason in the active ReadNotes (if any)."""
    notes = _ACTIVE.get()
    cap = limit if limit is not None else (notes.max_bytes if notes is not None else MAX_BYTES)
    with open(path, "rb") as f:
        head = f.read(2)
        f.seek(0)
        if head != GZIP_MAGIC:
            while True:
                c = f.read(size)
                if not c:
                    break
                yield c
            return
        if notes is not None:
            notes.gzip = True
        out_n = 0

        def count(out: bytes) -> bytes:
            nonlocal out_n
            out_n += len(out)
            if notes is not None:
                notes.bytes_out = out_n
            if out_n > cap:
                raise InputTooLarge(
                    f"{path}: decompresses to more than {_fmt_bytes(cap)} (a gzip bomb?); refused, nothing stored"
                )
            return out

        d = zlib.decompressobj(31)
        in_member = False
        try:
            while True:
                c = f.read(4096)  # small input pieces: what precedes a corrupt spot is still read
                if not c:
                    break
                while c:
                    in_member = True
                    saved = d.copy()
                    try:
                        out = d.decompress(c, 1 << 22)
                    except zlib.error:  # keep what decompresses before the bad spot, then stop
                        for chunk in _salvage(saved, c):
                            yield count(chunk)
                        raise
                    if out:
                        yield count(out)
                    c = d.unconsumed_tail
                    if d.eof:  # a member ended: concatenated members follow (rotated logs are often joined)
                        rest = d.unused_data
                        in_member = False
                        d = zlib.decompressobj(31)
                        c = rest + c if rest else c
                        if c[:2] and c[:2] != GZIP_MAGIC[: len(c[:2])]:
                            if notes is not None and c.strip(b"\0"):
                                notes.notes.append(
                                    f"{len(c)} bytes of trailing garbage after the gzip data ignored"
                                )
                            c = b""
                            f.seek(0, 2)
            if in_member and not d.eof:
                tail = d.flush()
                if tail:
                    yield count(tail)
                if notes is not None:
                    notes.truncated = f"gzip stream cut short after {_fmt_bytes(out_n)} of text"
        except zlib.error as e:
            if notes is not None:
                notes.truncated = f"corrupt gzip data after {_fmt_bytes(out_n)} of text ({e})"


def _salvage(d: Any, data: bytes) -> Iterator[bytes]:
    """What a decompressor yields from `data`, in small steps, up to the step that fails."""
    for i in range(0, len(data), 64):
        try:
            out = d.decompress(data[i : i + 64], 1 << 22)
        except zlib.error:
            return
        if out:
            yield out


def read_head(path: Path, n: int = HEAD) -> bytes:
    """The first n bytes of the file's content (gunzipped). Never raises for a cut or corrupt gzip."""
    out = bytearray()
    with watch_reads():  # identification must not leave notes on the file's own read
        try:
            for b in iter_blocks(path, limit=1 << 40):
                out += b
                if len(out) >= n:
                    break
        except zlib.error:
            pass
    return bytes(out[:n])


def read_text(path: Path, limit: int = DOC_LIMIT) -> str:
    """The whole content as text, for formats read as one document; refused past `limit` bytes."""
    parts: list[bytes] = []
    n = 0
    for b in iter_blocks(path):
        n += len(b)
        if n > limit:
            raise InputTooLarge(f"{path}: more than {_fmt_bytes(limit)} for a single document; refused")
        parts.append(b)
    return b"".join(parts).decode("utf-8", "replace")


def iter_lines(path: Path) -> Iterator[str]:
    """The file's text lines (gunzipped by magic), decoded leniently: a bad byte never stops a log.
    A line longer than LINE_LIMIT is cut there (the rest of it dropped, and counted in the ReadNotes)."""
    notes = _ACTIVE.get()
    rest = b""
    dropping = False
    for block in iter_blocks(path, 1 << 20):
        data = rest + block if rest else block
        lines = data.split(b"\n")
        rest = lines.pop()
        for ln in lines:
            if dropping:  # the tail of an overlong line
                dropping = False
                continue
            yield ln.decode("utf-8", "replace")
        if len(rest) > LINE_LIMIT:
            if not dropping:
                yield rest[:LINE_LIMIT].decode("utf-8", "replace")
                if notes is not None:
                    notes.long_lines += 1
            dropping = True
            rest = b""
    if rest and not dropping:
        yield rest.decode("utf-8", "replace")


def digest_file(path: Path) -> str:
    """Content digest of the file as stored (a gzip and its plain twin count as different files)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


_RE_ENTITY = re.compile(r"<!ENTITY", re.I)


def complete_xml(text: str) -> tuple[str, str | None]:
    """The document, or for one cut short the part that is whole (the root with its closed children),
    and why it was cut. nvidia-smi never declares entities, so a document that does is refused."""
    import xml.etree.ElementTree as ET

    if _RE_ENTITY.search(text):
        raise XmlRefused("XML declares entities (<!ENTITY>); nvidia-smi never does: refused, not expanded")
    pull: ET.XMLPullParser = ET.XMLPullParser(events=("start", "end"))
    root: ET.Element | None = None
    depth = 0
    closed: list[ET.Element] = []
    err: str | None = None
    try:
        pull.feed(text)
        for ev, item in pull.read_events():  # type: ignore[misc]
            el = item if isinstance(item, ET.Element) else None
            if el is None:
                continue
            if ev == "start":
                if root is None:
                    root = el
                depth += 1
            else:
                depth -= 1
                if depth == 1:
                    closed.append(el)
        pull.close()
    except ET.ParseError as e:
        err = str(e)
    if err is None or root is None:
        return text, None
    whole = ET.Element(root.tag, root.attrib)
    whole.extend(closed)
    gpus = sum(1 for c in closed if c.tag == "gpu")
    return ET.tostring(
        whole, encoding="unicode"
    ), f"XML cut short ({err}): kept {gpus} complete <gpu> sections"


def recording_files(root: Path) -> list[Path]:
    """Every file of the recording (a directory, walked, or one file), sorted; nothing is left out here."""
    if not root.is_dir():
        return [root]
    return sorted(p for p in root.rglob("*") if p.is_file() or (p.exists() and not p.is_dir()))
