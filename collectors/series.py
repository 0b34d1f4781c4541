"""OpenMetrics / Prometheus text -> samples: dcgm-exporter's DCGM_FI_* names and fleettool's own names.

The one series mapping of the house: the dcgm-exporter collector maps its scrapes through it, and replay maps
a recorded exposition (a saved scrape, a fleettool recording) through it, so both store the same rows. It
belongs to the collectors (they turn sources' bytes into records); the recording package below does not
import it.

Each distinct series is mapped once (collectors.series_map: name + labels -> metric, node, gpu, uuid, sub,
scale); rows are then built with Arrow `take` over the per-series arrays, and DCGM's not-supported sentinels are
dropped. The live scrape takes the same map without Arrow (series_map.scrape_samples).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from fleettool.collectors.series_map import (
    GPU_INDEX_MAX,
    HOST_LABELS,
    UUID_LABELS,
    SeriesMap,
    SeriesMapper,
    gpu_index,
    map_series,
)
from fleettool.formats.openmetrics import Chunk, ExpositionParser, parse_stream
from fleettool.metrics import DCGM_FP64_BLANK, DCGM_INT32_BLANK
from fleettool.recording.files import iter_blocks

__all__ = [
    "GPU_INDEX_MAX",
    "HOST_LABELS",
    "UUID_LABELS",
    "MetricsIngest",
    "SeriesMap",
    "gpu_index",
    "iter_metric_tables",
    "map_series",
]


class MetricsIngest(SeriesMapper):
    """Turns parser chunks into Arrow tables in the samples layout."""

    def table(self, chunk: Chunk) -> pa.Table:
        import pyarrow.compute as pc  # here: the streaming ingest (ingest.metric_batches) never loads it

        self._extend()
        sm = self.map
        sid = np.asarray(chunk.sid, dtype=np.int64)
        val = np.asarray(chunk.value, dtype=np.float64)
        ts = np.asarray(chunk.ts, dtype=np.float64)
        if len(sid) == 0:
            return _empty()
        keep = np.asarray(sm.keep, dtype=bool)[sid]
        scale = np.asarray(sm.scale, dtype=np.float64)[sid]
        int32 = np.asarray(sm.int32, dtype=bool)[sid]
        blank = (val >= DCGM_FP64_BLANK) | (
            int32 & (val >= DCGM_INT32_BLANK) & (val <= DCGM_INT32_BLANK + 15)
        )
        keep &= (
            ~blank & ~np.isnan(val) & np.isfinite(ts)
        )  # the parser checks timestamps; this is the backstop
        idx = pa.array(sid[keep])
        us = np.round(ts[keep] * 1e6).astype(np.int64)
        return pa.table(
            {
                "ts": pa.array(us, type=pa.timestamp("us")),
                "node": pc.take(pa.array(sm.node, pa.string()), idx),
                "gpu": pc.take(pa.array(sm.gpu, pa.int16()), idx),
                "uuid": pc.take(pa.array(sm.uuid, pa.string()), idx),
                "metric": pc.take(pa.array(sm.metric, pa.string()), idx),
                "sub": pc.take(pa.array(sm.sub, pa.string()), idx),
                "value": pa.array(val[keep] * scale[keep]),
            }
        )


def _empty() -> pa.Table:
    return pa.table(
        {
            "ts": pa.array([], pa.timestamp("us")),
            "node": pa.array([], pa.string()),
            "gpu": pa.array([], pa.int16()),
            "uuid": pa.array([], pa.string()),
            "metric": pa.array([], pa.string()),
            "sub": pa.array([], pa.string()),
            "value": pa.array([], pa.float64()),
        }
    )


def iter_metric_tables(
    path: Path, *, default_node: str, millis: bool | None, strict: bool, default_ts: float | None = None
) -> tuple[ExpositionParser, MetricsIngest, object]:
    """Returns (parser, ingest, generator of Arrow tables) for one file."""
    parser = ExpositionParser(str(path), millis=millis, strict=strict, default_ts=default_ts)
    ing = MetricsIngest(parser, default_node)

    def gen():  # type: ignore[no-untyped-def]
        for chunk in parse_stream(parser, iter_blocks(path)):
            yield ing.table(chunk)

    return parser, ing, gen()
