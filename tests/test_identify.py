"""Files are identified by content and every file of a replay is accounted for.

End to end through `fleettool replay` (a subprocess): every kernel-log shape users save, under names that say
nothing (`capture`, `x.json`, `foo.prom`), stores its XID 79 with the wall time the file allows and raises the
critical alert; scrapes and nccl-tests runs without timestamps take the file's time (name, --at, mtime);
the store's own files and documentation are never read as data; bad, partial and hostile inputs are named
with what was kept, and exit 3 where nothing (or, with --strict, not everything) was read.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from fleettool.ingest.readers import READERS
from fleettool.ingest.report import IngestOptions
from fleettool.ingest.run import ingest
from fleettool.recording.identify import identify_bytes, identify_why
from fleettool.recording.times import time_from_name
from fleettool.store import Store
from tests.conftest import FIXTURES, run_cli
from tests.identify_helpers import KMSG, SAMPLES, events, replay_json, utc

SHAPES = [
    ("dmesg.txt", "capture", "dmesg", "unknown", None, []),
    ("dmesg-T.txt", "x.json", "dmesg -T", "unknown", utc(2024, 8, 30, 11, 43, 9), []),
    (
        "dmesg-iso.txt",
        "foo.prom",
        "dmesg --time-format iso",
        "unknown",
        utc(2025, 1, 21, 4, 41, 44.287197),
        [],
    ),
    (
        "journalctl-k-short.txt",
        "out",
        "syslog / journalctl short",
        "worker4",
        utc(2026, 12, 2, 11, 38, 47),
        ["--year", "2026"],
    ),
    (
        "journalctl-k-short-iso.txt",
        "data.bin",
        "syslog / journalctl short-iso",
        "worker4",
        utc(2026, 12, 2, 11, 38, 47),
        [],
    ),
    (
        "journalctl-k-short-precise.txt",
        "nccl.txt",
        "journalctl short-precise",
        "worker4",
        utc(2026, 12, 2, 11, 38, 47.548779),
        ["--year", "2026"],
    ),
    ("journalctl-k-json.jsonl", "x.json", "journalctl -o json", "worker4", 1764675527.548779, []),
    (
        "kern.log",
        "log.1",
        "syslog / journalctl short",
        "worker4",
        utc(2026, 12, 2, 11, 38, 47),
        ["--year", "2026"],
    ),
    (
        "messages",
        "metrics.om",
        "syslog / journalctl short",
        "hyperion",
        utc(2026, 5, 13, 17, 18, 47),
        ["--year", "2026"],
    ),
    (
        "kern.log-rfc3339",
        "capture.xml",
        "syslog / journalctl short-iso",
        "worker4",
        utc(2026, 12, 2, 11, 38, 47.548779),
        [],
    ),
    ("dev-kmsg.txt", "kmsg.prom", "/dev/kmsg records", "unknown", None, []),
]


@pytest.mark.parametrize(
    ("fixture", "name", "shape", "node", "when", "args"), SHAPES, ids=[s[0] for s in SHAPES]
)
def test_every_kernel_log_shape_replays_its_xid_79_and_alerts(
    tmp_path: Path, fixture: str, name: str, shape: str, node: str, when: float | None, args: list[str]
) -> None:
    d = tmp_path / "rec"
    d.mkdir()
    shutil.copy(KMSG / fixture, d / name)
    db = tmp_path / "t.duckdb"
    out = replay_json(d, db, *args)
    (f,) = out["files"]
    assert f["reader"] == "kernel log" and f["shape"] == shape and f["status"] == "read"
    assert f["events"] >= 1 and f["time_source"]
    xid79 = [e for e in events(db) if e["code"] == 79]
    assert len(xid79) == 1 and xid79[0]["node"] == node
    detail = json.loads(xid79[0]["detail"] or "{}")
    if when is None:
        assert xid79[0]["t"] is None and detail["time"] == "boot-relative" and detail["uptime"] > 0
        assert f["boot_relative_events"] >= 1 and "boot-relative" in f["time_source"]
    else:
        assert xid79[0]["t"] == pytest.approx(when, abs=1e-5)
        assert "wall-clock" in f["time_source"]
    crit = [a for a in out["alerts"] if a["severity"] == "critical"]
    assert [(a["node"], a["category"]) for a in crit] == [(node, "gpu-lost")]


def test_plain_dmesg_summary_says_boot_relative(tmp_path: Path) -> None:
    r = run_cli("replay", str(KMSG / "dmesg.txt"), "--db", str(tmp_path / "t.duckdb"))
    assert r.returncode == 0, r.stderr
    # 2 GPU lines and the mlx5 link line (a nic record since issue 31)
    assert "[kernel log: dmesg] 3 events" in r.stdout
    assert "3 kernel events are boot-relative" in r.stdout and "critical" in r.stdout


def test_syslog_year_comes_from_the_mtime_and_is_said(tmp_path: Path) -> None:
    f = tmp_path / "kern"
    shutil.copy(KMSG / "kern.log", f)
    t = utc(2025, 12, 31, 12, 0, 0)
    os.utime(f, (t, t))
    db = tmp_path / "t.duckdb"
    out = replay_json(f, db)
    assert events(db)[0]["t"] == pytest.approx(utc(2025, 12, 2, 11, 38, 47))
    assert "syslog stamps carry no year: 2025 taken from the file's mtime" in out["files"][0]["notes"]


def test_the_projects_own_dmesg_T_capture_is_read(tmp_path: Path) -> None:
    out = replay_json(FIXTURES / "h200-gemm" / "dmesg-T-nvidia.txt", tmp_path / "t.duckdb")
    f = out["files"][0]
    assert f["reader"] == "kernel log" and f["shape"] == "dmesg -T" and f["status"] == "read"


# -- identification units ---------------------------------------------------------------------------------
def test_identify_by_content_never_by_first_byte() -> None:
    assert identify_bytes(b"[ 1843.308145] NVRM: Xid (PCI:0000:b3:00): 79, x\n").format == "kmsg"
    assert identify_bytes(b"[Fri Mar  3 04:27:08 2023] hello\n").shape == "dmesg -T"
    assert identify_bytes(b'[{"a": 1}]').format == "unknown"
    assert identify_bytes(b"").why == "empty file"
    assert identify_bytes(b"\x00\x01\x02binary").why == "binary data, not text"
    assert identify_bytes(b"<?xml version='1.0'?><html/>").format == "unknown"
    nccl_json = (SAMPLES / "nccl-tests" / "nccl-tests-2.19.6-h200x1-J.json").read_bytes()
    assert identify_bytes(nccl_json).format == "nccl-tests-json"
    assert identify_bytes((KMSG / "journalctl-k-json.jsonl").read_bytes()).format == "kmsg-journal-json"
    assert identify_bytes(b'{"MESSAGE": "x"}\n').format == "unknown"  # JSON, but no journal fields


@pytest.mark.parametrize(
    "doc",
    [
        SAMPLES / "kmsg" / "SOURCES.md",
        SAMPLES / "nccl-tests" / "SOURCES.md",
        SAMPLES / "nvidia-smi" / "SOURCES.md",
        SAMPLES / "h200-recording" / "README.md",
        SAMPLES / "nccl-tests" / "nccl-tests-azure-8gpu-busbw-reference.md",
    ],
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_documentation_is_not_a_recording(tmp_path: Path, doc: Path) -> None:
    ident = identify_why(doc)
    assert ident.format == "unknown" and ident.why.startswith("documentation")
    f = tmp_path / "all_reduce_perf.txt"  # even under a name that says nccl-tests
    shutil.copy(doc, f)
    assert identify_why(f).format == "unknown"


def test_time_from_file_names() -> None:
    assert time_from_name("1796000000123.prom") == 1796000000.123
    assert time_from_name("gpu-17-1796000000.prom") == 1796000000.0
    assert time_from_name("gpu-17-2026-12-02T14:40:12Z.prom") == utc(2026, 12, 2, 14, 40, 12)
    assert time_from_name("scrape_20261202T144012+0100.txt") == utc(2026, 12, 2, 13, 40, 12)
    assert time_from_name("scrape_2026-12-02_14-40-12.prom") == utc(2026, 12, 2, 14, 40, 12)
    assert (
        time_from_name("gpu-17.prom") is None and time_from_name("all_reduce_perf-gpu-33-gpu-34.txt") is None
    )


# -- files without timestamps take the file's time -------------------------------------------------------
SCRAPE = (
    "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
    'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",Hostname="gpu-17"} 41\n'
    'DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-b",Hostname="gpu-17"} 43\n'
)


def sample_times(db: Path) -> set[float]:
    with Store(db, read_only=True) as s:
        return {r["t"] for r in s.query("SELECT DISTINCT epoch_us(ts) / 1e6 AS t FROM samples")}


def test_scrape_without_timestamps_takes_mtime_then_at_then_name(tmp_path: Path) -> None:
    f = tmp_path / "gpu-17.prom"
    f.write_text(SCRAPE)
    mt = utc(2026, 11, 30, 0, 30, 0)
    os.utime(f, (mt, mt))
    out = replay_json(f, tmp_path / "a.duckdb")
    assert out["files"][0]["rows"] == 2 and sample_times(tmp_path / "a.duckdb") == {mt}
    assert "no sample timestamps: the file's mtime (2026-11-30T00:30:00Z" in out["files"][0]["time_source"]
    out = replay_json(f, tmp_path / "b.duckdb", "--at", "2026-11-29T10:00:00Z")
    assert sample_times(tmp_path / "b.duckdb") == {utc(2026, 11, 29, 10, 0, 0)}
    assert out["files"][0]["time_source"].startswith("no sample timestamps: --at")
    named = tmp_path / "gpu-17-2026-11-28T08:00:00Z.prom"
    named.write_text(SCRAPE)
    out = replay_json(named, tmp_path / "c.duckdb", "--at", "2026-11-29T10:00:00Z")  # the name wins
    assert sample_times(tmp_path / "c.duckdb") == {utc(2026, 11, 28, 8, 0, 0)}
    assert out["files"][0]["time_source"].startswith("no sample timestamps: the file name")


def test_bad_at_is_a_usage_error(tmp_path: Path) -> None:
    r = run_cli("replay", str(KMSG / "dmesg.txt"), "--db", str(tmp_path / "t.duckdb"), "--at", "yesterday")
    assert r.returncode == 2 and "not a time" in r.stderr and "Traceback" not in r.stderr
    assert "--at" in r.stderr  # the error names the option
    r = run_cli("replay", str(KMSG / "dmesg.txt"), "--db", str(tmp_path / "t.duckdb"), "--at", "2024-02-30")
    assert r.returncode == 2 and "not a time" in r.stderr  # a day that does not exist is no time


def test_nccl_text_without_time_takes_the_file_time_never_now(tmp_path: Path) -> None:
    f = tmp_path / "run.txt"
    shutil.copy(SAMPLES / "nccl-tests" / "nccl-tests-2.19.6-h200x1.txt", f)
    mt = utc(2026, 11, 30, 0, 45, 0)
    os.utime(f, (mt, mt))
    db = tmp_path / "t.duckdb"
    out = replay_json(f, db)
    assert out["files"][0]["runs"] >= 1 and "the file's mtime" in out["files"][0]["time_source"]
    with Store(db, read_only=True) as s:
        assert {r["t"] for r in s.query("SELECT epoch_us(ts) / 1e6 AS t FROM nccl_runs")} == {mt}
    out = replay_json(f, tmp_path / "u.duckdb", "--at", "1796000000")
    with Store(tmp_path / "u.duckdb", read_only=True) as s:
        assert s.scalar("SELECT epoch(ts) FROM nccl_runs") == 1796000000


# -- never read: the store's own files ---------------------------------------------------------------------
def test_the_database_and_its_wal_inside_the_replayed_dir_are_never_read(tmp_path: Path) -> None:
    d = tmp_path / "rec"
    d.mkdir()
    shutil.copy(KMSG / "kern.log-rfc3339", d / "kern.log")
    db = d / "fleet.duckdb"
    first = replay_json(d, db)
    by = {Path(f["path"]).name: f["status"] for f in first["files"]}
    assert by.pop("kern.log") == "read" and set(by.values()) <= {"ignored"}
    (d / "fleet.duckdb.wal").write_bytes(b"\x00" * 64)  # what a killed writer leaves
    (d / "other.duckdb").write_bytes((db).read_bytes())  # someone else's database
    again = replay_json(d, db)
    by = {Path(f["path"]).name: f for f in again["files"]}
    assert by["fleet.duckdb"]["status"] == "ignored" and by["fleet.duckdb.wal"]["status"] == "ignored"
    assert by["other.duckdb"]["status"] == "skipped" and "DuckDB" in by["other.duckdb"]["skipped"]
    assert by["kern.log"]["status"] == "ignored" and "already ingested" in by["kern.log"]["skipped"]
    assert len(events(db)) == 1


# -- nothing recognised, missing paths ---------------------------------------------------------------------
def test_empty_and_garbage_dirs_exit_3_naming_every_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run_cli("replay", str(empty), "--db", str(tmp_path / "a.duckdb"))
    assert r.returncode == 3 and r.stderr == f"fleettool: {empty}: an empty directory: no files to read\n"
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "a").write_bytes(os.urandom(300) + b"\x00")
    (junk / "b.txt").write_text("hello world\n")
    (junk / "README.md").write_text(
        "# Notes\n\nThis directory holds the capture we took on the night of the outage.\n"
    )
    r = run_cli("replay", str(junk), "--db", str(tmp_path / "b.duckdb"))
    assert r.returncode == 3 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"fleettool: nothing recognised in {junk} (3 files skipped: ")
    assert "README.md: documentation (Markdown)" in r.stderr and "a: binary data" in r.stderr
    assert "b.txt: not a format fleettool reads" in r.stderr


@pytest.mark.parametrize("cmd", [["replay", "/nonexistent", "--db", "{db}"], ["demo", "/nonexistent"]])
def test_missing_paths_exit_3_with_one_line(tmp_path: Path, cmd: list[str]) -> None:
    r = run_cli(*[c.replace("{db}", str(tmp_path / "t.duckdb")) for c in cmd])
    assert r.returncode == 3 and r.stdout == ""
    assert r.stderr == "fleettool: /nonexistent: no such file or directory\n"


# -- strict, partial and bad files -------------------------------------------------------------------------
def test_strict_fails_on_a_skip_after_reading_the_rest(tmp_path: Path) -> None:
    d = tmp_path / "rec"
    d.mkdir()
    shutil.copy(KMSG / "journalctl-k-short-iso.txt", d / "kernel")
    (d / "notes.txt").write_text("swapped the PSU on Tuesday\n")
    db = tmp_path / "t.duckdb"
    r = run_cli("replay", str(d), "--db", str(db), "--strict")
    assert r.returncode == 3 and "Traceback" not in r.stderr
    assert (
        r.stderr.strip()
        .splitlines()[-1]
        .startswith("fleettool: --strict: 1 file not fully read (notes.txt: ")
    )
    assert len(events(db)) == 1  # the good file was stored
    assert (
        run_cli("replay", str(d), "--db", str(tmp_path / "u.duckdb")).returncode == 0
    )  # lenient: listed only


def test_a_bad_file_is_rolled_back_and_named_and_the_others_are_stored(tmp_path: Path) -> None:
    d = tmp_path / "rec"
    d.mkdir()
    (d / "a.om").write_text(
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="n9"} 40 1796000000\nDCGM_FI_DEV_GPU_TEMP{gpu="0" 41 1796000001\n# EOF\n'
    )
    shutil.copy(KMSG / "kern.log-rfc3339", d / "b")
    db = tmp_path / "t.duckdb"
    r = run_cli("replay", str(d), "--db", str(db), "--strict", "--json")
    assert r.returncode == 3 and f"{d / 'a.om'}:2:" in r.stderr and "Traceback" not in r.stderr
    files = {Path(f["path"]).name: f for f in json.loads(r.stdout)["files"]}
    assert files["a.om"]["status"] == "failed" and files["b"]["status"] == "read"
    with Store(db, read_only=True) as s:
        assert s.scalar("SELECT count(*) FROM samples WHERE node = 'n9'") == 0
    assert len(events(db)) == 1


def test_a_reader_that_raises_is_caught_per_file(tmp_path: Path) -> None:
    d = tmp_path / "rec"
    d.mkdir()
    shutil.copy(SAMPLES / "h200-recording" / "nvidia-smi-q.txt", d / "a")
    shutil.copy(KMSG / "kern.log-rfc3339", d / "b")

    def broken(store, path, opts, rep):  # type: ignore[no-untyped-def]
        store.write_samples([])
        raise ValueError("value out of range for int16")

    saved = READERS.get("nvidia-smi-text")
    ingest(Store(":memory:"), d, IngestOptions(quiet=True))  # load the real readers first
    READERS["nvidia-smi-text"] = broken
    try:
        with Store(tmp_path / "t.duckdb") as s:
            reps = ingest(s, d, IngestOptions(quiet=True))
            assert s.scalar("SELECT count(*) FROM events") == 1
    finally:
        READERS["nvidia-smi-text"] = saved  # type: ignore[assignment]
    assert reps[0].status == "failed" and "ValueError: value out of range" in (reps[0].skipped or "")
    assert reps[1].status == "read"
