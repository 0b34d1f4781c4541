"""Durations, sizes and ISO 8601 times: the one grammar for each, used by rules, the CLI, formats and the burn-in.

Everything here is pure and raises `ValueError` with a message that quotes the bad text; callers turn that into
their own error (a rule file's RuleError, a CLI usage error naming the option).

- Durations: a bare number is seconds (``90``, ``"1.5"``); otherwise one or more ``<number><unit>`` parts, units
  ``ms s m h d w`` (``"90s"``, ``"5m"``, ``"1h30m"``, ``"2w"``), the grammar of Prometheus' rule durations plus
  fractions. Never negative.
- Sizes: bytes, or a number with a binary suffix ``K M G T`` (optionally followed by ``iB`` or ``B``): ``"512M"``,
  ``"2GiB"``, ``"65536"``. ``1K`` is 1024 bytes, as nccl-tests' ``-b``/``-e`` and DCGM read them.
- ISO times: ``YYYY-MM-DD[(T| )hh:mm[:ss[(.|,)fraction]]][Z|±hh[:mm]|±hhmm]`` -> unix seconds. Without an
  offset the time is UTC. The date must exist: ``2024-02-30`` is an error, not 1 March.
"""

from __future__ import annotations

import datetime as dt
import math
import re

DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}

_NUM = r"\d+(?:\.\d+)?"
_DUR_PART = re.compile(rf"({_NUM})(ms|s|m|h|d|w)")
_DUR_FULL = re.compile(rf"(?:{_NUM}(?:ms|s|m|h|d|w))+")
_SIZE = re.compile(rf"({_NUM})\s*([KMGT]?)(?:I?B)?", re.I)
ISO_PATTERN = (
    r"(\d{4})-(\d\d)-(\d\d)"
    r"(?:[T ](\d\d):(\d\d)(?::(\d\d)(?:[.,](\d+))?)?)?"
    r"\s*(Z|[+-]\d\d(?::?\d\d)?)?"
)
_ISO_FULL = re.compile(ISO_PATTERN, re.I)


def parse_duration(value: str | float | int) -> float:
    """'90s', '5m', '1h30m', '2w', '250ms', 90, '1.5' -> seconds (a float >= 0)."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, (int, float)):
        secs = float(value)
    else:
        s = str(value).strip()
        try:
            secs = float(s)
        except ValueError:
            if not _DUR_FULL.fullmatch(s):
                raise ValueError(f"not a duration: {value!r} (use e.g. 30s, 5m, 1h30m, 2d, 1w)") from None
            secs = sum(float(n) * DURATION_UNITS[u] for n, u in _DUR_PART.findall(s))
        else:
            if s.lower() in ("nan", "inf", "-inf", "+inf", "infinity", "-infinity", "+infinity"):
                raise ValueError(f"not a duration: {value!r}")
    if not math.isfinite(secs) or secs < 0:
        raise ValueError(f"not a duration: {value!r} (must be a finite number of seconds, not negative)")
    return secs


def human_duration(secs: float | None) -> str:
    """Seconds for a person: '45s', '12m', '3.2h', '36.4d' (one unit, the largest that keeps the figure >= 1;
    days past a week too, since MTBFs and outages are read in days). None -> '-'."""
    if secs is None:
        return "-"
    s = abs(float(secs))
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if s >= size:
            v = s / size
            return (
                f"{'-' if secs < 0 else ''}{v:.1f}{unit}"
                if v < 10
                else f"{'-' if secs < 0 else ''}{v:.0f}{unit}"
            )
    return f"{secs:.0f}s"


def days(d: float | None) -> str:
    """A figure in days (an incident log's MTBF, repair times) for a person, as human_duration: 239.03 -> '239d',
    0.8496 -> '20h'."""
    return human_duration(None if d is None else float(d) * 86400.0)


def percent(ratio: float | None) -> str:
    """A ratio (availability) for a person, in percent: 0.976852 -> '97.69%', 1 -> '100%', 0 -> '0%'; digits
    are added where two would round a ratio short of 1 to '100.00%' (0.99999 -> '99.999%'). None -> '-'."""
    if ratio is None:
        return "-"
    v = 100.0 * float(ratio)
    if v in (0.0, 100.0):
        return f"{v:.0f}%"
    digits = 2
    while digits < 10 and round(v, digits) in (0.0, 100.0):
        digits += 1
    return f"{v:.{digits}f}%"


def parse_size(text: str | int) -> int:
    """'512M', '2GiB', '8g', '65536' -> bytes (an int >= 0). '' and '12X' are errors."""
    if isinstance(text, bool):
        raise ValueError(f"not a size: {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"not a size: {text!r} (negative)")
        return text
    m = _SIZE.fullmatch(text.strip())
    if not m:
        raise ValueError(f"not a size: {text!r} (use e.g. 65536, 512M, 2G)")
    return int(float(m.group(1)) * SIZE_UNITS[m.group(2).upper()])


def _offset_s(tz: str | None) -> int:
    if not tz or tz.upper() == "Z":
        return 0
    sign = -1 if tz[0] == "-" else 1
    digits = tz[1:].replace(":", "")
    hours, minutes = int(digits[:2]), int(digits[2:4] or 0)
    if hours > 23 or minutes > 59:
        raise ValueError(f"bad UTC offset {tz!r}")
    return sign * (hours * 3600 + minutes * 60)


def iso_match_to_unix(m: re.Match[str]) -> float:
    """The unix time of a match of ISO_PATTERN (for parsers that find a time inside a longer line)."""
    y, mo, d, h, mi, s, frac, tz = m.groups()
    try:
        base = dt.datetime(
            int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0), tzinfo=dt.timezone.utc
        )
        offset = _offset_s(tz)
    except ValueError as e:
        raise ValueError(f"not a time: {m.group(0)!r} ({e})") from None
    fraction = int(frac[:9]) / 10 ** len(frac[:9]) if frac else 0.0  # nanoseconds at most
    return base.timestamp() + fraction - offset


def parse_iso(text: str) -> float:
    """'2026-12-02T14:40:00Z', '2025-01-21T04:41:44,283302+00:00', '2026-11-30 00:16:39+0000', '2026-12-02'
    -> unix seconds. Naive times are UTC."""
    m = _ISO_FULL.fullmatch(text.strip())
    if not m:
        raise ValueError(f"not an ISO 8601 time: {text!r} (use e.g. 2026-12-02T14:40:00Z)")
    return iso_match_to_unix(m)
