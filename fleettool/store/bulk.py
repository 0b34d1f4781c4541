"""Bulk writes of the store: a stream of sample batches into `samples` in one INSERT, and a bound on DuckDB's
memory while a long recording goes in. `Store` inherits them.

One INSERT per stream, not one per batch: DuckDB pulls the batches from the producer (an Arrow
RecordBatchReader over a Python generator) while it writes the ones it has, so parsing the next block and
inserting the last one overlap on two cores, and the per-statement cost (~10-30 ms for a statement of 20 k to
100 k rows) is paid once per file. The producer runs in DuckDB's threads: an exception it raises (a strict
parse error, an input over its bound) is raised again here as itself, not as DuckDB's wrapper of it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from fleettool.store.peaks import PeakWrites

if TYPE_CHECKING:
    import pyarrow as pa


class BulkWrites(PeakWrites):
    """Writes of whole streams. Mixed into Store."""

    def write_sample_batches(self, schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> int:
        """Insert every batch (columns ts, node, gpu, uuid, metric, sub, value; strings plain or dictionary
        encoded) in one statement, inside the caller's transaction. Returns the rows inserted."""
        import duckdb
        import pyarrow as pa  # here, not at import: readers never load it

        raised: list[BaseException] = []

        def guarded() -> Iterator[pa.RecordBatch]:
            try:
                yield from batches
            except BaseException as e:  # noqa: B036 - kept to be raised again in the caller's thread
                raised.append(e)
                raise

        reader = pa.RecordBatchReader.from_batches(schema, guarded())
        mark = int(self.scalar("SELECT coalesce(max(rowid), -1) FROM samples"))  # rows after it are these
        self.con.register("_incoming_sample_stream", reader)
        try:
            rows = self.con.execute(
                "INSERT INTO samples (ts, node, gpu, uuid, metric, sub, value) "
                "SELECT ts, node, gpu, uuid, metric, sub, value FROM _incoming_sample_stream"
            ).fetchall()
        except (duckdb.Error, pa.ArrowException):
            if raised:
                raise raised[0] from None
            raise
        finally:
            with contextlib.suppress(Exception):  # after a failed statement the transaction is aborted
                self.con.unregister("_incoming_sample_stream")
        if raised:  # the stream ended on an error DuckDB did not pass on
            raise raised[0]
        self.refresh_peaks(
            *self.peak_span("rowid > ?", [mark])
        )  # the hours these rows touched (store/peaks.py)
        return int(rows[0][0]) if rows else 0

    def events_mark(self) -> int:
        """The highest rowid of `events` now (-1 when empty): rows written after it, in this transaction or
        later, have higher ones (DuckDB numbers a transaction's own rows above every stored row)."""
        return int(self.scalar("SELECT coalesce(max(rowid), -1) FROM events"))

    def fill_event_identity(
        self, after: int, known: Iterable[tuple[str, str, int | None, str | None]]
    ) -> None:
        """Give the events written after rowid `after` that lack a GPU index or UUID those of their (node, PCI id)
        in `known` (node, pci_bus_id, gpu, uuid): what a file's own announcement lines tell about its events,
        applied once the whole file is read. An event's own index or UUID is kept."""
        rows = list(known)
        if not rows:
            return
        self.con.execute(
            """UPDATE events SET gpu = coalesce(events.gpu, k.gpu), uuid = coalesce(events.uuid, k.uuid)
               FROM (SELECT unnest($1) AS node, unnest($2) AS pci_bus_id, unnest($3) AS gpu,
                            unnest($4) AS uuid) k
               WHERE events.rowid > $5 AND events.node = k.node AND events.pci_bus_id = k.pci_bus_id
                 AND (events.gpu IS NULL OR events.uuid IS NULL)""",
            [[r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows], after],
        ).fetchall()

    @contextlib.contextmanager
    def memory_bound(self, limit: str) -> Iterator[None]:
        """DuckDB's buffer pool held to `limit` (e.g. '160MB') for the block, then set back. Blocks a
        transaction has already written to the file are evicted past it, so a long ingest stays flat."""
        old = self.scalar("SELECT current_setting('memory_limit')")
        self.con.execute(f"SET memory_limit = '{_size(limit)}'")
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                self.con.execute("RESET memory_limit")  # the default, exactly (a shown size is rounded)
                if self.scalar("SELECT current_setting('memory_limit')") != old:
                    self.con.execute(f"SET memory_limit = '{_size(str(old))}'")


def _size(text: str) -> str:
    """A size for SET memory_limit, checked to be a number and a unit (never spliced in unchecked)."""
    t = text.strip().replace(" ", "")
    num = t.rstrip("KMGTiBb")
    unit = t[len(num) :]
    float(num)  # ValueError: not a size
    if unit.upper() not in ("", "B", "KB", "MB", "GB", "TB", "KIB", "MIB", "GIB", "TIB"):
        raise ValueError(f"not a memory size: {text!r}")
    return t
