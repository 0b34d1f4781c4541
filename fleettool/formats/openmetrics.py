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
from typing import Any, BinaryIO

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

    n = len(data)
    if n == 0:
        return Chunk([], [], [])
    if n >= _VIEW_MAX:  # Arrow views address a buffer with 32-bit offsets: halve at a line end
        cut = data.rfind(b"\n", 0, n // 2) + 1 or data.find(b"\n", n // 2) + 1
        if 0 < cut < n:
            left = parse_bytes(parser, data[:cut], first_lineno)
            right = parse_bytes(parser, data[cut:], parser.lineno + 1)
            return Chunk(*(np.concatenate((x, y)) for x, y in zip(_cols(left), _cols(right), strict=True)))
    pad = np.zeros(n + _PAD, np.uint8)
    pad[:n] = np.frombuffer(data, np.uint8)
    return _parse_padded(parser, pad, n, first_lineno)


_PAD = 16  # bytes addressable past a block's end (4-byte windows read from every offset)


def _parse_padded(parser: ExpositionParser, pad: Any, n: int, first_lineno: int) -> Chunk:
    """parse_bytes over the first `n` bytes of the uint8 array `pad` (at least n + _PAD long; what lies past n
    is never read as text). The Arrow views of the block point into `pad`: nothing returned keeps them."""
    import numpy as np
    import pyarrow as pa

    if n >= _VIEW_MAX:
        return parse_bytes(parser, pad[:n].tobytes(), first_lineno)
    buf = pad[:n]
    win = np.ndarray((n + 13,), dtype="<u4", buffer=pad, strides=(1,))  # 4 bytes from every offset
    block = pa.py_buffer(pad)  # Arrow views of the block point into it (no copy)
    # the lines that hold something, from whole-block boolean passes: a run of blank lines costs no array entry
    # and no Python (a gzip of newlines expands 1000-fold); a line is a maximal run of bytes other than '\n'
    is_nl = buf == 10
    n_lines = int(np.count_nonzero(is_nl)) + int(buf[-1] != 10)  # no last line after a trailing newline
    text = ~is_nl
    starts = np.flatnonzero(text & np.concatenate(([True], is_nl[:-1])))  # a line's first byte
    ends = np.flatnonzero(text & np.concatenate((is_nl[1:], [True]))) + 1  # one past its last byte
    held = ends - starts
    li = starts - (np.cumsum(held) - held)  # the line's index in the block: the newlines before its start
    ends = ends - (buf[ends - 1] == 13)  # strip a trailing carriage return
    # every byte <= ' ' but newlines (spaces, tabs, controls) in one pass, one pass for '#': not a single pass
    # over every byte <= '#', which takes the labels' quotes too (~3x the positions to gather)
    cand = np.flatnonzero((buf <= 32) & text)
    cb = buf[cand]
    # lines of whitespace (str.split's: the line-by-line parser skips them) and comments are sorted out here in
    # whole arrays too, never a line of Python each
    ws = cand[(cb >= 28) | ((cb >= 9) & (cb <= 13))]
    if len(ws) and len(li):
        blank = np.searchsorted(ws, ends) - np.searchsorted(ws, starts) == ends - starts
        if blank.any():
            li, starts, ends = li[~blank], starts[~blank], ends[~blank]
    comment = buf[starts] == 35
    if comment.any():
        _comments(parser, block, win, starts[comment], ends[comment], first_lineno + li[comment])
        li, starts, ends = li[~comment], starts[~comment], ends[~comment]
    linenos = first_lineno + li
    # the last two spaces of each line, from the positions of every space in the block
    spaces = cand[cb == 32]
    k = np.searchsorted(spaces, ends)
    have2 = k >= 2
    sp1 = np.where(have2, spaces[np.maximum(k - 1, 0)] if len(spaces) else 0, -1)
    sp2 = np.where(have2, spaces[np.maximum(k - 2, 0)] if len(spaces) else 0, -1)
    before = buf[np.maximum(sp2 - 1, 0)]
    fast = (
        have2 & (sp2 > starts) & (before == 125) & (sp1 > sp2 + 1) & (sp1 < ends - 1) & (ends - sp2 <= _TAIL)
    )
    # a '#' inside a line means an OpenMetrics exemplar: leave those lines to the slow path
    hashes = np.flatnonzero(buf == 35)
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
        series = _views(block, win, fs, f2 - fs)
        sid_arr = _series_ids(parser, series, fl)
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
        if pad[a + 1 : c].tobytes().strip().lower() != b"nan":
            bad_vals[i] = True
    if bad_vals.any() or bad_ts.any():
        for i in np.flatnonzero((bad_vals | bad_ts) & good).tolist():
            if bad_ts[i]:
                text = pad[int(sp1_fast[i]) + 1 : int(fe[i])].tobytes().decode("utf-8", "replace").strip()
                parser.report(int(fl[i]), ts_message(text))
            else:
                parser.report(int(fl[i]), "bad number in sample value")
        good &= ~(bad_vals | bad_ts)
    out = Chunk(sid_arr[good], tss[good], vals[good])

    # the rest line by line (comments, lines without timestamps, odd spacing, malformed lines)
    if len(slow_idx):
        extra = Chunk([], [], [])
        for i in slow_idx.tolist():
            line = pad[starts[i] : ends[i]].tobytes().decode("utf-8", "replace")
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
    parser.lineno = int(first_lineno + n_lines - 1)
    return out


def _comments(parser: ExpositionParser, block: Any, win: Any, starts: Any, ends: Any, linenos: Any) -> None:
    """A block's comment lines, as the line-by-line parser takes them (`# EOF` seen, the last TYPE and HELP of
    each name kept), for the cost of its distinct texts: a text repeated a million times is fed once, at its
    last line, and the texts in the order of those last lines (so the last TYPE or HELP of a name wins)."""
    import numpy as np

    enc = _call("dictionary_encode", _views(block, win, starts, ends - starts))
    idx = enc.indices.to_numpy()
    keys = enc.dictionary.to_pylist()
    rev_first = np.unique(idx[::-1], return_index=True)[1]  # each text's last line, counted from the end
    last = len(idx) - 1 - rev_first
    for j in np.argsort(last).tolist():
        parser.lineno = int(linenos[last[j]]) - 1
        parser.feed([keys[j].decode("utf-8", "replace")])


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
    buffer index and the offset. `win[i]` is the 4 bytes from offset i of the block (little-endian, as Arrow's
    buffers are; the block addressable 12 bytes past its end, whatever they hold: inline bytes past a length
    are masked off). A column all long (series texts) or all short (most values) takes no boolean indexing."""
    import numpy as np
    import pyarrow as pa

    m = len(a)
    ln = ln.astype(np.int32)
    v = np.zeros((m, 4), np.int32)
    v[:, 0] = ln
    w = v.view("<u4")
    short = ln <= 12
    n_short = int(np.count_nonzero(short))
    if n_short:
        masks = np.array([0, 0xFF, 0xFFFF, 0xFFFFFF, 0xFFFFFFFF], dtype="<u4")
        for k in (0, 1, 2):  # the inline bytes, those past the length zero
            w[:, k + 1] = win[a + 4 * k] & masks[np.clip(ln - 4 * k, 0, 4)]
    if n_short < m:
        if n_short:
            long = ~short
            v[long, 2] = 0
            v[long, 3] = a[long]
            w[long, 1] = win[a[long]]
        else:
            w[:, 1] = win[a]  # the prefix
            v[:, 3] = a
    return pa.Array.from_buffers(pa.binary_view(), m, [None, pa.py_buffer(v), block])


def _series_ids(parser: ExpositionParser, series: Any, fl: Any) -> Any:
    """The parser's series id of each fast line (-1 for a malformed series, reported at its line).

    The block's distinct series texts come from Arrow's hash table (dictionary_encode); only a text not seen
    before costs Python: new series are added, and malformed ones reported on each of their lines, in line
    order (series ids are given in order of first appearance, as the line-by-line parser gives them)."""
    import numpy as np

    enc = _call("dictionary_encode", series)
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


def parse_stream(parser: ExpositionParser, blocks: Iterable[bytes] | BinaryIO) -> Iterator[Chunk]:
    """Parse an iterable of byte blocks (any split), or a binary file read to its end, as one file, yielding a
    Chunk per ~BLOCK bytes of whole lines: memory stays bounded by the block, whatever the length of the file.

    The bytes gather in one reused array (a file is read straight into it), parsed in place up to the last
    line end, the unfinished line then moved to the front: one copy of the text, not a join, a slice, a pad."""
    import numpy as np

    buf = np.zeros(2 * BLOCK + _PAD, np.uint8)
    size = 0
    lineno = 1
    readinto = getattr(blocks, "readinto", None)
    it: Iterator[bytes] = iter(()) if readinto is not None else iter(blocks)  # type: ignore[arg-type]
    while True:
        if readinto is not None:
            if size + READ + _PAD > len(buf):
                buf = _grown(buf, size, size + READ + _PAD)
            m = readinto(buf[size : size + READ])
            if not m:
                break
        else:
            block = next(it, None)
            if block is None:
                break
            m = len(block)
            if size + m + _PAD > len(buf):
                buf = _grown(buf, size, size + m + _PAD)
            buf[size : size + m] = np.frombuffer(block, np.uint8)
        size += m
        if size < BLOCK:
            continue
        j = _last_newline(buf, size - m, size)
        if j < 0:  # a line longer than BLOCK: gather until it ends
            continue
        cut = j + 1
        out = _parse_padded(parser, buf, cut, lineno)
        lineno = parser.lineno + 1
        rest = size - cut
        if rest:
            buf[:rest] = buf[cut:size].copy()
        size = rest
        yield out
    if size:
        yield _parse_padded(parser, buf, size, lineno)
    parser.finish()


READ = 1 << 20  # bytes per read of a file handed to parse_stream


def _grown(buf: Any, size: int, need: int) -> Any:
    import numpy as np

    out = np.zeros(max(2 * len(buf), need), np.uint8)
    out[:size] = buf[:size]
    return out


def _last_newline(buf: Any, lo: int, hi: int) -> int:
    """The index of the last newline in buf[lo:hi], or -1: looked for in growing windows from the end."""
    end = hi
    step = 1 << 16
    while end > lo:
        a = max(lo, end - step)
        j = buf[a:end].tobytes().rfind(b"\n")
        if j >= 0:
            return a + j
        end = a
        step *= 4
    return -1


def _to_floats(col: Any) -> Any:
    """Arrow string column of sample values -> float64 numpy array; unparseable values become NaN."""
    import numpy as np
    import pyarrow as pa

    try:
        return _call("cast", col, to=pa.float64()).to_numpy()
    except pa.ArrowInvalid:
        out = np.empty(len(col))
        for i, s in enumerate(col.to_pylist()):
            try:
                out[i] = float(s)
            except (TypeError, ValueError):
                out[i] = np.nan
        return out


def _call(fn: str, arr: Any, to: Any = None) -> Any:
    """Arrow's compute function `fn` ("cast" to `to`, safe, or "dictionary_encode") on `arr`, through
    pyarrow._compute: importing pyarrow.compute, which builds a Python wrapper of every function, costs ~25 ms
    of each command's start-up (pyarrow.compute where the private module is not there)."""
    try:
        from pyarrow._compute import CastOptions, call_function
    except ImportError:  # pragma: no cover - a pyarrow without the module
        import pyarrow.compute as pc

        return pc.cast(arr, to) if fn == "cast" else pc.dictionary_encode(arr)
    return call_function(fn, [arr], CastOptions.safe(to) if fn == "cast" else None)
