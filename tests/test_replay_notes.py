"""What a replay did not store, said per file: samples of series no fleettool metric maps (by design: a note, never
an issue, so --strict passes), DCGM's not-supported sentinels, NaN and infinite values. Over real dcgm-exporter
scrapes (fixtures/formats/prometheus), with the exact counts, in the text summary and in --json."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import fleettool.formats.openmetrics as om
import fleettool.ingest.read_metrics as rm
from fleettool.ingest.report import IngestOptions
from fleettool.ingest.run import ingest
from fleettool.store import Store
from tests.conftest import FIXTURES, run_cli

PROM = FIXTURES / "formats" / "prometheus"
AT = "2026-12-02T11:38:00Z"
BY_DESIGN = "by design (a scrape carries series fleettool does not use), not an issue (--strict passes)"
LEGACY_NOTE = (
    "5 samples of 5 series not stored: no fleettool metric for DCGM_FI_PROF_PIPE_FP64_ACTIVE, "
    f"DCGM_FI_PROF_PIPE_FP32_ACTIVE, DCGM_FI_PROF_PIPE_FP16_ACTIVE (2 more); {BY_DESIGN}"
)
SENTINEL_NOTE = "1 sample was DCGM's not-supported value (DCGM_FI_DEV_MEMORY_TEMP): not stored"
NO_HOST = "series without a Hostname label stored as node 'unknown' (give --node)"


def _sample_lines(path: Path) -> int:
    return sum(1 for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#"))


def _replay_json(tmp_path: Path, src: Path, *extra: str) -> tuple[int, dict[str, object], str]:
    rec = tmp_path / "rec"
    rec.mkdir()
    shutil.copyfile(src, rec / src.name)
    r = run_cli("replay", str(rec), "--db", str(tmp_path / "t.duckdb"), "--at", AT, "--json", *extra)
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, json.loads(r.stdout)["files"][0], r.stderr


@pytest.mark.parametrize(
    ("fixture", "rows", "notes"),
    [
        # 12 samples: 6 DCGM_FI_DEV_* and DCGM_FI_PROF_DRAM_ACTIVE stored; 5 DCGM_FI_PROF_* no metric maps
        ("scrape-legacy-exporter.prom", 7, [NO_HOST, LEGACY_NOTE]),
        # 3 samples: DCGM_FI_DEV_MEMORY_TEMP is 9223372036854775794, DCGM's int64 not-supported value
        ("scrape-docker-quickstart.prom", 2, [NO_HOST, SENTINEL_NOTE]),
        ("scrape-k8s-pods.txt", 2, [NO_HOST, SENTINEL_NOTE]),
        ("scrape-v100x4", 7, []),  # every sample stored: nothing to say
    ],
)
def test_strict_replay_notes_what_was_not_stored_and_passes(
    tmp_path: Path, fixture: str, rows: int, notes: list[str]
) -> None:
    rc, rep, _ = _replay_json(tmp_path, PROM / fixture, "--strict")
    assert rc == 0, rep
    assert rep["status"] == "read" and rep["rows"] == rows and rep["issues"] == 0
    assert rep["notes"] == notes
    if "not stored" in " ".join(notes):  # the counts add up to the file's sample lines
        assert rows + int(notes[-1].split()[0]) == _sample_lines(PROM / fixture)


def test_text_summary_carries_the_notes_under_the_file(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    for name in ("scrape-legacy-exporter.prom", "scrape-docker-quickstart.prom"):
        shutil.copyfile(PROM / name, rec / name)
    r = run_cli("replay", str(rec), "--db", str(tmp_path / "t.duckdb"), "--at", AT, "--strict")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    legacy = lines.index(f"{rec / 'scrape-legacy-exporter.prom'} [Prometheus text] 7 samples")
    docker = lines.index(f"{rec / 'scrape-docker-quickstart.prom'} [Prometheus text] 2 samples")
    assert f"    note: {SENTINEL_NOTE}" in lines[docker + 1 : legacy]
    assert f"    note: {LEGACY_NOTE}" in lines[legacy + 1 : legacy + 5]


def test_nan_and_infinite_values_are_noted_beside_the_issues(tmp_path: Path) -> None:
    rc, rep, _ = _replay_json(tmp_path, PROM / "bad-labels-and-timestamps.prom")
    assert rc == 0 and rep["rows"] == 5 and rep["issues"] == 7
    # POWER_USAGE NaN and +Inf are values, not malformed lines: not stored, and said so (the NaN timestamp and
    # the absurd ones are issues, counted there)
    assert rep["notes"] == ["2 samples were NaN or infinite (DCGM_FI_DEV_POWER_USAGE): not stored"]


def test_a_file_of_series_fleettool_does_not_map_says_so_with_the_counts(tmp_path: Path) -> None:
    prof = tmp_path / "prof.prom"
    lines = (PROM / "scrape-legacy-exporter.prom").read_text().splitlines()
    prof.write_text("\n".join(ln for ln in lines if "_PROF_" in ln and "DRAM_ACTIVE" not in ln) + "\n")
    rc, rep, err = _replay_json(tmp_path, prof, "--node", "gpu-17")
    why = (
        "no GPU series fleettool knows: 5 samples of 5 series not stored: no fleettool metric for "
        "DCGM_FI_PROF_PIPE_FP64_ACTIVE, DCGM_FI_PROF_PIPE_FP32_ACTIVE, DCGM_FI_PROF_PIPE_FP16_ACTIVE (2 more)"
    )
    assert rep["rows"] == 0 and rep["notes"] == [why] and rep["nothing_stored"] == why
    # the only file stored nothing: not a quiet 0 (it was), one line naming it and why
    assert rc == 3 and err.splitlines() == [
        f"fleettool: nothing stored from {tmp_path / 'rec'} (1 file read: prof.prom: {why})"
    ]


def test_a_file_that_stores_nothing_beside_files_that_do_is_named_with_why(tmp_path: Path) -> None:
    """A directory where one file stored nothing: a line naming it and why, exit 0 as for a partly read
    directory; replayed again, the others are already ingested and the empty one says so again (never an
    'already ingested' for a file that stored nothing)."""
    rec = tmp_path / "rec"
    rec.mkdir()
    shutil.copyfile(FIXTURES / "scenarios" / "app-xid" / "dcgm-exporter.om.gz", rec / "dcgm.om.gz")
    (rec / "late.om").write_text('DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="n1"} 40 -5\n' * 3 + "# EOF\n")
    why = "3 malformed lines (first: line 1: timestamp '-5' is not a unix time in 1973..2100 (seconds or milliseconds))"
    for _ in range(2):
        r = run_cli("replay", str(rec), "--db", str(tmp_path / "t.duckdb"), "--json", "-q")
        assert r.returncode == 0, r.stderr
        assert r.stderr.splitlines() == [f"fleettool: note: {rec / 'late.om'}: nothing stored ({why})"]
        files = {Path(f["path"]).name: f for f in json.loads(r.stdout)["files"]}
        assert files["late.om"]["nothing_stored"] == why and files["late.om"]["status"] == "read"
    assert files["dcgm.om.gz"]["status"] == "ignored" and files["dcgm.om.gz"]["nothing_stored"] is None
    text = run_cli("replay", str(rec / "late.om"), "--db", str(tmp_path / "t.duckdb"), "-q")
    assert text.returncode == 3 and text.stderr.splitlines() == [
        f"fleettool: nothing stored from {rec / 'late.om'} (1 file read: late.om: {why})"
    ]
    assert f"    nothing stored: {why}" in text.stdout.splitlines()


def test_counts_add_up_over_many_chunks_and_series_that_appear_late(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted per batch, per series: a file read in dozens of small chunks, an unmapped series and a
    sentinel first seen half-way through, gives the same totals as the lines say."""
    monkeypatch.setattr(om, "BLOCK", 20_000)
    monkeypatch.setattr(rm, "READ_SIZE", 1_111)
    lab = 'gpu="{g}",UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",Hostname="gpu-17"'
    out = []
    n = 2000
    for i in range(n):
        ms = 1796211480000 + 1000 * i
        out.append(f"DCGM_FI_DEV_GPU_TEMP{{{lab.format(g=0)}}} 41 {ms}")
        out.append(f"DCGM_FI_PROF_PIPE_FP64_ACTIVE{{{lab.format(g=0)}}} 0.000000 {ms}")
        if i >= n // 2:
            out.append(f"DCGM_FI_PROF_PCIE_TX_BYTES{{{lab.format(g=1)}}} 0 {ms}")
            if i % 10 == 0:
                out.append(f"DCGM_FI_DEV_MEMORY_TEMP{{{lab.format(g=1)}}} 9223372036854775794 {ms}")
    f = tmp_path / "many.prom"
    f.write_text("\n".join(out) + "\n")
    with Store(tmp_path / "t.duckdb") as s:
        rep = ingest(s, f, IngestOptions(quiet=True))[0]
    assert rep.rows == n and not rep.issues
    assert rep.notes == [
        "3000 samples of 2 series not stored: no fleettool metric for DCGM_FI_PROF_PIPE_FP64_ACTIVE, "
        f"DCGM_FI_PROF_PCIE_TX_BYTES; {BY_DESIGN}",
        "100 samples were DCGM's not-supported value (DCGM_FI_DEV_MEMORY_TEMP): not stored",
    ]
