"""A saved `/sys/class/infiniband` as a tarball (`tar czhf ib.tgz /sys/class/infiniband`), extracted safely into a
temporary directory and read with ib_sysfs.read_ib_sysfs, so a saved tree reads as the live one does.

tar strips the leading `/`: members are `sys/class/infiniband/...` (a sysfs root at `sys/`); a tree saved from
inside /sys (`tar czf ib.tgz -C /sys class/infiniband`) is rooted at `class/infiniband/` and read too.

Extraction is bounded and confined:
- a member with an absolute path or a `..` in it, a link whose target is absolute or leaves the tree, a device
  node or fifo is not extracted, and is named with why;
- at most MAX_MEMBERS members, MAX_MEMBER_BYTES a file, MAX_TOTAL_BYTES in all and MAX_ARCHIVE_BYTES gunzipped
  (sysfs files are a few bytes; a tree of 8 CX-7 ports is about 500 files): past a bound the tarball is refused
  (TarRefused), nothing read;
- a tarball that is cut short or corrupt is refused whole (TarBroken, saying after how many members): half a tree
  would read as NICs gone from the node. A gzip stream must end, and the tar must end in its end-of-archive
  blocks: a tar cut exactly between two members would otherwise read as a smaller tree.

sysfs reports every file as 4096 bytes, so GNU tar pads what it read with NUL bytes ("File shrank by N bytes;
padding with zeros"): the padding is dropped. `/sys/class/infiniband/mlx5_0` is a symlink into /sys/devices:
saved without `-h` the tarball holds only the links, and each is named as a link to what the tarball lacks.
"""

from __future__ import annotations

import io
import os
import posixpath
import shutil
import tarfile
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from fleettool.formats.ib_sysfs import IbSysfs, read_ib_sysfs

MAX_MEMBERS = 100_000
MAX_MEMBER_BYTES = 1 << 20
MAX_TOTAL_BYTES = 64 << 20
MAX_ARCHIVE_BYTES = (
    128 << 20
)  # the archive read into memory, gunzipped (headers and padding beside the files)
LAYOUTS = ("sys/class/infiniband", "class/infiniband")


class TarRefused(ValueError):
    """A tarball over the bounds: not extracted."""


class TarBroken(ValueError):
    """A tarball cut short or corrupt: nothing of it is read."""


@dataclass
class TarTree:
    reading: IbSysfs
    layout: str  # the member prefix the tree sits under
    members: int = 0
    skipped: list[str] = field(default_factory=list)  # `member: why`
    dangling: list[str] = field(default_factory=list)  # class/infiniband entries linking to what is not there


def _norm(name: str) -> str:
    n = name.replace("\\", "/")
    while n.startswith("./"):
        n = n[2:]
    return n.rstrip("/")


def layout_of(names: list[str]) -> str | None:
    """`sys/class/infiniband` or `class/infiniband` when a member of `names` is (under) one, else None."""
    for raw in names:
        n = _norm(raw).lstrip("/")
        for lay in LAYOUTS:
            if n == lay or n.startswith(lay + "/"):
                return lay
    return None


def sniff_tar(head: bytes) -> str | None:
    """The layout of a tar archive whose first bytes (decompressed) are `head`, or None when it is no tar of an
    InfiniBand sysfs tree. Reads the member headers the head holds; a cut last header is fine."""
    if len(head) < 512 or head[257:262] != b"ustar":
        return None
    names: list[str] = []
    try:
        with tarfile.open(fileobj=io.BytesIO(head), mode="r:") as tf:
            for m in tf:
                names.append(m.name)
                if len(names) >= 64:
                    break
    except (tarfile.TarError, EOFError, OSError):
        pass
    return layout_of(names)


def _unsafe(name: str) -> str | None:
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return "absolute path: not extracted"
    if ".." in name.split("/"):
        return "'..' in the path: not extracted"
    return None


def _extract(tf: tarfile.TarFile, dest: Path, tree: TarTree) -> None:
    total = 0
    real = dest.resolve()
    for m in tf:
        tree.members += 1
        if tree.members > MAX_MEMBERS:
            raise TarRefused(f"more than {MAX_MEMBERS} members: refused (not a saved sysfs tree?)")
        name = _norm(m.name)
        if not name:
            continue
        why = _unsafe(name)
        if why:
            tree.skipped.append(f"{m.name}: {why}")
            continue
        out = dest / name
        if m.isfile():  # every member's size counts, extracted or not: tar skips over a member's data too
            total += m.size
            if total > MAX_TOTAL_BYTES:
                raise TarRefused(f"more than {MAX_TOTAL_BYTES >> 20} MiB of files: refused")
        if m.isdir():
            out.mkdir(parents=True, exist_ok=True)
        elif m.issym() or m.islnk():
            target = m.linkname if m.issym() else "/" + _norm(m.linkname)
            resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
            if target.startswith("/") and m.issym():
                tree.skipped.append(f"{m.name}: a link to the absolute path {m.linkname}: not extracted")
                continue
            resolved = resolved.lstrip("/") if m.islnk() else resolved
            if resolved == ".." or resolved.startswith("../"):
                tree.skipped.append(f"{m.name}: a link out of the tree ({m.linkname}): not extracted")
                continue
            out.parent.mkdir(parents=True, exist_ok=True)
            if m.issym():
                os.symlink(m.linkname, out)
            else:
                src = dest / resolved
                if not src.is_file():
                    tree.skipped.append(
                        f"{m.name}: a hard link to {m.linkname}, not in the tarball before it"
                    )
                    continue
                shutil.copyfile(src, out)
        elif m.isfile():
            if m.size > MAX_MEMBER_BYTES:
                tree.skipped.append(f"{m.name}: {m.size} bytes, more than a sysfs file holds: not extracted")
                continue
            f = tf.extractfile(m)
            data = f.read(MAX_MEMBER_BYTES) if f is not None else b""
            out.parent.mkdir(parents=True, exist_ok=True)
            if out.is_symlink() or not out.resolve().is_relative_to(real):
                tree.skipped.append(
                    f"{m.name}: would be written through a link out of the tree: not extracted"
                )
                continue
            out.write_bytes(data.rstrip(b"\0"))  # GNU tar pads a sysfs file that "shrank" with NULs
        else:
            tree.skipped.append(f"{m.name}: a device node or fifo: not extracted")


def _archive(path: str | os.PathLike[str]) -> bytes:
    """The tar archive's bytes, gunzipped, whole: a gzip stream that does not end (cut short) or is corrupt is
    TarBroken; past MAX_ARCHIVE_BYTES, TarRefused."""
    p = Path(path)
    if p.stat().st_size > MAX_ARCHIVE_BYTES:
        raise TarRefused(f"{p.stat().st_size} bytes: more than a saved sysfs tree (refused)")
    raw = p.read_bytes()
    if raw[:2] != b"\x1f\x8b":
        return raw
    d = zlib.decompressobj(31)
    try:
        out = d.decompress(raw, MAX_ARCHIVE_BYTES + 1)
    except zlib.error as e:
        raise TarBroken(f"corrupt gzip data ({e}): nothing of it was read") from e
    if len(out) > MAX_ARCHIVE_BYTES:
        raise TarRefused(f"decompresses past {MAX_ARCHIVE_BYTES >> 20} MiB: refused (a gzip bomb?)")
    if not d.eof:
        raise TarBroken(f"gzip stream cut short after {len(out)} bytes of tar: nothing of it was read")
    return out


def read_ib_tarball(path: str | os.PathLike[str]) -> TarTree:
    """Extract the tarball at `path` (plain or gzip) into a temporary directory and read its ports.

    Raises TarBroken for a tarball cut short or corrupt (a gzip stream that does not end, a member cut, no
    end-of-archive blocks: a tar cut at a member's edge reads as a shorter tree, so the end is checked),
    TarRefused past a bound, and ValueError when it holds no `[sys/]class/infiniband` tree."""
    data = _archive(path)
    with tempfile.TemporaryDirectory(prefix="fleettool-ibtar-") as tmp:
        dest = Path(tmp)
        tree = TarTree(IbSysfs(), "")
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tf:
                _extract(tf, dest, tree)
                end = tf.offset
        except (tarfile.ReadError, EOFError) as e:
            raise TarBroken(
                f"tar cut short or corrupt after {tree.members} members ({e}): nothing of it was read"
            ) from e
        if len(data) < end + 1024 or data[end : end + 1024].strip(b"\0"):
            raise TarBroken(
                f"no end-of-archive blocks after {tree.members} members: cut short; nothing of it was read"
            )
        names = [str(p.relative_to(dest)) for p in dest.rglob("*")]
        lay = layout_of(names)
        if lay is None:
            raise ValueError("a tarball with no sys/class/infiniband or class/infiniband in it")
        tree.layout = lay
        root = dest / "sys" if lay.startswith("sys/") else dest
        base = root / "class" / "infiniband"
        entries = sorted(base.iterdir(), key=lambda p: p.name) if base.is_dir() else []
        for entry in entries:
            if entry.is_symlink() and not entry.exists():
                tree.dangling.append(f"{entry.name} -> {os.readlink(entry)}")
        tree.reading = read_ib_sysfs(root)
        tree.reading.issues = [i.replace(str(dest), "") for i in tree.reading.issues]
    return tree
