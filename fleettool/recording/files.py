"""Open recording files: .gz read transparently, format identified by content, not by name."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

GZIP_MAGIC = b"\x1f\x8b"


def iter_blocks(path: Path, size: int = 1 << 16) -> Iterator[bytes]:
    """The file's bytes in blocks, gunzipped when the file is gzip (by magic number, not by name)."""
    with open(path, "rb") as f:
        head = f.read(2)
        f.seek(0)
        if head == GZIP_MAGIC:
            d = zlib.decompressobj(31)
            while True:
                c = f.read(size)
                if not c:
                    break
                while c:
                    out = d.decompress(c, 1 << 22)
                    if out:
                        yield out
                    c = d.unconsumed_tail
                if d.eof and d.unused_data:  # concatenated gzip members (rotated logs are often joined)
                    rest = d.unused_data
                    d = zlib.decompressobj(31)
                    out = d.decompress(rest)
                    if out:
                        yield out
            tail = d.flush()
            if tail:
                yield tail
        else:
            while True:
                c = f.read(size)
                if not c:
                    break
                yield c


def read_head(path: Path, n: int = 8192) -> bytes:
    out = b""
    for b in iter_blocks(path):
        out += b
        if len(out) >= n:
            break
    return out[:n]


def read_text(path: Path) -> str:
    return b"".join(iter_blocks(path)).decode("utf-8", "replace")


def identify(path: Path) -> str:
    """'openmetrics', 'prometheus', 'kmsg', 'nccl-tests', 'nccl-tests-json', 'nvidia-smi-xml', 'nvidia-smi-text',
    or 'unknown', from the first 8 KiB."""
    try:
        head = read_head(path).decode("utf-8", "replace")
    except (OSError, zlib.error):
        return "unknown"
    stripped = head.lstrip()
    if stripped.startswith("<?xml") or "<nvidia_smi_log" in head:
        return "nvidia-smi-xml"
    if "==============NVSMI LOG==============" in head:
        return "nvidia-smi-text"
    if stripped.startswith("{") or stripped.startswith("["):
        return "nccl-tests-json" if ("busbw" in head or "nccl" in head.lower()) else "unknown"
    if "out-of-place" in head or "# nThread" in head or "#  Rank" in head or "# Using devices" in head:
        return "nccl-tests"
    lines = [ln for ln in head.splitlines()[:200] if ln.strip()]
    om = sum(1 for ln in lines if ln.startswith(("# TYPE ", "# HELP ", "# EOF")))
    series = sum(1 for ln in lines if _looks_like_sample(ln))
    if om or series > len(lines) // 2:
        return "openmetrics" if "# EOF" in head or _fractional_ts(lines) else "prometheus"
    if any(("kernel:" in ln or "NVRM:" in ln or "kern" in ln or ln.startswith("[")) for ln in lines):
        return "kmsg"
    return "unknown"


def _looks_like_sample(line: str) -> bool:
    if line.startswith("#"):
        return False
    name = line.split("{", 1)[0].split(" ", 1)[0]
    return bool(name) and (
        name.startswith(("DCGM_", "fleettool_")) or ("{" in line and '="' in line and "}" in line)
    )


def _fractional_ts(lines: list[str]) -> bool:
    for ln in lines:
        if ln.startswith("#"):
            continue
        parts = ln.rsplit(" ", 2)
        if len(parts) == 3:
            try:
                t = float(parts[2])
            except ValueError:
                return False
            return t < 1e11
    return False


def iter_lines(path: Path) -> Iterator[str]:
    """The file's text lines (gunzipped by magic), decoded leniently: a bad byte never stops a log."""
    rest = b""
    for block in iter_blocks(path, 1 << 20):
        data = rest + block
        lines = data.split(b"\n")
        rest = lines.pop()
        for ln in lines:
            yield ln.decode("utf-8", "replace")
    if rest:
        yield rest.decode("utf-8", "replace")
