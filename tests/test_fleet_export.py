"""The fleet export at the agent's volume and limits, late rows, node names, and S3 uploads that fail: real
DuckDB stores, a real directory, moto's S3 server on loopback (the fixture of tests/test_fleet.py)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from fleettool.agent.config import AgentConfig
from fleettool.fleet import segments
from fleettool.fleet.location import open_location
from fleettool.fleet.read import open_fleet
from fleettool.fleet.s3multipart import abort_uploads, list_uploads
from fleettool.fleet.write import write_segment
from fleettool.store import Store
from tests.conftest import run_cli
from tests.test_fleet import s3  # noqa: F401  (the moto server fixture)

H0 = 1_795_996_800  # 2026-12-01 00:00 UTC: hours below count from midnight
T0 = H0 + 1234


def _samples(node: str, t0: float, seconds: int, *, gpus: int = 8, metrics: int = 1) -> pa.Table:
    """gpus x metrics series at 1 Hz for `seconds` from t0, in time order (as the agent appends them)."""
    ts = np.repeat(np.arange(seconds, dtype=np.int64) + int(t0), gpus * metrics) * 1_000_000
    per_tick = gpus * metrics
    gpu = np.tile(np.repeat(np.arange(gpus, dtype=np.int16), metrics), seconds)
    met = np.tile(np.array([f"m{i:02d}" for i in range(metrics)] * gpus), seconds)
    n = seconds * per_tick
    return pa.table(
        {
            "ts": pa.array(ts, pa.timestamp("us")),
            "node": pa.array([node] * n),
            "gpu": pa.array(gpu),
            "uuid": pa.array(np.char.add("GPU-", gpu.astype(str))),
            "metric": pa.array(met),
            "sub": pa.array([""] * n),
            "value": pa.array(np.arange(n, dtype=np.float64)),
        }
    )


def test_a_day_of_8_gpus_exports_under_the_agents_memory_limit(tmp_path: Path) -> None:
    # one day of 8 GPUs x 12 metrics at 1 Hz (8.3 M rows), exported by a store limited as the agent limits it:
    # every hour, then the day compacted, within DuckDB's 16 MB
    db = tmp_path / "day.duckdb"
    with Store(db) as st:
        for h in range(24):
            st.write_samples(_samples("gpu-01", H0 + h * 3600, 3600, metrics=12))
        total = st.scalar("SELECT count(*) FROM samples")
    assert total == 24 * 3600 * 8 * 12
    cfg = AgentConfig  # its defaults: what the agent sets on every flush
    loc = open_location(str(tmp_path / "fleet"))
    with Store(db) as st:
        st.limit_resources(cfg.duckdb_memory, cfg.duckdb_threads)
        assert st.scalar("SELECT current_setting('memory_limit')") in ("15.2 MiB", "16.0 MB", "15.2MiB")
        hourly = segments.export(st, loc, "gpu-01", H0 + 12 * 3600)  # mid-day: the first 12 hours, hourly
        daily = segments.export(st, loc, "gpu-01", H0 + 25 * 3600)  # the day is over: one daily segment
    assert hourly.rows == 12 * 3600 * 96 and hourly.segments == 12
    assert daily.rows == total and daily.by_table["samples"] == total
    files = list((tmp_path / "fleet" / "samples").rglob("*.parquet"))
    assert len(files) == 1 and files[0].name.endswith("-day.parquet")
    with open_fleet(loc) as fl:
        assert fl.scalar("SELECT count(*) FROM samples") == total
        # sorted by metric within the node: a row group holds one metric (readers skip the others)
        assert fl.scalar("SELECT count(DISTINCT metric) FROM samples") == 12


def test_late_rows_are_exported(tmp_path: Path) -> None:
    """A replay of an older recording into an exporting store, and a wall clock stepped back: rows that land
    in hours already exported reach the fleet at the next export."""
    db = tmp_path / "a.duckdb"
    loc = open_location(str(tmp_path / "fleet"))
    with Store(db) as st:
        st.write_samples(_samples("gpu-01", H0 + 2 * 3600, 2 * 3600, gpus=1, metrics=1))  # hours 2 and 3
        first = segments.export(st, loc, "gpu-01", H0 + 4 * 3600)
        assert first.rows == 7200
        # the clock stepped back an hour (half an hour of rows in hour 3), and an older recording replayed
        st.write_samples(_samples("gpu-01", H0 + 3 * 3600 + 1800, 60, gpus=1, metrics=2))
        st.write_samples(_samples("gpu-01", H0 + 0 * 3600, 3600, gpus=1, metrics=1))
        total = st.scalar("SELECT count(*) FROM samples")
        second = segments.export(st, loc, "gpu-01", H0 + 4 * 3600)
    # hour 0 is new; hour 3 is written again, whole (3,600 + 120 rows); hour 2 is left alone
    assert (second.rows, second.segments) == (3600 + 3720, 2)
    assert second.late == 1
    with open_fleet(loc) as fl:
        assert fl.scalar("SELECT count(*) FROM samples") == total == 7200 + 120 + 3600
        assert fl.scalar("SELECT count(*) FROM (SELECT DISTINCT * FROM samples)") == total
    # the day is over by the wall clock: the CLI compacts it, and says how many rows the daily segment holds
    r = run_cli("export", "--db", str(db), "--to", str(tmp_path / "fleet"), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["rows"] == total
    again = json.loads(run_cli("export", "--db", str(db), "--to", str(tmp_path / "fleet"), "--json").stdout)
    assert again["rows"] == 0  # nothing new
    with open_fleet(loc) as fl:
        assert fl.scalar("SELECT count(*) FROM samples") == total


def test_node_names_that_differ_in_unusual_characters_keep_their_own_segments(tmp_path: Path) -> None:
    db = tmp_path / "a.duckdb"
    names = ["gpu 1", "gpu_1", "gpu/1"]
    with Store(db) as st:
        for i, node in enumerate(names):
            st.write_samples(_samples(node, H0 + 3600, 360 + i, gpus=1))
    r = run_cli("export", "--db", str(db), "--to", str(tmp_path / "fleet"), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["rows"] == 360 + 361 + 362
    seg = sorted(
        p.relative_to(tmp_path / "fleet" / "samples") for p in (tmp_path / "fleet").glob("samples/*/*/*")
    )
    assert len(seg) == 3
    assert len({p.parent for p in seg}) == 3  # three partitions, three files
    with open_fleet(str(tmp_path / "fleet")) as fl:
        got = dict(fl.rows("SELECT node, count(*) FROM samples GROUP BY node"))
    assert got == {"gpu 1": 360, "gpu_1": 361, "gpu/1": 362}


def _admin(endpoint: str) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(
        endpoint_override=endpoint.split("//")[1],
        scheme="http",
        access_key="test",
        secret_key="test",
        region="us-east-1",
        allow_bucket_creation=True,
    )


def test_s3_multipart_segment_round_trip(s3: str, tmp_path: Path) -> None:  # noqa: F811
    """A segment big enough for a multipart upload (pyarrow uploads parts of 5-10 MB; moto must answer
    CompleteMultipartUpload as S3 does, CompleteMultipartUploadResult, or pyarrow rejects it)."""
    _admin(s3).create_dir("gpu-fleet")
    loc = open_location("s3://gpu-fleet/segments")
    rng = np.random.default_rng(1)
    big = pa.table({"v": rng.random(4_000_000)})  # ~30 MB of incompressible doubles
    rows, size = write_segment(loc, loc.path("t", "big.parquet"), big.to_batches(max_chunksize=50_000))
    assert rows == 4_000_000 and size > 20_000_000
    assert list_uploads("gpu-fleet", "segments/") == []


def test_a_failed_upload_leaves_nothing_visible_nor_open(s3: str, tmp_path: Path) -> None:  # noqa: F811
    _admin(s3).create_dir("gpu-fleet")
    loc = open_location("s3://gpu-fleet/segments")
    rng = np.random.default_rng(2)

    def dies_mid_stream():  # type: ignore[no-untyped-def]
        for _ in range(40):  # ~16 MB: parts are on the server when the source fails
            yield pa.record_batch({"v": rng.random(50_000)})
        raise OSError("the store went away mid-export")

    with pytest.raises(OSError, match="went away"):
        write_segment(loc, loc.path("t", "x.parquet"), dies_mid_stream())
    assert list_uploads("gpu-fleet", "segments/") == []  # no multipart upload left open
    names = [f.path for f in loc.fs.get_file_info(pafs.FileSelector("gpu-fleet/segments", recursive=True))]
    assert not [n for n in names if n.endswith(".parquet")]


def test_an_upload_left_open_is_aborted(s3: str) -> None:  # noqa: F811
    """What pyarrow cannot do: abort a multipart upload a failed stream left open (here one opened by boto3,
    as a stream frozen mid-upload leaves it), through the S3 API signed from the location's environment."""
    import boto3

    _admin(s3).create_dir("gpu-fleet")
    cli = boto3.client("s3", endpoint_url=s3, region_name="us-east-1")
    key = "segments/samples/date=2026-12-01/node=gpu%201/.tmp-x.parquet"
    up = cli.create_multipart_upload(Bucket="gpu-fleet", Key=key)["UploadId"]
    cli.upload_part(Bucket="gpu-fleet", Key=key, UploadId=up, PartNumber=1, Body=b"x" * 1024)
    assert list_uploads("gpu-fleet", "segments/") == [(key, up)]
    assert abort_uploads(f"gpu-fleet/{key}") == 1
    assert list_uploads("gpu-fleet", "segments/") == []
    assert cli.list_multipart_uploads(Bucket="gpu-fleet").get("Uploads", []) == []


def test_counts_are_read_back(tmp_path: Path) -> None:
    """The rows reported are those in the written file's footer, not the rows meant to be written."""
    loc = open_location(str(tmp_path / "fleet"))
    t = _samples("n", T0, 10, gpus=1)
    rows, size = write_segment(loc, loc.path("samples", "x.parquet"), t.to_batches(max_chunksize=3))
    assert rows == 10 and size == (tmp_path / "fleet" / "samples" / "x.parquet").stat().st_size
    assert [p.name for p in (tmp_path / "fleet" / "samples").iterdir()] == ["x.parquet"]  # no temporary left
    assert dt.datetime.fromtimestamp(T0, dt.timezone.utc).year == 2026
