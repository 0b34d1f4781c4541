"""The time of a recording file that carries none: from its name, else --at, else its mtime.

Never the clock of the machine replaying: a saved scrape or an nccl-tests log is placed where it was taken.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

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


def file_time(path: Path, at: float | None) -> tuple[float, str]:
    """The time of a file that carries none: from its name, else `at` (--at), else its mtime; and which."""
    t = time_from_name(path.name)
    if t is not None:
        return t, f"the file name ({iso(t)})"
    if at is not None:
        return at, f"--at ({iso(at)})"
    m = path.stat().st_mtime
    return m, f"the file's mtime ({iso(m)}; give --at TIME if the file was copied since)"


def iso(t: float) -> str:
    """Unix seconds -> 2026-12-02T14:40:12Z."""
    return dt.datetime.fromtimestamp(t, tz=dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
