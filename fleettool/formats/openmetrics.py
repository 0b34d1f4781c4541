"""Bulk parser for OpenMetrics and Prometheus text exposition (dcgm-exporter scrapes, fleettool recordings).

Reads lines, writes columns: a table of series (name + labels, parsed once per distinct series) and three
parallel columns (series id, timestamp in seconds, value) per chunk. prometheus_client's parser is the
reference in a differential test; this one trades generality for speed (~30x) by caching each distinct
series string and splitting the rest of the line from the right.

The format itself, its timestamps and what is an issue: formats/openmetrics_lines.py (ExpositionParser), which
also takes every line that does not fit the fast path here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from fleettool.formats.openmetrics_lines import (
    TS_MAX,
    TS_MIN,
    Chunk,
    ExpositionParser,
    decide_millis,
    parse_series,
    ts_message,
)

# ExpositionParser, Chunk and decide_millis are imported from here by the collectors and recording/
__all__ = [
    "BLOCK",
    "TS_MAX",
    "TS_MIN",
    "Chunk",
    "ExpositionParser",
    "decide_millis",
    "parse_bytes",
    "parse_stream",
]

# ---------------------------------------------------------------------------------------------------------
# Vectorised path for whole files: the line ends and the last two spaces of each line are found with numpy over
# the raw bytes; the series texts, values and timestamps become Arrow views into the same bytes, so the series
# are told apart by Arrow's hash table and the numbers parsed by Arrow's cast, with no Python per line (only a
# series never seen before costs a dict entry). Lines that do not fit the common `series value timestamp` shape
# go through ExpositionParser.feed.

_VIEW_MAX = 1 << 31
_TAIL = 48  # the value and the timestamp of a line fit in this many bytes, or the line takes the slow path


def parse_bytes(parser: ExpositionParser, data: bytes, first_lineno: int = 1) -> Chunk:
    """Parse a block of whole lines (bytes) into a Chunk, sharing the parser's series table and issues."""
    import numpy as np
    import pyarrow as pa

    n = len(data)
    if n == 0:
        return Chunk([], [], [])
    if n >= _VIEW_MAX:  # Arrow views address a buffer with 32-bit offsets: halve at a line end
        cut = data.rfind(b"\n", 0, n // 2) + 1 or data.find(b"\n", n // 2) + 1
        if 0 < cut < n:
            left = parse_bytes(parser, data[:cut], first_lineno)
            right = parse_bytes(parser, data[cut:], parser.lineno + 1)
            return Chunk(*(np.concatenate((x, y)) for x, y in zip(_cols(left), _cols(right), strict=True)))
    buf = np.frombuffer(data, np.uint8)
    # one pass over the bytes: every byte <= '#' (newline, space, '#', and the rarer '"', '!', controls)
    cand = np.flatnonzero(buf <= 35)
    cb = buf[cand]
    nl = cand[cb == 10]
    starts = np.concatenate(([0], nl + 1))
    ends = np.concatenate((nl, [n]))
    if ends[-1] == starts[-1]:  # trailing newline: no last line
        starts = starts[:-1]
        ends = ends[:-1]
    linenos = np.arange(first_lineno, first_lineno + len(starts))
    # strip a trailing carriage return
    if len(ends):
        cr = (ends > starts) & (buf[np.maximum(ends - 1, 0)] == 13)
        ends = ends - cr
    nonempty = ends > starts
    firstc = np.where(nonempty, buf[np.minimum(starts, n - 1)], 35)
    # the last two spaces of each line, from the positions of every space in the block
    spaces = cand[cb == 32]
    k = np.searchsorted(spaces, ends)
    have2 = k >= 2
    sp1 = np.where(have2, spaces[np.maximum(k - 1, 0)] if len(spaces) else 0, -1)
    sp2 = np.where(have2, spaces[np.maximum(k - 2, 0)] if len(spaces) else 0, -1)
    before = buf[np.maximum(sp2 - 1, 0)]
    fast = (
        (firstc != 35)
        & have2
        & (sp2 > starts)
        & (before == 125)
        & (sp1 > sp2 + 1)
        & (sp1 < ends - 1)
        & (ends - sp2 <= _TAIL)
    )
    # a '#' inside a line means an OpenMetrics exemplar: leave those lines to the slow path
    hashes = cand[cb == 35]
    if len(hashes):
        fast &= (np.searchsorted(hashes, ends) - np.searchsorted(hashes, starts)) == 0
    slow_idx = np.flatnonzero(~fast)
    fs = starts[fast]
    f2 = sp2[fast]
    sp1_fast = sp1[fast]
    fe = ends[fast]
    fl = linenos[fast]
    if len(fs):
        # Arrow binary views over the block's own bytes (no copy): the series text, the value, the timestamp
        pad = np.zeros(n + 16, np.uint8)
        pad[:n] = buf
        win = np.ndarray((n + 13,), dtype="<u4", buffer=pad, strides=(1,))  # 4 bytes from every offset
        block = pa.py_buffer(data)
        series = _views(block, win, fs, f2 - fs)
        sid_arr = _series_ids(parser, data, series, fs, f2, fl)
        vals = _to_floats(_views(block, win, f2 + 1, sp1_fast - f2 - 1))
        tss = _to_floats(_views(block, win, sp1_fast + 1, fe - sp1_fast - 1))
    else:
        sid_arr = np.zeros(0, np.int64)
        vals = np.zeros(0)
        tss = np.zeros(0)

    millis = parser.millis
    if millis is None and len(tss):
        sec = (tss >= TS_MIN) & (tss <= TS_MAX)
        ms = (tss >= TS_MIN * 1000.0) & (tss <= TS_MAX * 1000.0)
        first = np.flatnonzero(sec | ms)[:1]  # the first plausible timestamp decides, not the first one
        if len(first):
            millis = parser.millis = bool(ms[first[0]])
    if millis:
        tss = tss / 1000.0
    good = sid_arr >= 0
    with np.errstate(invalid="ignore"):
        bad_ts = ~((tss >= TS_MIN) & (tss <= TS_MAX))  # out of range, NaN, or not a number
    bad_vals = np.zeros(len(vals), dtype=bool)
    for i in np.flatnonzero(np.isnan(vals) & ~bad_ts).tolist():
        a, c = int(f2[i]), int(sp1_fast[i])
        if data[a + 1 : c].strip().lower() != b"nan":
            bad_vals[i] = True
    if bad_vals.any() or bad_ts.any():
        for i in np.flatnonzero((bad_vals | bad_ts) & good).tolist():
            if bad_ts[i]:
                text = data[int(sp1_fast[i]) + 1 : int(fe[i])].decode("utf-8", "replace").strip()
                parser.report(int(fl[i]), ts_message(text))
            else:
                parser.report(int(fl[i]), "bad number in sample value")
        good &= ~(bad_vals | bad_ts)
    out = Chunk(sid_arr[good], tss[good], vals[good])

    # the rest line by line (comments, lines without timestamps, odd spacing, malformed lines)
    if len(slow_idx):
        extra = Chunk([], [], [])
        for i in slow_idx.tolist():
            line = data[starts[i] : ends[i]].decode("utf-8", "replace")
            parser.lineno = int(linenos[i]) - 1
            one = parser.feed([line])
            extra.sid.extend(one.sid)
            extra.ts.extend(one.ts)
            extra.value.extend(one.value)
        if extra.sid:
            out = Chunk(
                np.concatenate((out.sid, np.asarray(extra.sid, dtype=np.int64))),
                np.concatenate((out.ts, np.asarray(extra.ts, dtype=np.float64))),
                np.concatenate((out.value, np.asarray(extra.value, dtype=np.float64))),
            )
    parser.lineno = int(first_lineno + len(starts) - 1)
    return out


def _cols(c: Chunk) -> tuple[Any, Any, Any]:
    import numpy as np

    return (
        np.asarray(c.sid, dtype=np.int64),
        np.asarray(c.ts, dtype=np.float64),
        np.asarray(c.value, dtype=np.float64),
    )


def _views(block: Any, win: Any, a: Any, ln: Any) -> Any:
    """A binary_view array of the byte ranges [a, a + ln) of `block`, without copying them: Arrow's view
    layout is the length, then the bytes inline when they fit in 12 (zero-padded), else a 4-byte prefix, the
    buffer index and the offset. `win[i]` is the 4 bytes from offset i of the zero-padded block (little-endian,
    as Arrow's buffers are)."""
    import numpy as np
    import pyarrow as pa

    m = len(a)
    ln = ln.astype(np.int32)
    v = np.empty((m, 4), np.int32)
    v[:, 0] = ln
    w = v.view("<u4")
    w[:, 1] = win[a]  # the prefix, or the first 4 inline bytes
    short = ln <= 12
    long = ~short
    v[long, 2] = 0
    v[long, 3] = a[long]
    if short.any():
        sa, sl = a[short], ln[short].astype(np.int64)
        for k in (0, 1, 2):  # inline bytes past the length are zero
            keep = np.clip(sl - 4 * k, 0, 4) * 8
            mask = ((np.int64(1) << keep) - 1).astype("<u4")
            w[short, k + 1] = (win[sa + 4 * k] if k else w[short, 1]) & mask
    return pa.Array.from_buffers(pa.binary_view(), m, [None, pa.py_buffer(v), block])


def _series_ids(parser: ExpositionParser, data: bytes, series: Any, fs: Any, f2: Any, fl: Any) -> Any:
    """The parser's series id of each fast line (-1 for a malformed series, reported at its line).

    The block's distinct series texts come from Arrow's hash table (dictionary_encode); only a text not seen
    before costs Python: new series are added, and malformed ones reported on each of their lines, in line
    order (series ids are given in order of first appearance, as the line-by-line parser gives them)."""
    import numpy as np
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(series)
    idx = enc.indices.to_numpy()
    keys = enc.dictionary.to_pylist()
    bids = parser.byte_ids
    lut = np.array([bids.get(k, -1) for k in keys], dtype=np.int64)
    missing = np.flatnonzero(lut < 0)
    if len(missing):
        uniq, first = np.unique(idx, return_index=True)
        first_of = dict(zip(uniq.tolist(), first.tolist()))  # noqa: B905
        todo: list[tuple[int, int, str, str | None]] = []  # (line index, entry, text, why malformed)
        bad: list[int] = []
        for j in missing.tolist():
            text = keys[j].decode("utf-8", "replace")
            found = parser.series_id(text)
            if found is not None:
                lut[j] = bids[keys[j]] = found
                continue
            try:
                parse_series(text)
            except ValueError as e:
                bad.append(j)
                todo.extend((int(i), j, text, str(e)) for i in np.flatnonzero(idx == j).tolist())
                continue
            todo.append((first_of[j], j, text, None))
        for i, j, text, why in sorted(todo):
            if why is not None:
                parser.report(int(fl[i]), why)
                continue
            sid = parser.add_series(text, int(fl[i]))
            if sid is not None:
                lut[j] = bids[keys[j]] = sid
        lut[bad] = -1
    return lut[idx]


BLOCK = 4 << 20  # numpy passes over 4 MiB blocks stay in cache: ~4x faster than over a whole 150 MB file


def parse_stream(parser: ExpositionParser, blocks: Iterable[bytes]) -> Iterator[Chunk]:
    """Parse an iterable of byte blocks (any split) as one file, yielding a Chunk per ~BLOCK bytes of whole
    lines: memory stays bounded by the block, whatever the length of the file."""
    parts: list[bytes] = []
    size = 0
    lineno = 1
    for block in blocks:
        parts.append(block)
        size += len(block)
        if size < BLOCK or b"\n" not in block:  # a line longer than BLOCK: gather until it ends
            continue
        data = b"".join(parts)
        cut = data.rfind(b"\n") + 1
        rest = data[cut:]
        yield parse_bytes(parser, data[:cut] if rest else data, lineno)
        lineno = parser.lineno + 1
        parts, size = ([rest], len(rest)) if rest else ([], 0)
    if parts:
        yield parse_bytes(parser, b"".join(parts), lineno)
    parser.finish()


def _to_floats(col: Any) -> Any:
    """Arrow string column of sample values -> float64 numpy array; unparseable values become NaN."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        return pc.cast(col, pa.float64()).to_numpy()
    except pa.ArrowInvalid:
        out = np.empty(len(col))
        for i, s in enumerate(col.to_pylist()):
            try:
                out[i] = float(s)
            except (TypeError, ValueError):
                out[i] = np.nan
        return out
