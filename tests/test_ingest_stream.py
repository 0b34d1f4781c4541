"""Replay streams a recording: parsed and inserted block by block, one INSERT and one transaction per file.

These hold the streamed ingest to what a whole-file ingest stores (rows, values, issues with file:line), to the
line-by-line reference parser, and to the file's all-or-nothing semantics when the error comes from a block
parsed in DuckDB's or the prefetch thread.
"""

from __future__ import annotations

import gzip
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import fleettool.formats.openmetrics as om
import fleettool.ingest.read_metrics as rm
from fleettool.collectors.series import MetricsIngest
from fleettool.formats.errors import ParseError, ParseIssue
from fleettool.formats.openmetrics_lines import ExpositionParser
from fleettool.ingest.metric_batches import SAMPLE_BATCH_SCHEMA, BatchIngest, prefetched
from fleettool.ingest.report import IngestOptions
from fleettool.ingest.run import ingest
from fleettool.store import Store
from tests.conftest import SCENARIOS

COLS = "ts, node, gpu, uuid, metric, sub, value"


def _rows(store: Store) -> list[tuple[Any, ...]]:
    return sorted(store.rows(f"SELECT {COLS} FROM samples"), key=repr)


def _ingest(path: Path, db: Path, **opts: Any) -> tuple[list[tuple[Any, ...]], Any]:
    with Store(db) as s:
        rep = ingest(s, path, IngestOptions(quiet=True, **opts))[0]
        return _rows(s), rep


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of ~20 kB read 1,111 bytes at a time: a scenario file becomes hundreds of chunks, and lines
    are split across reads and across blocks."""
    monkeypatch.setattr(om, "BLOCK", 20_000)
    monkeypatch.setattr(rm, "READ_SIZE", 1_111)


def _damaged(tmp_path: Path) -> Path:
    """A scenario recording with bad lines spread over it (each in a different block when blocks are small)."""
    raw = gzip.decompress((SCENARIOS / "nvlink-crc-storm" / "dcgm-exporter.om.gz").read_bytes()).decode()
    lines = raw.splitlines()
    bad = {
        700: 'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="gpu-07"} abc 1795996800.000',
        2100: 'DCGM_FI_DEV_GPU_TEMP{gpu="0" 41 1795996800.000',
        5000: 'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="gpu-07"} 41 1e30',
        9001: "not a sample line at all",
    }
    for at, text in bad.items():
        lines[at - 1] = text  # 1-based line numbers, as issues name them
    f = tmp_path / "dcgm.om"
    f.write_text("\n".join(lines) + "\n")
    return f


def test_many_chunks_store_what_one_chunk_stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = _damaged(tmp_path)
    whole_rows, whole = _ingest(f, tmp_path / "whole.duckdb")
    monkeypatch.setattr(om, "BLOCK", 20_000)
    monkeypatch.setattr(rm, "READ_SIZE", 1_111)
    rows, rep = _ingest(f, tmp_path / "chunked.duckdb")
    assert f.stat().st_size / 20_000 > 100  # many blocks
    assert rep.rows == whole.rows == len(rows) == len(whole_rows) > 15_000
    assert rows == whole_rows
    # within a block, fast-path issues come before the line-by-line ones: the same issues, in line order
    assert sorted(map(str, rep.issues)) == sorted(map(str, whole.issues))
    assert sorted((i.line, i.message) for i in rep.issues) == [
        (700, "bad number in sample value"),
        (2100, "unterminated label set"),
        (5000, "timestamp '1e30' is not a unix time in 1973..2100 (seconds or milliseconds)"),
        (9001, "trailing text after timestamp"),
    ]
    assert all(str(i).startswith(f"{f}:") for i in rep.issues)
    assert (rep.t_min, rep.t_max) == (whole.t_min, whole.t_max)


def test_streamed_rows_equal_the_line_by_line_reference(tmp_path: Path, small_blocks: None) -> None:
    """The vectorised parser, the dictionary-encoded batches and the streaming insert against the plain line
    parser (ExpositionParser.feed) and MetricsIngest.table: same rows, same values."""
    f = _damaged(tmp_path)
    ref = ExpositionParser(str(f), millis=False)
    chunk = ref.feed(f.read_text().splitlines())
    table = MetricsIngest(ref, "unknown").table(chunk)
    want = sorted((tuple(r[c] for c in COLS.split(", ")) for r in table.to_pylist()), key=repr)
    rows, rep = _ingest(f, tmp_path / "t.duckdb")
    assert rows == want
    assert sorted(i.line for i in rep.issues) == sorted(i.line for i in ref.issues)


def test_strict_error_in_a_late_block_stores_nothing_of_the_file(tmp_path: Path, small_blocks: None) -> None:
    f = _damaged(tmp_path)
    good = tmp_path / "rec" / "a-good.om"
    good.parent.mkdir()
    good.write_bytes(gzip.decompress((SCENARIOS / "thermal-throttle" / "dcgm-exporter.om.gz").read_bytes()))
    (tmp_path / "rec" / "b-bad.om").write_bytes(f.read_bytes())
    with Store(tmp_path / "t.duckdb") as s:
        reps = ingest(s, tmp_path / "rec", IngestOptions(quiet=True, strict=True))
        by_name = {Path(r.path).name: r for r in reps}
        assert by_name["a-good.om"].rows == 19_360
        bad = by_name["b-bad.om"]
        assert bad.failed and bad.rows == 0
        assert bad.skipped.startswith(f"{tmp_path / 'rec' / 'b-bad.om'}:700: bad number in sample value")
        assert s.scalar("SELECT count(*) FROM samples") == 19_360  # the good file only
        assert s.scalar("SELECT count(*) FROM ingests") == 1


def test_gzip_cut_short_keeps_the_whole_lines_before_the_cut(tmp_path: Path, small_blocks: None) -> None:
    raw = (SCENARIOS / "thermal-throttle" / "dcgm-exporter.om.gz").read_bytes()
    f = tmp_path / "cut.om.gz"
    f.write_bytes(raw[: len(raw) * 2 // 3])
    rows, rep = _ingest(f, tmp_path / "t.duckdb")
    assert rep.status == "partial" and rep.partial[0].startswith("gzip stream cut short after")
    assert 0 < rep.rows == len(rows) < 19_360


def test_batches_equal_metrics_ingest_tables() -> None:
    """Dictionary-encoded batches hold the rows MetricsIngest.table holds: scale, no-GPU and no-UUID series,
    sentinels and NaN dropped, a bad gpu label reported once."""
    text = (
        b'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",Hostname="n1"} 41 1795996800\n'
        b'DCGM_FI_DEV_MEMORY_TEMP{gpu="1",UUID="GPU-b",Hostname="n1"} 9223372036854775794 1795996800\n'
        b'DCGM_FI_DEV_POWER_USAGE{gpu="x9",Hostname="n1"} 512.25 1795996801\n'
        b'DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL{gpu="2",link="3"} 7 1795996802\n'
        b'DCGM_FI_DEV_GPU_UTIL{gpu="3",UUID="GPU-d"} NaN 1795996803\n'
        b'DCGM_FI_DEV_FB_USED{gpu="3",UUID="GPU-d"} 1024 1795996803\n'
        b'some_other_metric{gpu="0"} 1 1795996803\n'
    )
    p1, p2 = ExpositionParser("a"), ExpositionParser("b")
    want = MetricsIngest(p1, "dflt").table(om.parse_bytes(p1, text)).to_pylist()
    got = pa.Table.from_batches([BatchIngest(p2, "dflt").batch(om.parse_bytes(p2, text))]).to_pylist()
    assert got == want and len(got) == 4
    assert [(i.line, i.message[:20]) for i in p2.issues] == [(i.line, i.message[:20]) for i in p1.issues]
    assert {r["uuid"] for r in got} == {"GPU-a", None, "GPU-d"} and {r["gpu"] for r in got} == {0, None, 2, 3}


def test_a_stream_is_one_insert_and_raises_its_own_error(tmp_path: Path) -> None:
    p = ExpositionParser("x")
    text = b"".join(
        b'DCGM_FI_DEV_GPU_TEMP{gpu="%d",Hostname="n"} %d %d\n' % (g, 40 + t % 9, 1795996800 + t)
        for g in range(4)
        for t in range(3000)
    )
    ing = BatchIngest(p, "n")
    pieces = [text[i : i + 5000] for i in range(0, len(text), 5000)]
    batches = [ing.batch(c) for c in om.parse_stream(p, pieces)]
    assert len(batches) == 1  # BLOCK is 4 MiB: one chunk

    def failing() -> Any:
        yield batches[0].slice(0, 100)
        raise ParseError(ParseIssue("f.om", 42, "boom"))

    with Store(tmp_path / "t.duckdb") as s:
        assert s.write_sample_batches(SAMPLE_BATCH_SCHEMA, iter(batches)) == 12_000
        s.begin()
        with pytest.raises(ParseError, match=r"^f\.om:42: boom$"):
            s.write_sample_batches(SAMPLE_BATCH_SCHEMA, prefetched(failing()))
        s.rollback()
        assert s.scalar("SELECT count(*) FROM samples") == 12_000
        assert s.scalar("SELECT round(avg(value), 6) FROM samples") == pytest.approx(
            sum(40 + t % 9 for t in range(3000)) / 3000, abs=1e-6
        )


def test_prefetched_keeps_order_and_stops_its_producer() -> None:
    made: list[int] = []

    def produce() -> Any:
        for i in range(1000):
            made.append(i)
            yield i

    it = prefetched(produce(), depth=2)
    assert [next(it) for _ in range(5)] == [0, 1, 2, 3, 4]
    it.close()  # the consumer stops: the producer must not run on to the end
    assert len(made) < 20
    assert list(prefetched(iter(range(50)))) == list(range(50))
    assert math.isfinite(sum(prefetched(iter([1.0, 2.0]))))


def test_views_are_valid_arrow_and_hold_the_ranges() -> None:
    """The zero-copy views over a block: short ranges inline (zero-padded, as Arrow requires), long ones by
    offset, each holding exactly its bytes."""
    import numpy as np

    data = b'm{a="1"} 1 1795996800\nmetric_with_a_long_name{x="y y"} 123456789012.5 1795996800.125\nq 7\n'
    n = len(data)
    pad = np.zeros(n + 16, np.uint8)
    pad[:n] = np.frombuffer(data, np.uint8)
    win = np.ndarray((n + 13,), dtype="<u4", buffer=pad, strides=(1,))
    starts = np.array([0, 3, 9, 22, 22, 56, 56, n - 3, n - 1], dtype=np.int64)
    lens = np.array([8, 12, 1, 34, 13, 15, 12, 1, 1], dtype=np.int64)
    arr = om._views(pa.py_buffer(data), win, starts, lens)
    arr.validate(full=True)
    assert arr.to_pylist() == [data[a : a + k] for a, k in zip(starts.tolist(), lens.tolist(), strict=True)]


def test_digest_taken_alongside_the_reader_is_the_files_own(tmp_path: Path, monkeypatch: Any) -> None:
    """A large file going into an empty store is hashed in a thread while it is parsed: the digest recorded is
    the file's sha256 all the same, and a second replay of it is seen as already ingested."""
    import hashlib

    import fleettool.ingest.run as run

    monkeypatch.setattr(run, "DIGEST_ALONGSIDE", 0)
    src = tmp_path / "d.om"
    src.write_bytes(gzip.decompress((SCENARIOS / "pcie-width-degraded" / "dcgm-exporter.om.gz").read_bytes()))
    with Store(tmp_path / "s.duckdb") as s:
        first = ingest(s, src, IngestOptions(quiet=True))[0]
        assert first.rows > 0 and not first.skipped
        assert s.scalar("SELECT digest FROM ingests") == hashlib.sha256(src.read_bytes()).hexdigest()
        again = ingest(s, src, IngestOptions(quiet=True))[0]
        assert again.skipped == "already ingested (same content)" and again.rows == 0
