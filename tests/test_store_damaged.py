"""A damaged store, damaged for real (a DuckDB file cut to half its size, its header overwritten, a data block in
the middle overwritten), through the real CLI: exit 9 with one line saying it is damaged and what to run (never
4 "locked", 5 "not fleettool's" or 70 "a bug"); `store check` names what reads; `store salvage` copies what
reads into a fresh store and keeps the damaged file beside it, byte for byte."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import time
from pathlib import Path

import duckdb
import pytest

from fleettool.cli.exit_codes import ExitCode
from fleettool.model import Sample
from fleettool.store import Store
from tests.conftest import run_cli

DAMAGED = int(ExitCode.STORE_DAMAGED)
ROWS = 400_000  # samples: four DuckDB row groups, so a damaged block costs a range, not the table


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("damaged") / "healthy.duckdb"
    t0 = time.time() - ROWS
    rnd = random.Random(27)  # values that do not compress: a row group's values fill blocks of their own
    with Store(p) as st:
        st.write_samples(
            [Sample(t0 + i, "gpu-1", i % 8, None, "gpu_temp_c", rnd.random()) for i in range(ROWS)]
        )
        st.upsert_gpus([], t0)
    return p


def _copy(healthy: Path, tmp_path: Path, name: str) -> Path:
    p = tmp_path / name
    shutil.copy(healthy, p)
    return p


def truncated(healthy: Path, tmp_path: Path) -> Path:
    p = _copy(healthy, tmp_path, "truncated.duckdb")
    with p.open("r+b") as f:
        f.truncate(p.stat().st_size // 2)
    return p


def bad_header(healthy: Path, tmp_path: Path) -> Path:
    """The magic bytes stay (it is still a DuckDB file by its first 12 bytes); the rest of the header block
    and both database headers after it are overwritten."""
    p = _copy(healthy, tmp_path, "header.duckdb")
    with p.open("r+b") as f:
        f.seek(12)
        f.write(b"\xa5" * (3 * 4096 - 12))
    return p


def bad_block(healthy: Path, tmp_path: Path) -> Path:
    """A data block in the middle of the file overwritten: one that holds only the second row group's sample
    values (DuckDB's storage_info says where each column segment lies)."""
    p = _copy(healthy, tmp_path, "block.duckdb")
    with duckdb.connect(str(p), read_only=True) as con:
        rows = con.execute(
            "SELECT row_group_id, column_name, block_id FROM pragma_storage_info('samples') WHERE block_id >= 0"
        ).fetchall()
        block_size = con.execute("SELECT block_size FROM pragma_database_size()").fetchone()[0]  # type: ignore[index]
    owners: dict[int, set[tuple[int, str]]] = {}
    for rg, col, block in rows:
        owners.setdefault(block, set()).add((rg, col))
    block = min(b for b, o in owners.items() if o == {(1, "value")})
    with p.open("r+b") as f:
        f.seek(3 * 4096 + block * block_size + block_size // 2)  # past the file's three header blocks
        f.write(b"\x5a" * 4096)
    return p


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _one_line(r: object) -> str:
    err = r.stderr  # type: ignore[attr-defined]
    assert "Traceback" not in err and "internal error" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fleettool: "), err
    return lines[0]


@pytest.mark.parametrize("damage", [truncated, bad_header], ids=lambda f: f.__name__)
def test_a_damaged_store_is_exit_9_saying_what_to_run(healthy: Path, tmp_path: Path, damage: object) -> None:
    p = damage(healthy, tmp_path)  # type: ignore[operator]
    before = _sha(p)
    t0 = time.monotonic()
    r = run_cli("events", "--db", str(p), "--limit", "5000000", timeout=60)
    took = time.monotonic() - t0
    # `events` reads the events table (intact unless the header is gone); `report` reads the samples too
    r2 = run_cli("report", "--db", str(p), "--json", timeout=60)
    codes = {r.returncode, r2.returncode}
    assert DAMAGED in codes, (r.returncode, r.stderr, r2.returncode, r2.stderr)
    assert codes <= {0, DAMAGED}, (r.stderr, r2.stderr)
    for res in (r, r2):
        if res.returncode == DAMAGED:
            line = _one_line(res)
            assert "the database is damaged" in line and "locked" not in line, line
            assert f"fleettool store check --db {p}" in line and "store salvage" in line, line
    assert took < 4.0, f"{took:.1f}s: a damaged file was waited on as if locked"
    assert _sha(p) == before, "a reader changed the damaged file"


def test_a_damaged_header_is_not_locked(healthy: Path, tmp_path: Path) -> None:
    """Was: exit 4 'database is locked by another process' after a 5 s wait (the checksum error's 'block'
    contains 'lock')."""
    p = bad_header(healthy, tmp_path)
    t0 = time.monotonic()
    r = run_cli("alerts", "--db", str(p), timeout=60)
    assert r.returncode == DAMAGED, r.stderr
    assert time.monotonic() - t0 < 4.0
    assert "damaged" in _one_line(r)


def test_store_check_of_a_healthy_store_is_0(healthy: Path) -> None:
    r = run_cli("store", "check", "--db", str(healthy), "--json", timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["ok"] is True
    rows = {t["table"]: (t["rows"], t["readable"]) for t in out["tables"]}
    assert rows["samples"] == (ROWS, ROWS)


def test_store_check_names_the_damaged_tables(healthy: Path, tmp_path: Path) -> None:
    p = bad_block(healthy, tmp_path)
    r = run_cli("store", "check", "--db", str(p), "--json", timeout=120)
    assert r.returncode == DAMAGED, r.stderr
    assert "samples" in _one_line(r)
    tables = {t["table"]: t for t in json.loads(r.stdout)["tables"]}
    s = tables["samples"]
    assert s["rows"] == ROWS and 0 < s["readable"] < ROWS, s  # one row group lost, the others read
    assert s["lost_ranges"] and s["lost_ranges"][0]["to_rowid"] - s["lost_ranges"][0]["from_rowid"] <= 122_880
    assert tables["meta"]["ok"]


def test_store_check_of_a_damaged_header(healthy: Path, tmp_path: Path) -> None:
    r = run_cli("store", "check", "--db", str(bad_header(healthy, tmp_path)), timeout=60)
    assert r.returncode == DAMAGED
    assert "the file cannot be opened, its header or catalog is damaged" in _one_line(r)


@pytest.mark.parametrize("damage", [truncated, bad_block], ids=lambda f: f.__name__)
def test_salvage_keeps_the_damaged_file_and_saves_what_reads(
    healthy: Path, tmp_path: Path, damage: object
) -> None:
    p = damage(healthy, tmp_path)  # type: ignore[operator]
    before = _sha(p)
    chk = json.loads(run_cli("store", "check", "--db", str(p), "--json", timeout=120).stdout)
    readable = {t["table"]: t["readable"] for t in chk["tables"]}
    r = run_cli("store", "salvage", "--db", str(p), timeout=120)
    assert r.returncode == int(ExitCode.FAILURE), r.stderr  # something was lost, and said
    assert "LOST samples" in r.stdout or "LOST everything" in r.stdout, r.stdout
    kept = [q for q in tmp_path.iterdir() if q.name.startswith(p.name + ".damaged-")]
    assert len(kept) == 1 and _sha(kept[0]) == before, "the damaged file was not kept as it was"
    assert f"kept as {kept[0]}" in r.stdout
    # the fresh store is healthy and holds every row that read
    again = run_cli("store", "check", "--db", str(p), timeout=120)
    assert again.returncode == 0, again.stderr
    with duckdb.connect(str(p), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM samples").fetchone() == (readable.get("samples", 0),)
    assert run_cli("alerts", "--db", str(p), timeout=60).returncode == 0


def test_salvage_to_another_path_leaves_the_damaged_file(healthy: Path, tmp_path: Path) -> None:
    p = bad_header(healthy, tmp_path)
    before = _sha(p)
    out = tmp_path / "fresh.duckdb"
    r = run_cli("store", "salvage", "--db", str(p), "--out", str(out), timeout=60)
    assert r.returncode == int(ExitCode.FAILURE)
    assert "LOST everything" in r.stdout
    assert _sha(p) == before and out.exists()
    assert run_cli("store", "check", "--db", str(out), timeout=60).returncode == 0
    r2 = run_cli("store", "salvage", "--db", str(p), "--out", str(out), timeout=60)
    assert r2.returncode == int(ExitCode.USAGE) and "--out" in _one_line(r2)


@pytest.mark.parametrize("damage", [truncated, bad_header])
def test_an_agent_started_on_a_damaged_store_says_so_with_exit_9(
    healthy: Path, tmp_path: Path, damage
) -> None:  # type: ignore[no-untyped-def]
    """Its start-up reads the store's GPU inventory (how many GPUs this node had) before the agent's own open;
    whatever reads first, the damage is named, exit 9. (A damaged block the agent never reads, bad_block's old
    samples, lets it run: its appends and its rules' windows are whole, and `store check` finds the block.)"""
    p = damage(healthy, tmp_path)
    r = run_cli(
        "agent", "--db", str(p), "--source", "fake", "--kmsg", "off", "--dcgm-exporter", "off", "--node", "gpu-1",
        "--duration", "2s",
    )  # fmt: skip
    assert r.returncode == DAMAGED, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert str(p) in line and "store salvage" in line


def test_salvage_of_a_healthy_store_renames_nothing(healthy: Path, tmp_path: Path) -> None:
    p = _copy(healthy, tmp_path, "fine.duckdb")
    before = sorted(x.name for x in tmp_path.iterdir())
    r = run_cli("store", "salvage", "--db", str(p))
    assert r.returncode == 0, r.stderr
    assert "healthy" in r.stdout and "nothing to salvage" in r.stdout
    assert sorted(x.name for x in tmp_path.iterdir()) == before  # no .damaged-<time>, no fresh store
