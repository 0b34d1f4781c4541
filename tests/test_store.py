"""The DuckDB store: batched writes, retention rollups, read-only readers, locked and corrupt files."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fleettool.model import Event, Sample
from fleettool.store import Store, StoreCorrupt, StoreError, StoreLocked


def test_samples_and_events_round_trip(db: Path) -> None:
    t = 1_796_000_000.0
    with Store(db) as s:
        s.write_samples(
            [Sample(t + i, "gpu-1", i % 2, f"GPU-{i % 2}", "power_w", 100.0 + i) for i in range(10)]
        )
        s.write_events([Event(t, "gpu-1", "xid", "Xid 79", gpu=1, code=79, pci_bus_id="0000:18:00")])
    with Store(db, read_only=True) as r:
        assert r.scalar("SELECT count(*) FROM samples WHERE gpu = 1") == 5
        assert r.scalar("SELECT max(value) FROM samples") == 109.0
        ev = r.query("SELECT gpu, code, kind, pci_bus_id, epoch(ts) AS t FROM events")[0]
        assert ev == {"gpu": 1, "code": 79, "kind": "xid", "pci_bus_id": "0000:18:00", "t": t}


def test_retention_rolls_whole_minutes_into_min_mean_max(db: Path) -> None:
    t0 = 1_796_000_000.0 // 60 * 60  # a minute boundary
    now = t0 + 3 * 3600
    with Store(db) as s:
        # two minutes of 1 Hz samples long ago (values 0..59 and 60..119), one fresh sample
        s.write_samples([Sample(t0 + i, "n", 0, "u", "gpu_temp_c", float(i)) for i in range(120)])
        s.write_samples([Sample(now - 5, "n", 0, "u", "gpu_temp_c", 50.0)])
        rolled, dropped = s.apply_retention(now, raw_keep_s=3600, rollup_keep_s=30 * 86400)
        assert rolled == 2 and dropped == 0
        rows = s.query("SELECT vmin, vmean, vmax, n FROM samples_1m ORDER BY minute")
        assert rows == [
            {"vmin": 0.0, "vmean": 29.5, "vmax": 59.0, "n": 60},
            {"vmin": 60.0, "vmean": 89.5, "vmax": 119.0, "n": 60},
        ]
        assert s.scalar("SELECT count(*) FROM samples") == 1
        # rollups themselves expire
        later = now + 30 * 86400 - 3600  # the old minutes are 30 days + 2 h old, the fresh one 30 days - 1 h
        s.apply_retention(later, raw_keep_s=3600, rollup_keep_s=30 * 86400)
        assert s.query("SELECT vmax, n FROM samples_1m") == [{"vmax": 50.0, "n": 1}]


def test_reader_on_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no such database"):
        Store(tmp_path / "nope.duckdb", read_only=True)


def test_corrupt_file_is_reported_as_corrupt(tmp_path: Path) -> None:
    bad = tmp_path / "bad.duckdb"
    bad.write_bytes(b"this is not a database" * 1000)
    with pytest.raises(StoreCorrupt, match="bad.duckdb"):
        Store(bad)


def test_foreign_duckdb_file_is_not_taken_for_ours(tmp_path: Path) -> None:
    import duckdb

    other = tmp_path / "other.duckdb"
    duckdb.connect(str(other)).execute("CREATE TABLE x (a INT)").close()
    with pytest.raises(StoreCorrupt, match="not a fleettool database"):
        Store(other, read_only=True)


def test_locked_file_times_out_with_store_locked(db: Path) -> None:
    Store(db).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import duckdb, sys, time
            con = duckdb.connect({str(db)!r})
            print("held", flush=True)
            time.sleep(30)
        """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        t = time.monotonic()
        with pytest.raises(StoreLocked, match="locked"):
            Store(db, read_only=True, wait_s=0.5)
        assert time.monotonic() - t >= 0.4  # it retried for the time it was given
    finally:
        holder.kill()
        holder.wait()
    with Store(db, read_only=True) as r:  # free again
        assert r.scalar("SELECT count(*) FROM samples") == 0
