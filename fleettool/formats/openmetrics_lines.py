"""The OpenMetrics / Prometheus text exposition format, line by line: series text (`name{labels}`) parsed once per
distinct series into a table, comments (TYPE, HELP, EOF), and samples with their timestamps checked.

Timestamps: OpenMetrics gives seconds (often fractional), the Prometheus text format integer milliseconds. When
the caller cannot say which (millis=None), the first plausible timestamp decides: 1973..2100 read as seconds is
1e8..4.1e9, read as milliseconds 1e11..4.1e12, and the two ranges do not overlap. A timestamp outside 1973..2100
after that (-5, 1e30, NaN, a millisecond value in an OpenMetrics file) is a file:line issue and the sample is
skipped. Values NaN and +/-Inf are legal (the exposition format allows them); what to keep is the ingest's call.
A body with no timestamps (a `curl .../metrics` scrape) takes `default_ts`; without one, the first such sample is
an issue that counts the others.

The formats: https://prometheus.io/docs/instrumenting/exposition_formats/ and the OpenMetrics specification
(https://github.com/prometheus/OpenMetrics/blob/main/specification/OpenMetrics.md). Whole files go through the
vectorised path in formats/openmetrics.py, which hands this parser the lines it cannot take.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from fleettool.formats.errors import ParseError, ParseIssue

_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_.]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:.]*$")
_UNESCAPE = re.compile(r"\\(.)")

TS_MIN = 1e8  # 1973-03-03, in unix seconds: the range a sample's timestamp must fall in
TS_MAX = 4102444800.0  # 2100-01-01
NO_TS = "sample has no timestamp and none was given for the file"


def decide_millis(t: float) -> bool | None:
    """True if t reads as unix milliseconds in 1973..2100, False as seconds, None if neither."""
    if TS_MIN <= t <= TS_MAX:
        return False
    if TS_MIN * 1000.0 <= t <= TS_MAX * 1000.0:
        return True
    return None


def ts_message(text: str) -> str:
    try:
        float(text)
    except ValueError:
        return f"bad number in timestamp {text[:40]!r}"
    return f"timestamp {text[:40]!r} is not a unix time in 1973..2100 (seconds or milliseconds)"


def _unescape(v: str) -> str:
    if "\\" not in v:
        return v
    return _UNESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), v)


def parse_series(series: str) -> tuple[str, dict[str, str]]:
    """'name{a="1",b="x y"}' -> ('name', {'a': '1', 'b': 'x y'}); raises ValueError when malformed."""
    brace = series.find("{")
    if brace < 0:
        name = series.strip()
        if not _NAME.match(name):
            raise ValueError(f"bad metric name {name!r}")
        return name, {}
    name = series[:brace].strip()
    if not _NAME.match(name):
        raise ValueError(f"bad metric name {name!r}")
    if not series.endswith("}"):
        raise ValueError("unterminated label set")
    body = series[brace + 1 : -1]
    labels: dict[str, str] = {}
    pos = 0
    n = len(body)
    while pos < n:
        if body[pos:].strip() == "":
            break
        m = _LABEL.match(body, pos)
        if not m:
            raise ValueError(f"bad label set near {body[pos : pos + 30]!r}")
        labels[m.group(1)] = _unescape(m.group(2))
        pos = m.end()
    return name, labels


@dataclass
class SeriesTable:
    """Distinct series seen so far, by id (the row index)."""

    names: list[str] = field(default_factory=list)
    labels: list[dict[str, str]] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)
    helps: dict[str, str] = field(default_factory=dict)
    lines: list[int] = field(default_factory=list)  # the line each series first appeared on


@dataclass
class Chunk:
    """Parallel columns: series id, timestamp (unix seconds), value (lists or numpy arrays)."""

    sid: Any
    ts: Any
    value: Any


class ExpositionParser:
    """Stateful across chunks of one file: series ids stay stable, so callers can map each series once.

    `millis`: True for the Prometheus text format (integer ms timestamps), False for OpenMetrics (seconds),
    None to decide from the first timestamp's magnitude. `default_ts` (seconds) stamps lines without one.
    `strict`: raise ParseError on the first bad line; otherwise record a ParseIssue and skip the line.
    """

    def __init__(
        self,
        path: str,
        *,
        millis: bool | None = None,
        default_ts: float | None = None,
        strict: bool = False,
    ) -> None:
        self.path = path
        self.millis = millis
        self.default_ts = default_ts if default_ts is not None and math.isfinite(default_ts) else None
        self.strict = strict
        self.series = SeriesTable()
        self.issues: list[ParseIssue] = []
        self.saw_eof = False
        self._ids: dict[str, int] = {}
        self.byte_ids: dict[bytes, int] = {}  # the same series keyed by raw bytes (the bulk path)
        self.lineno = 0  # the last line read
        self._no_ts = 0  # samples without a timestamp when there was no default_ts
        self._no_ts_issue = -1

    def _bad(self, msg: str) -> None:
        self.report(self.lineno, msg)

    def report(self, line: int, msg: str) -> None:
        """A bad line: raise ParseError in strict mode, else keep it as an issue (the caller skips the line)."""
        issue = ParseIssue(self.path, max(line, 1), msg)
        if self.strict:
            raise ParseError(issue)
        self.issues.append(issue)

    def series_id(self, text: str) -> int | None:
        """The id of a series text seen before, else None."""
        return self._ids.get(text)

    def add_series(self, text: str, lineno: int) -> int | None:
        """A series text not seen before, parsed once and given the next id; None (an issue) when malformed."""
        try:
            name, labels = parse_series(text)
        except ValueError as e:
            self.report(lineno, str(e))
            return None
        sid = len(self.series.names)
        self.series.names.append(name)
        self.series.labels.append(labels)
        self.series.lines.append(lineno)
        self._ids[text] = sid
        return sid

    def finish(self) -> None:
        """After the last line: fold the count of timestamp-less samples into the first one's issue."""
        if self._no_ts > 1 and 0 <= self._no_ts_issue < len(self.issues):
            first = self.issues[self._no_ts_issue]
            self.issues[self._no_ts_issue] = ParseIssue(
                first.path, first.line, f"{NO_TS} ({self._no_ts} samples from this line on skipped)"
            )

    def _comment(self, line: str) -> None:
        if line.startswith("# EOF"):
            self.saw_eof = True
            return
        parts = line.split(None, 3)
        if len(parts) >= 3 and parts[1] in ("TYPE", "HELP"):
            target = self.series.types if parts[1] == "TYPE" else self.series.helps
            target[parts[2]] = parts[3].strip() if len(parts) > 3 else ""

    def feed(self, lines: Iterable[str]) -> Chunk:
        sids: list[int] = []
        tss: list[float] = []
        vals: list[float] = []
        ids_get = self._ids.get
        sid_append = sids.append
        ts_append = tss.append
        val_append = vals.append
        millis = self.millis
        default_ts = self.default_ts
        lineno = self.lineno
        for line in lines:
            lineno += 1
            if not line or line[0] == "#":
                if line:
                    self.lineno = lineno
                    self._comment(line)
                continue
            if " # " in line:  # OpenMetrics exemplar
                line = line[: line.index(" # ")]
            brace = line.rfind("}")
            if brace >= 0:
                series = line[: brace + 1]
                rest = line[brace + 1 :].split()
            else:
                rest = line.split()
                if not rest:
                    continue
                series = rest[0]
                rest = rest[1:]
            if len(rest) > 2:
                self.lineno = lineno
                self._bad("trailing text after timestamp")
                continue
            if not rest:
                self.lineno = lineno
                self._bad("sample has no value")
                continue
            sid = ids_get(series)
            if sid is None:
                self.lineno = lineno
                sid = self.add_series(series, lineno)
                if sid is None:
                    continue
            try:
                v = float(rest[0])
            except ValueError:
                self.lineno = lineno
                self._bad(f"bad number in {' '.join(rest)!r}")
                continue
            if len(rest) == 2:
                try:
                    t = float(rest[1])
                except ValueError:
                    t = math.nan
                if millis is None:
                    millis = self.millis = decide_millis(t)
                if millis:
                    t /= 1000.0
                if not TS_MIN <= t <= TS_MAX:  # NaN fails too
                    self.lineno = lineno
                    self._bad(ts_message(rest[1]))
                    continue
            elif default_ts is not None:
                t = default_ts
            else:
                self._no_ts += 1
                if self._no_ts == 1:
                    self.lineno = lineno
                    self._bad(NO_TS)
                    self._no_ts_issue = len(self.issues) - 1
                continue
            sid_append(sid)
            ts_append(t)
            val_append(v)
        self.lineno = lineno
        return Chunk(sids, tss, vals)
