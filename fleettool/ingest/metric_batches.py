"""Parser chunks -> Arrow record batches in the samples layout, for the streaming insert of a recording.

The mapping is the collectors' (collectors.series.MetricsIngest: one map per distinct series, the gpu-label
issues, the GPU inventory, pod attribution, DCGM's not-supported sentinels dropped); what differs is the rows:
node, uuid, metric and sub are dictionary-encoded over the per-series values (a row costs a 4-byte index, not a
copy of its strings), so a batch is ~22 bytes a row whatever the label set, and DuckDB reads the dictionaries
as its own. `MetricsIngest.table` gives the same rows with plain strings (a test holds the two equal).
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from fleettool.collectors.series import MetricsIngest
from fleettool.formats.openmetrics import Chunk
from fleettool.metrics import DCGM_FP64_BLANK, DCGM_INT32_BLANK

T = TypeVar("T")
_DICT = pa.dictionary(pa.int32(), pa.string())
SAMPLE_BATCH_SCHEMA = pa.schema(
    [
        ("ts", pa.timestamp("us")),
        ("node", _DICT),
        ("gpu", pa.int16()),
        ("uuid", _DICT),
        ("metric", _DICT),
        ("sub", _DICT),
        ("value", pa.float64()),
    ]
)


class BatchIngest(MetricsIngest):
    """MetricsIngest whose rows come out as dictionary-encoded record batches (SAMPLE_BATCH_SCHEMA)."""

    def __init__(self, parser: Any, default_node: str) -> None:
        super().__init__(parser, default_node)
        self._seen = -1  # how many series the per-series arrays below cover
        self._cols: dict[str, Any] = {}
        # samples not stored, per series id, by why (UNMAPPED, BLANK, NONFINITE): counted per chunk in numpy
        self.dropped: dict[str, np.ndarray] = {}

    def _series_arrays(self) -> dict[str, Any]:
        self._extend()  # new series mapped (and their gpu-label issues reported) as MetricsIngest maps them
        sm = self.map
        if self._seen != len(sm.keep):
            self._seen = len(sm.keep)
            self._cols = {
                "keep": np.asarray(sm.keep, dtype=bool),
                "scale": np.asarray(sm.scale, dtype=np.float64),
                "int32": np.asarray(sm.int32, dtype=bool),
                "ceiling": np.asarray(sm.ceiling, dtype=np.float64),
                "pinned": np.asarray(sm.pinned, dtype=np.float64),
                "any_saturating": bool(np.isfinite(np.asarray(sm.ceiling, dtype=np.float64)).any()),
                "gpu": np.asarray([-1 if g is None else g for g in sm.gpu], dtype=np.int16),
                "no_gpu": np.asarray([g is None for g in sm.gpu], dtype=bool),
                "node": pa.array(sm.node, pa.string()),
                "uuid": pa.array(sm.uuid, pa.string()),
                "metric": pa.array(sm.metric, pa.string()),
                "sub": pa.array(sm.sub, pa.string()),
            }
        return self._cols

    def batch(self, chunk: Chunk) -> pa.RecordBatch:
        """The chunk's rows that map to a metric, in the chunk's order."""
        c = self._series_arrays()
        sid = np.asarray(chunk.sid, dtype=np.int64)
        val = np.asarray(chunk.value, dtype=np.float64)
        ts = np.asarray(chunk.ts, dtype=np.float64)
        if len(sid) == 0:
            return _empty()
        mapped = c["keep"][sid]
        int32 = c["int32"][sid]
        blank = val >= DCGM_FP64_BLANK
        blank |= int32 & (val >= DCGM_INT32_BLANK) & (val <= DCGM_INT32_BLANK + 15)
        # an IB counter at its width's maximum stopped counting (saturated): unknown, not a sample; only
        # node_exporter's IB counters have a width, so other files pay nothing for it
        saturated = None
        if c["any_saturating"]:
            saturated = np.isfinite(val) & ((val >= c["ceiling"][sid]) | (val == c["pinned"][sid]))
            blank &= ~saturated
        # the parser checks timestamps: isfinite(ts) is a backstop
        keep = mapped & ~blank & ~np.isnan(val) & np.isfinite(ts)
        if saturated is not None:
            keep &= ~saturated
        s = sid[keep]
        if len(s) != len(sid):  # some not stored: counted per series, whole arrays at a time
            finite = np.isfinite(val)
            self._tally(UNMAPPED, sid[~mapped])
            self._tally(BLANK, sid[mapped & blank & finite])
            if saturated is not None:
                self._tally(SATURATED, sid[mapped & saturated])
            self._tally(NONFINITE, sid[mapped & ~keep & ~finite])
        idx = pa.array(s.astype(np.int32))
        us = np.round(ts[keep] * 1e6).astype(np.int64)
        return pa.record_batch(
            [
                pa.array(us, type=pa.timestamp("us")),
                pa.DictionaryArray.from_arrays(idx, c["node"]),
                pa.array(c["gpu"][s], type=pa.int16(), mask=c["no_gpu"][s]),
                pa.DictionaryArray.from_arrays(idx, c["uuid"]),
                pa.DictionaryArray.from_arrays(idx, c["metric"]),
                pa.DictionaryArray.from_arrays(idx, c["sub"]),
                pa.array(val[keep] * c["scale"][s]),
            ],
            schema=SAMPLE_BATCH_SCHEMA,
        )

    def _tally(self, why: str, sids: np.ndarray) -> None:
        if len(sids) == 0:
            return
        n = np.bincount(sids, minlength=len(self.map.keep))
        acc = self.dropped.get(why)
        if acc is None or len(acc) < len(n):
            grown = np.zeros(len(n), dtype=np.int64)
            if acc is not None:
                grown[: len(acc)] = acc
            acc = self.dropped[why] = grown
        acc[: len(n)] += n

    def dropped_notes(self) -> list[str]:
        """What the file held that was not stored, and why, for its report: samples of series no fleettool
        metric maps (by design: not an issue, --strict passes), DCGM's not-supported sentinels, NaN and infinite
        values."""
        names = self.parser.series.names
        out = []
        acc = self.dropped.get(UNMAPPED)
        if acc is not None:  # a series read for the GPU inventory (its labels) is used, not dropped
            acc = acc.copy()
            for i in np.flatnonzero(acc).tolist():
                if names[i] in READ_FOR_INVENTORY:
                    acc[i] = 0
        if acc is not None and acc.any():
            samples, series = int(acc.sum()), int(np.count_nonzero(acc))
            what = f"{_n(samples, 'sample')} of {series} series not stored: no fleettool metric for {_names(names, acc)}"
            if any(self.map.keep):
                out.append(
                    f"{what}; by design (a scrape carries series fleettool does not use), not an issue "
                    "(--strict passes)"
                )
            else:
                out.append(f"no GPU series fleettool knows: {what}")
        for why, what in (
            (BLANK, "DCGM's not-supported value"),
            (SATURATED, "an IB counter at its width's maximum (saturated: unknown, not 0)"),
            (NONFINITE, "NaN or infinite"),
        ):
            acc = self.dropped.get(why)
            if acc is not None and acc.any():
                samples = int(acc.sum())
                were = "was" if samples == 1 else "were"
                out.append(f"{_n(samples, 'sample')} {were} {what} ({_names(names, acc)}): not stored")
        return out


UNMAPPED, BLANK, NONFINITE, SATURATED = "unmapped", "blank", "nonfinite", "saturated"
# info series whose labels make the GPU inventory (a recording's, the agent's /metrics): read, never a sample
READ_FOR_INVENTORY = frozenset({"fleettool_gpu_info"})
NAMES_SHOWN = 3  # metric names a note lists before "(N more)"


def _n(k: int, word: str) -> str:
    return f"{k} {word}" if k == 1 else f"{k} {word}s"


def _names(names: list[str], counts: np.ndarray) -> str:
    """The distinct names of the series counted, in the order they first appear in the file."""
    seen = list(dict.fromkeys(names[i] for i in np.flatnonzero(counts).tolist()))
    more = len(seen) - NAMES_SHOWN
    return ", ".join(seen[:NAMES_SHOWN]) + (f" ({more} more)" if more > 0 else "")


def _empty() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=SAMPLE_BATCH_SCHEMA)


def prefetched(items: Iterable[T], depth: int = 2) -> Iterator[T]:
    """`items`, produced ahead in a thread of their own (in the caller's context: recording.files' read bounds
    and notes hold there), at most `depth` ahead. The store inserts one batch while the next is parsed: the
    parser holds the GIL, DuckDB's insert does not. An exception of the producer is raised here, in order."""
    q: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: tuple[bool, Any]) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for it in items:
                if not put((True, it)):
                    return
        except BaseException as e:  # noqa: B036 - handed to the consumer, raised there
            put((False, e))
            return
        put((False, None))

    ctx = contextvars.copy_context()
    th = threading.Thread(target=ctx.run, args=(produce,), name="fleettool-parse", daemon=True)
    th.start()
    try:
        while True:
            ok, it = q.get()
            if ok:
                yield it
            elif it is None:
                return
            else:
                raise it
    finally:
        stop.set()
        th.join()
