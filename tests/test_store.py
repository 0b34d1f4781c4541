"""The DuckDB store: batched writes, retention rollups, read-only readers, locked and corrupt files."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fleettool.model import Event, Sample
from fleettool.store import NotFleettool, Store, StoreCorrupt, StoreError, StoreLocked
from fleettool.store.schema import SCHEMA_VERSION


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
        assert ev == {
            "gpu": 1,
            "code": 79,
            "kind": "xid",
            "pci_bus_id": "00000000:18:00.0",
            "t": t,
        }  # nvidia-smi form


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


# -- whose file is it: the marker, stores from before it, and files that are not ours ---------------------------


def _sha(p: Path) -> str:
    import hashlib

    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_a_new_store_carries_the_marker(db: Path) -> None:
    Store(db).close()
    with Store(db, read_only=True) as r:
        meta = dict(r.con.execute("SELECT key, value FROM meta").fetchall())
    assert meta["format"] == "fleettool" and meta["schema_version"] == str(SCHEMA_VERSION)


def test_a_store_from_before_the_marker_is_recognised_and_marked(db: Path) -> None:
    import duckdb

    from fleettool.store.schema import DDL

    # a version-1 store as it was: its tables, a schema_version row, no marker, no events.detail column
    con = duckdb.connect(str(db))
    for stmt in DDL:
        if stmt.startswith("CREATE TABLE IF NOT EXISTS") and any(
            f" {t} (" in stmt for t in ("meta", "samples", "samples_1m", "events", "gpus", "alerts")
        ):
            con.execute(stmt.replace(", detail JSON", ""))
    con.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    con.execute("INSERT INTO events (ts, node, kind) VALUES ('2026-11-30 00:00:00', 'gpu-1', 'xid')")
    con.close()
    with Store(db, read_only=True) as r:  # a reader takes it as it is
        assert r.scalar("SELECT count(*) FROM meta WHERE key = 'format'") == 0
    with Store(db) as w:  # a writer upgrades it and adds the marker
        assert w.scalar("SELECT value FROM meta WHERE key = 'format'") == "fleettool"
        assert "detail" in [c[0] for c in w.con.execute("DESCRIBE events").fetchall()]
        assert w.scalar("SELECT count(*) FROM events") == 1


@pytest.mark.parametrize("read_only", [False, True])
def test_another_programs_duckdb_is_refused_untouched(tmp_path: Path, read_only: bool) -> None:
    import duckdb

    theirs = tmp_path / "theirs.duckdb"
    con = duckdb.connect(str(theirs))
    con.execute("CREATE TABLE events (id INTEGER, what VARCHAR)")
    con.execute("INSERT INTO events VALUES (1, 'theirs')")
    con.execute("CREATE TABLE a (x INTEGER)")
    con.close()
    before = _sha(theirs)
    with pytest.raises(NotFleettool) as e:
        Store(theirs, read_only=read_only)
    assert (
        str(e.value) == f"{theirs}: not a fleettool database (it has tables: a, events); nothing was changed"
    )
    assert _sha(theirs) == before and sorted(p.name for p in tmp_path.iterdir()) == ["theirs.duckdb"]
    con = duckdb.connect(str(theirs), read_only=True)
    assert con.execute("SELECT * FROM events").fetchall() == [(1, "theirs")]
    assert [c[0] for c in con.execute("DESCRIBE events").fetchall()] == ["id", "what"]
    con.close()


def test_a_foreign_meta_table_is_not_taken_for_ours(tmp_path: Path) -> None:
    import duckdb

    theirs = tmp_path / "kv.duckdb"
    con = duckdb.connect(str(theirs))
    con.execute("CREATE TABLE meta (key VARCHAR, value VARCHAR)")
    con.execute("INSERT INTO meta VALUES ('schema_version', '3')")  # even this, without our other tables
    con.execute("CREATE TABLE users (id INTEGER)")
    con.close()
    before = _sha(theirs)
    with pytest.raises(NotFleettool, match="it has tables: meta, users"):
        Store(theirs)
    assert _sha(theirs) == before


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"not a database\n" * 100, "not a DuckDB database"),
        (b"", "an empty file"),
        (b"\x00" * 4096, "not a DuckDB database"),
    ],
)
def test_a_file_that_is_not_duckdbs_is_refused_untouched(tmp_path: Path, content: bytes, needle: str) -> None:
    f = tmp_path / "notes.txt"
    f.write_bytes(content)
    for read_only in (False, True):
        with pytest.raises(NotFleettool, match=needle):
            Store(f, read_only=read_only)
    assert f.read_bytes() == content and [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_paths_that_cannot_be_a_store(tmp_path: Path) -> None:
    with pytest.raises(NotFleettool, match="is a directory"):
        Store(tmp_path)
    with pytest.raises(StoreError, match="does not exist") as e:
        Store(tmp_path / "no" / "such" / "dir.duckdb")
    assert not isinstance(e.value, StoreCorrupt) and not (tmp_path / "no").exists()
    with pytest.raises(StoreError, match="no such database"):  # a writer that needs an existing store
        Store(tmp_path / "x.duckdb", create=False)
    with pytest.raises(StoreError, match="no such database"):
        Store(tmp_path / "ro.duckdb", read_only=True)
    assert list(tmp_path.iterdir()) == []  # nothing was created by any of them


def test_a_store_newer_than_this_fleettool_is_refused(db: Path) -> None:
    with Store(db) as s:
        s.con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION + 1)])
    for read_only in (True, False):
        with pytest.raises(StoreCorrupt, match="newer than this fleettool"):
            Store(db, read_only=read_only)
