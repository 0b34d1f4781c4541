"""A local cache of a fleet location's segments, so a reader that comes back (`fleettool fleet incidents`) reads
only what changed: a directory mirroring the segments read, and a manifest (`manifest.json`) of each one's path,
size and modification time as the location listed them. A sync lists the location (one listing per table), copies
only the segments that are new or whose size or time changed (an export rewrote them), and removes the ones the
location no longer has (a daily segment replacing its hours, an exporter gone); readers then open the mirror as a
fleet location of its own. Copies are whole or absent (a temporary name, then a rename), and a torn manifest
only makes the next sync read everything again."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from fleettool.fleet.location import Location
from fleettool.fleet.read import segment_infos

_CHUNK = 1 << 20


@dataclass
class SyncReport:
    read: int = 0  # segments copied this run (new or rewritten)
    kept: int = 0  # segments already in the cache, unchanged
    dropped: int = 0  # cached segments the location no longer has
    bytes: int = 0  # bytes copied

    def line(self, cache: Path) -> str:
        total = self.read + self.kept
        gone = f", {self.dropped} gone" if self.dropped else ""
        return (
            f"read {self.read} of {total} segments ({self.kept} cached{gone}, {self.bytes} bytes) via {cache}"
        )


def default_cache(url: str) -> Path:
    """~/.cache/fleettool/fleet/<hash of the location> (XDG_CACHE_HOME honoured)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "fleettool" / "fleet" / hashlib.sha256(url.encode()).hexdigest()[:16]


def _relative(loc: Location, path: str) -> str:
    root = loc.root.rstrip("/") + "/" if loc.root else ""
    return path[len(root) :] if root and path.startswith(root) else path.lstrip("/")


def _copy(loc: Location, path: str, dest: Path) -> int:
    """Copy one segment to dest, whole or not at all (a hidden temporary name, then a rename)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".tmp-{uuid.uuid4().hex}.parquet"
    n = 0
    try:
        with loc.fs.open_input_stream(path) as src, open(tmp, "wb") as out:
            while chunk := src.read(_CHUNK):
                out.write(chunk)
                n += len(chunk)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return n


def sync(loc: Location, cache: Path, tables: tuple[str, ...]) -> SyncReport:
    """Bring the cache's copy of `tables` up to the location's segments; what was read."""
    mirror = cache / "segments"
    manifest_path = cache / "manifest.json"
    cache.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, list[int]] = {}
    if manifest_path.exists():
        try:
            manifest = json.loads(manifest_path.read_text())
        except ValueError:
            manifest = {}  # a torn manifest: everything is read again
    rep = SyncReport()
    seen: set[str] = set()
    for table in tables:
        for f in segment_infos(loc, table):
            rel = _relative(loc, f.path)
            seen.add(rel)
            stamp = [int(f.size or 0), int(f.mtime_ns or 0)]
            if manifest.get(rel) == stamp and (mirror / rel).exists():
                rep.kept += 1
                continue
            rep.bytes += _copy(loc, f.path, mirror / rel)
            rep.read += 1
            manifest[rel] = stamp
    for rel in [r for r in manifest if r.split("/", 1)[0] in tables and r not in seen]:
        (mirror / rel).unlink(missing_ok=True)
        del manifest[rel]
        rep.dropped += 1
    tmp = cache / f".manifest-{uuid.uuid4().hex}.json"
    tmp.write_text(json.dumps(manifest, separators=(",", ":")))
    os.replace(tmp, manifest_path)
    return rep
