"""Writing one segment: Arrow record batches streamed into a Parquet file, visible whole or not at all, its row
count read back from the written file before it takes its final name.

Memory: one row group (ROW_GROUP rows) is buffered at a time, and object storage gets a client with background
writes off (location.py), so a segment of any size is written in a few MiB.

Safety: the file is written under a hidden temporary name (`.tmp-<uuid>.parquet`, skipped by readers) in its
partition, checked, then renamed over the final name (a directory: atomic on POSIX and NFS; object storage: a
server-side copy, which makes the final object appear whole). A failure removes the temporary file; on object
storage it also aborts the temporary key's unfinished multipart uploads (pyarrow's stream cannot abort one, and
a stream that fails mid-upload leaves it open). An abort that itself fails (S3 frozen or unreachable) raises
UploadLeftOpen naming the key, which the export remembers and aborts at its next run."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from fleettool.fleet.location import Location

ROW_GROUP = 16384  # rows are sorted by metric: a row group holds about one metric, so readers skip the others


class UploadLeftOpen(OSError):
    """A failed upload whose multipart upload could not be aborted: `key` ("bucket/key") is to abort later."""

    def __init__(self, msg: str, key: str) -> None:
        super().__init__(msg)
        self.key = key


def is_local(loc: Location) -> bool:
    return isinstance(loc.fs, pafs.LocalFileSystem)


def abort_key(loc: Location, key: str) -> None:
    """Abort the unfinished multipart uploads of key and delete the object if the stream completed it."""
    if not is_local(loc):
        from fleettool.fleet.s3multipart import abort_uploads

        abort_uploads(key)
    with contextlib.suppress(FileNotFoundError):
        loc.fs.delete_file(key)


def read_back_rows(loc: Location, path: str) -> int:
    """The row count of a written Parquet file, from its footer."""
    with loc.fs.open_input_file(path) as f:
        return int(pq.ParquetFile(f).metadata.num_rows)


def _stream(out: pa.NativeFile, batches: Iterable[pa.RecordBatch]) -> int:
    writer: pq.ParquetWriter | None = None
    buf: list[pa.RecordBatch] = []
    held = rows = 0

    def flush() -> None:
        nonlocal held
        assert writer is not None
        writer.write_table(pa.Table.from_batches(buf).combine_chunks(), row_group_size=ROW_GROUP)
        buf.clear()
        held = 0

    try:
        for b in batches:
            if b.num_rows == 0:
                continue
            if writer is None:
                writer = pq.ParquetWriter(out, b.schema, compression="zstd", compression_level=6)
            while b.num_rows:
                take = b.slice(0, ROW_GROUP - held)
                buf.append(take)
                held += take.num_rows
                rows += take.num_rows
                b = b.slice(take.num_rows)
                if held == ROW_GROUP:
                    flush()
    except BaseException:
        if writer is not None:  # closed here, not by the garbage collector on a closed stream
            with contextlib.suppress(Exception):
                writer.close()
        raise
    if writer is None:
        return 0
    if buf:
        flush()
    writer.close()
    return rows


def write_segment(loc: Location, path: str, batches: Iterable[pa.RecordBatch]) -> tuple[int, int]:
    """Stream batches into the Parquet file at path; (rows, bytes) as read back. Nothing is written for no
    rows (0, 0). OSError (or UploadLeftOpen) when it failed: then nothing new is visible under path."""
    parent = path.rsplit("/", 1)[0]
    loc.fs.create_dir(parent, recursive=True)
    tmp = f"{parent}/.tmp-{uuid.uuid4().hex}.parquet"
    try:
        with loc.fs.open_output_stream(tmp) as out:
            rows = _stream(out, batches)
        got = read_back_rows(loc, tmp) if rows else 0
        if got != rows:
            raise OSError(f"{path}: {rows} rows written but {got} read back")
    except BaseException as e:
        try:
            abort_key(loc, tmp)
        except OSError as again:
            raise UploadLeftOpen(f"{e}; and its upload could not be aborted: {again}", tmp) from e
        raise
    if rows == 0:
        with contextlib.suppress(OSError):
            loc.fs.delete_file(tmp)
        return 0, 0
    loc.fs.move(tmp, path)
    return rows, int(loc.fs.get_file_info(path).size or 0)
