"""Each GPU's hourly peak of a few metrics (`peak_1h`), kept as the samples that make it are written, so a rule
that compares a point with the GPU's own maximum over days reads one row an hour instead of every raw row.

NvlinkLinksFewer (rules/nvlink.yaml) compares each point of nvlink_links_active with the GPU's maximum over the
7 days before its window: from raw rows that was the `metric = ...` filter over every row of 7 days (73 M on an
8-GPU node), ~170 ms every minute (bench/README.md). It now reads the whole hours from here and only the partial
hours at the edges from raw rows and rollups, with the same result.

A row (hour, node, gpu, metric, vmax) is the maximum of that GPU's raw samples and minute rollups (vmax) of the
metric in [hour, hour + 1 h). Every write path keeps it exact by recomputing the hours it touched from the
samples themselves (never by merging guesses): the agent's and the readers' inserts (telemetry.py), replay's
bulk ingest (bulk.py), retention and `--down` drops, a fleet's materialised copy (attach.py), salvage, and the
schema upgrade to version 9, which fills it from a store's existing samples once.
"""

from __future__ import annotations

import datetime as dt

from fleettool.store.connection import Connection
from fleettool.store.schema import PEAK_METRICS

_NAMES = ", ".join("'" + m.replace("'", "''") + "'" for m in PEAK_METRICS)

# the hours [$lo, $hi) of the peak metrics, from raw samples and rollups (they never overlap)
PEAKS_SELECT = f"""SELECT date_trunc('hour', ts) AS hour, node, gpu, metric, max(value) AS vmax FROM (
      SELECT ts, node, gpu, metric, value FROM samples WHERE metric IN ({_NAMES}) AND ts >= $lo AND ts < $hi
      UNION ALL SELECT minute, node, gpu, metric, vmax FROM samples_1m
      WHERE metric IN ({_NAMES}) AND minute >= $lo AND minute < $hi AND vmax IS NOT NULL)
    GROUP BY ALL"""

# every hour of the store (a schema upgrade, a salvaged or materialised copy)
_ALL = (dt.datetime(1, 1, 1), dt.datetime(9999, 1, 1))


def hour_span(lo: dt.datetime, hi: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """The whole hours that hold [lo, hi]: [floor(lo), floor(hi) + 1 h)."""
    a = lo.replace(minute=0, second=0, microsecond=0)
    b = hi.replace(minute=0, second=0, microsecond=0) + dt.timedelta(hours=1)
    return a, b


class PeakWrites(Connection):
    """The hourly peaks. Mixed into Store; every sample writer calls refresh_peaks with what it touched."""

    def refresh_peaks(self, lo: dt.datetime | None, hi: dt.datetime | None) -> None:
        """Recompute the peaks of the whole hours holding [lo, hi] (naive UTC) from the samples as they are now;
        nothing when lo or hi is None (nothing of a peak metric was touched)."""
        if lo is None or hi is None:
            return
        a, b = hour_span(lo, hi)
        self.con.execute("DELETE FROM peak_1h WHERE hour >= ? AND hour < ?", [a, b]).fetchall()
        self.con.execute(f"INSERT INTO peak_1h {PEAKS_SELECT}", {"lo": a, "hi": b}).fetchall()

    def rebuild_peaks(self) -> None:
        """Every hour's peaks again from the samples (one scan of the store)."""
        self.con.execute("DELETE FROM peak_1h").fetchall()
        self.con.execute(f"INSERT INTO peak_1h {PEAKS_SELECT}", {"lo": _ALL[0], "hi": _ALL[1]}).fetchall()

    def peak_span(self, where: str, params: list[object] | None = None) -> tuple[dt.datetime | None, ...]:
        """The first and last time of the peak metrics' raw samples matching `where` (rows just written)."""
        rows = self.con.execute(
            f"SELECT min(ts), max(ts) FROM samples WHERE metric IN ({_NAMES}) AND ({where})", params or []
        ).fetchall()  # the whole result: one left unfinished blocks the connection's next call (DuckDB 2)
        return (None, None) if not rows else (rows[0][0], rows[0][1])
