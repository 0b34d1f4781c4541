"""End to end: `fleettool replay` of every nccl-tests launcher shape and of curl'd dcgm-exporter scrapes, each under
a file name that says nothing about its format, then what the store holds (`fleettool nccl --json`, read-only SQL)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest

from tests.conftest import FIXTURES, run_cli
from tests.test_nccl_tests import LAUNCHER_FIXTURES

NCCL = FIXTURES / "formats" / "nccl-tests"
PROM = FIXTURES / "formats" / "prometheus"
AT = "2024-05-01T12:00:00Z"
AT_S = 1714564800.0


def _replay(tmp_path: Path, files: dict[str, Path], *extra: str) -> tuple[Path, dict[str, dict[str, object]]]:
    """Copy `files` (new name -> fixture) into a fresh directory, replay it; the store and the per-file report."""
    rec = tmp_path / "rec"
    rec.mkdir()
    for name, src in files.items():
        shutil.copyfile(src, rec / name)
    db = tmp_path / "t.duckdb"
    rc = run_cli("replay", str(rec), "--db", str(db), "--at", AT, "--json", *extra)
    assert "Traceback" not in rc.stderr, rc.stderr
    assert rc.returncode == 0, rc.stderr + rc.stdout
    report = json.loads(rc.stdout)
    return db, {Path(f["path"]).name: f for f in report["files"]}


def _sql(db: Path, q: str) -> list[tuple[object, ...]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(q).fetchall()
    finally:
        con.close()


@pytest.mark.parametrize(
    "fixture",
    sorted(LAUNCHER_FIXTURES),
)
def test_replay_nccl_launcher_shape_under_an_arbitrary_name(tmp_path: Path, fixture: str) -> None:
    op, nranks, nodes, nrows, avg, peak = LAUNCHER_FIXTURES[fixture]
    db, files = _replay(tmp_path, {"output-7": NCCL / fixture})
    assert files["output-7"]["format"] == "nccl-tests" and files["output-7"]["runs"] == 1, files
    (run,) = json.loads(run_cli("nccl", "--db", str(db), "--json").stdout)
    assert (run["op"], run["ranks"], run["nodes"], len(run["rows"])) == (op, nranks, nodes, nrows)
    assert run["avg_busbw_gbps"] == pytest.approx(avg) and run["peak_busbw_gbps"] == pytest.approx(peak)
    assert _sql(db, "SELECT count(*) FROM nccl_rows") == [(nrows,)]


def test_replay_nccl_directory_docs_and_truncated(tmp_path: Path) -> None:
    db, files = _replay(
        tmp_path,
        {
            "a": NCCL / "skypilot-all-gather.txt",
            "b.log": NCCL / "srun-truncated.txt",
            "c.txt": NCCL / "mpirun-tag-output.txt",
            "README.md": NCCL / "SOURCES.md",  # documentation that shows a header: not a run
        },
    )
    assert files["README.md"]["runs"] == 0 and files["README.md"]["skipped"], files["README.md"]
    assert files["b.log"]["status"] == "partial" and files["b.log"]["runs"] == 1
    assert "cut before its footer" in str(files["b.log"]["partial"])
    runs = _sql(db, "SELECT op, ranks, avg_busbw_gbps FROM nccl_runs ORDER BY op, avg_busbw_gbps NULLS FIRST")
    assert runs == [
        ("all_gather", 16, pytest.approx(38.5127)),
        ("all_reduce", 16, None),
        ("all_reduce", 16, 142.735),
    ]


SCRAPES = {
    # fixture: (rows stored, distinct (node, gpu) pairs, nodes)
    "scrape-docker-quickstart.prom": (2, 1, ["unknown"]),
    "scrape-k8s-pods.txt": (2, 1, ["unknown"]),
    "scrape-v100x4": (7, 4, ["r6i3n0"]),
    "scrape-a30-mig.metrics": (8, 2, ["yg-data-k8s-gpu-a30-node-test-test0003.mt"]),
    "scrape-h100-mig.out": (3, 1, ["gsrh100-074"]),
    "scrape-legacy-exporter.prom": (7, 2, ["unknown"]),
}


@pytest.mark.parametrize("fixture", sorted(SCRAPES))
def test_replay_curl_scrape_without_timestamps_stores_samples(tmp_path: Path, fixture: str) -> None:
    rows, pairs, nodes = SCRAPES[fixture]
    db, files = _replay(tmp_path, {"gpu-17": PROM / fixture})
    rep = files["gpu-17"]
    assert rep["format"] in ("prometheus", "openmetrics") and rep["rows"] == rows and rep["issues"] == 0, rep
    assert "--at" in str(rep["time_source"])
    got = _sql(
        db, "SELECT count(*), count(DISTINCT (node, gpu)), min(epoch(ts)), max(epoch(ts)) FROM samples"
    )
    assert got == [(rows, pairs, AT_S, AT_S)]
    assert sorted(str(n) for (n,) in _sql(db, "SELECT DISTINCT node FROM samples")) == nodes


def test_replay_bad_labels_and_timestamps(tmp_path: Path) -> None:
    db, files = _replay(tmp_path, {"x.prom": PROM / "bad-labels-and-timestamps.prom"})
    rep = files["x.prom"]
    # lines 3, 8, 9, 10: absurd timestamps (-5, 1e30, NaN, 1e20) skipped; lines 5-7: gpu labels "99999999",
    # "-1", "abc" kept with no gpu; the NaN power value is legal and not stored, +Inf is not stored either
    assert rep["issues"] == 7, rep
    got = _sql(db, "SELECT metric, gpu, value, epoch(ts) FROM samples ORDER BY metric, value")
    assert got == [
        ("gpu_temp_c", 0, 42.0, AT_S),
        ("gpu_temp_c", None, 43.0, AT_S),
        ("gpu_temp_c", None, 44.0, AT_S),
        ("gpu_temp_c", None, 45.0, AT_S),
        ("power_w", 0, 312.5, AT_S + 45),
    ]


def test_a_gzip_of_blank_lines_replays_in_seconds_not_minutes(tmp_path: Path) -> None:
    """97 KB of gzip that expands to 100 M blank lines between one sample and `# EOF` (it took 4 minutes and
    1.1 GB: each blank line went through the line-by-line parser). Bounded by the subprocess's timeout, not
    timed: blank lines cost whole-array passes now (bench/README.md has the figures)."""
    import gzip

    path = tmp_path / "blank.om.gz"
    with gzip.open(path, "wb", 9) as f:
        f.write(
            b'# TYPE DCGM_FI_DEV_GPU_TEMP gauge\nDCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="n1"} 41 1714564800\n'
        )
        for _ in range(100):
            f.write(b"\n" * 1_000_000)
        f.write(b'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="n1"} 43 1714564860\n# EOF\n')
    assert path.stat().st_size < 120_000
    db = tmp_path / "t.duckdb"
    rc = run_cli("replay", str(path), "--db", str(db), "--json", timeout=20)
    assert rc.returncode == 0, rc.stderr
    (f,) = json.loads(rc.stdout)["files"]
    assert (f["format"], f["rows"], f["issues"], f["partial"]) == ("openmetrics", 2, 0, None)
    assert _sql(db, "SELECT value FROM samples ORDER BY ts") == [(41.0,), (43.0,)]
