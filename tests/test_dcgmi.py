"""dcgmi's outputs read end to end: each shape under an arbitrary name (`paste.txt`) replayed through the CLI into a
real store, then what was stored and the alert raised. The samples are in fixtures/samples/dcgmi (SOURCES.md: the
diag table, diag JSON and discovery list are real pastes; the `-constructed` dmon and health files are laid out from
DCGM's source for what no real paste shows: a dmon XID, a health Failure, `health -j`; tests/test_dcgmi_real.py
replays the real dmon and health pastes).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleettool.formats.dcgmi_codes import match_errors
from fleettool.formats.dcgmi_diag import parse_diag_text
from fleettool.formats.dcgmi_discovery import parse_discovery
from fleettool.formats.dcgmi_dmon import parse_dmon
from fleettool.formats.dcgmi_health import parse_health_text
from fleettool.recording.identify import identify_why
from fleettool.store import Store
from tests.conftest import FIXTURES, run_cli

DCGMI = FIXTURES / "samples" / "dcgmi"
DIAG = DCGMI / "dcgmi-diag-r3-h100x8-cuda-init-fail.txt"
DIAG_JSON = DCGMI / "dcgmi-diag-j-gflops-below-threshold.json"
DIAG_MD = DCGMI / "dcgmi-diag-r2-error-and-thermal-fail-excerpts.md"
HEALTH = DCGMI / "dcgmi-health-c-constructed.txt"
HEALTH_JSON = DCGMI / "dcgmi-health-c-j-constructed.json"
DMON = DCGMI / "dcgmi-dmon-e-230-150-155-constructed.txt"
DISCOVERY = DCGMI / "dcgmi-discovery-l-h100x4-3.1.7.txt"
AT = "2026-11-30T00:00:00Z"
T0 = 1795996800.0  # AT in unix seconds


def replay(tmp_path: Path, src: Path, *args: str) -> tuple[dict[str, Any], Path]:
    """`fleettool replay` of a directory holding only `src` saved as paste.txt, on node gpu-17 at AT."""
    d = tmp_path / "rec"
    d.mkdir()
    shutil.copy(src, d / "paste.txt")
    db = tmp_path / "t.duckdb"
    r = run_cli("replay", str(d), "--db", str(db), "--node", "gpu-17", "--at", AT, "--json", *args)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout), db


def query(db: Path, sql: str) -> list[dict[str, Any]]:
    with Store(db, read_only=True) as s:
        return s.query(sql)


def firing(doc: dict[str, Any], summary_has: str = "") -> list[tuple[str, int | None]]:
    return sorted(
        (a["node"], a["gpu"])
        for a in doc["alerts"]
        if a["state"] == "firing" and summary_has in a["summary"] and a["node"] == "gpu-17"
    )


@pytest.mark.parametrize(
    ("path", "fmt"),
    [
        (DIAG, "dcgmi-diag"),
        (DIAG_JSON, "dcgmi-diag-json"),
        (DIAG_MD, "dcgmi-diag"),
        (HEALTH, "dcgmi-health"),
        (HEALTH_JSON, "dcgmi-health-json"),
        (DMON, "dcgmi-dmon"),
        (DISCOVERY, "dcgmi-discovery"),
    ],
)
def test_each_dcgmi_shape_is_identified_by_its_content(path: Path, fmt: str, tmp_path: Path) -> None:
    # the diag table was "documentation (Markdown)", the others "not a format fleettool reads"
    p = tmp_path / "paste.txt"
    p.write_bytes(path.read_bytes())
    assert identify_why(p).format == fmt


def test_diag_table_is_stored_as_burnin_results_and_pages_per_gpu(tmp_path: Path) -> None:
    doc, db = replay(tmp_path, DIAG)
    (f,) = doc["files"]
    assert (f["format"], f["status"], f["runs"], f["issues"]) == ("dcgmi-diag", "read", 1, 0)
    rows = query(
        db,
        "SELECT node, gpu, test, verdict, evidence::VARCHAR AS ev, epoch(ts) AS t FROM burnin_results "
        "ORDER BY test, gpu",
    )
    fails = [r for r in rows if r["verdict"] == "FAIL"]
    assert [(r["node"], r["gpu"], r["test"]) for r in fails] == [
        ("gpu-17", g, "dcgm-gpu-memory") for g in range(8)
    ]
    ev = json.loads(fails[5]["ev"])
    assert ev["dcgm_errors"] == [51]  # DCGM_FR_CUDA_API
    assert ev["warnings"][0].startswith("GPU 5 Error using CUDA API cuInit Check DCGM and system logs")
    assert "Restart DCGM. Rerun diagnostics. Unable to initialize CUDA library" in ev["warnings"][0]
    assert {r["t"] for r in rows} == {T0}
    by_test = {(r["test"], r["gpu"]): r["verdict"] for r in rows}
    assert by_test[("dcgm-persistence-mode", None)] == "PASS"  # a deployment check is the node's
    assert by_test[("dcgm-pcie", 3)] == "INCONCLUSIVE"  # `Skip - All`: every GPU the metadata counts
    assert len(rows) == 9 + 3 * 8 + 8
    assert firing(doc, "DCGM diagnostic test(s) failed") == [("gpu-17", g) for g in range(8)]


def test_diag_in_markdown_fences_an_error_row_and_a_line_cut_before_its_bar(tmp_path: Path) -> None:
    doc, db = replay(tmp_path, DIAG_MD)
    assert doc["files"][0]["issues"] == 0
    rows = query(
        db, "SELECT gpu, test, verdict, reason FROM burnin_results WHERE verdict = 'FAIL' ORDER BY gpu"
    )
    assert [(r["gpu"], r["test"]) for r in rows] == [(0, "dcgm-gpu-memory"), (3, "dcgm-deployment-error")]
    assert rows[0]["reason"].endswith(
        "fans, and any other components.)"
    )  # the last piece, cut before its bar
    assert "row remappings are pending" in rows[1]["reason"]
    (n,) = query(
        db, "SELECT count(*) AS n FROM burnin_results WHERE verdict = 'PASS' AND test = 'dcgm-gpu-memory'"
    )
    assert n["n"] == 7
    assert firing(doc, "DCGM diagnostic test(s) failed") == [("gpu-17", 0), ("gpu-17", 3)]


def test_a_diag_line_not_read_is_an_issue_not_a_silent_drop() -> None:
    lines = DIAG.read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("| PCIe "))
    lines.insert(at + 1, "|                           | GPU0: Pass                                     |")
    rep = parse_diag_text(lines, path="paste.txt")
    assert [str(i) for i in rep.issues] == [f"paste.txt:{at + 2}: dcgmi diag: 'PCIe': not read: 'GPU0: Pass'"]


def test_diag_json_keeps_the_measured_and_expected_figures(tmp_path: Path) -> None:
    doc, db = replay(tmp_path, DIAG_JSON)
    (row,) = query(db, "SELECT gpu, test, verdict, figure, unit, floor, reason FROM burnin_results")
    assert (row["gpu"], row["test"], row["verdict"]) == (5, "dcgm-diagnostic", "FAIL")
    assert (row["figure"], row["unit"], row["floor"]) == (511.70, "GFLOPs", 1480.77)
    assert "below the threshold 1480.77" in row["reason"]
    (a,) = [a for a in doc["alerts"] if a["state"] == "firing"]
    assert (a["gpu"], a["severity"], a["category"]) == (5, "critical", "burnin")
    assert a["summary"].startswith("GPU 5 on gpu-17: 1 DCGM diagnostic test(s) failed")


@pytest.mark.parametrize("src", [HEALTH, HEALTH_JSON])
def test_health_incidents_are_events_with_dcgm_codes(src: Path, tmp_path: Path) -> None:
    doc, db = replay(tmp_path, src)
    evs = query(
        db,
        "SELECT gpu, kind, code, message, detail::VARCHAR AS detail, epoch(ts) AS t FROM events ORDER BY gpu, code",
    )
    assert [(e["gpu"], e["kind"], e["code"]) for e in evs] == [
        (3, "dcgm-health-fail", 4),  # DCGM_FR_VOLATILE_DBE_DETECTED
        (3, "dcgm-health-fail", 85),  # DCGM_FR_PENDING_ROW_REMAP
        (5, "dcgm-health-warn", 3),  # DCGM_FR_PCI_REPLAY_RATE
    ]
    assert "row remappings are pending" in evs[1]["message"]
    assert json.loads(evs[1]["detail"])["system"] == "Memory system"
    assert {e["t"] for e in evs} == {T0}
    assert firing(doc) == [("gpu-17", 3)]  # the Failure pages, the Warning does not
    assert "DCGM health check failed" in doc["alerts"][0]["summary"]


def test_dmon_is_samples_and_its_xid_raises_the_xid_alert(tmp_path: Path) -> None:
    doc, db = replay(tmp_path, DMON)
    s = query(
        db,
        "SELECT gpu, metric, count(*) AS n, min(epoch(ts)) AS t0, max(epoch(ts)) AS t1, max(value) AS vmax "
        "FROM samples GROUP BY gpu, metric ORDER BY gpu, metric",
    )
    got = {(r["gpu"], r["metric"]): (r["n"], r["t0"], r["t1"], r["vmax"]) for r in s}
    assert got[(1, "gpu_temp_c")] == (4, T0, T0 + 3, 36)  # -d 1000: one sample a second
    assert got[(0, "power_w")][3] == pytest.approx(71.612)
    assert got[(1, "xid_last")][3] == 120
    (x,) = query(db, "SELECT gpu, code, epoch(ts) AS t FROM events WHERE kind = 'xid'")
    assert (x["gpu"], x["code"], x["t"]) == (
        1,
        120,
        T0 + 2,
    )  # once: the repeat in the next sample is the same XID
    (a,) = [a for a in doc["alerts"] if a["state"] == "firing"]
    assert (a["gpu"], a["severity"], a["action"]) == (1, "critical", "reset-gpu")
    assert "XID 120" in a["summary"]


def test_discovery_is_the_gpu_inventory(tmp_path: Path) -> None:
    doc, db = replay(tmp_path, DISCOVERY)
    gpus = query(db, "SELECT node, gpu, uuid, pci_bus_id, model FROM gpus ORDER BY gpu")
    assert [(g["node"], g["gpu"], g["uuid"], g["pci_bus_id"], g["model"]) for g in gpus] == [
        ("gpu-17", 0, "GPU-d6a2c177-4cd8-8d01-0310-79f2720f37de", "00000000:4C:00.0", None),
        ("gpu-17", 1, "GPU-75c4ee16-a840-6f6c-9a7b-5ed8f41598b8", "00000000:5D:00.0", None),
        ("gpu-17", 2, "GPU-879a110e-54dc-22fe-9699-5babde1d450e", "00000000:CC:00.0", None),
        ("gpu-17", 3, "GPU-5ea04b20-4cc3-4d84-0bb2-e4143be8e874", "00000000:DC:00.0", None),
    ]
    assert "4 GPUs without a name" in " ".join(doc["files"][0]["notes"])


def test_a_bad_dmon_row_is_named_and_strict_fails(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    lines = DMON.read_text().splitlines()
    lines[5] = lines[5] + "   7"  # a value more than the header has columns
    bad.write_text("\n".join(lines) + "\n")
    doc, _ = replay(tmp_path, bad)
    (f,) = doc["files"]
    assert f["issues"] == 1
    assert f["first_issue"].endswith(
        "paste.txt:6: dcgmi dmon: 4 values for 3 columns: 'GPU 0          0           33          71.612   7'"
    )
    d = tmp_path / "rec"
    r = run_cli("replay", str(d), "--db", str(tmp_path / "s.duckdb"), "--node", "n", "--at", AT, "--strict")
    assert r.returncode == 3, r.stdout + r.stderr


def test_burnin_reads_a_local_dcgmi_diag_with_its_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleettool.burnin.dcgm import run_diag

    fake = tmp_path / "dcgmi"  # a real executable on PATH that prints what DCGM printed
    fake.write_text(f"#!/bin/sh\ncat '{DIAG_JSON}'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    (r,) = run_diag("gpu-17", level=3)
    assert (r.gpu, r.test, r.verdict.value) == (5, "dcgm-diagnostic", "FAIL")
    assert (r.figure, r.unit, r.floor) == (511.70, "GFLOPs", 1480.77)
    assert r.evidence["dcgm_errors"] == [110]


def test_dcgm_messages_match_their_codes() -> None:
    got = match_errors(
        "GPU 3 had memory errors and row remappings are pending, Detected 2 volatile double-bit ECC error(s) in GPU 3."
    )
    assert [(m.error.code if m.error else None, m.args) for m in got] == [(85, ("3",)), (4, ("2", "3"))]
    (m,) = match_errors("an incident of no known format")
    assert m.error is None and m.text == "an incident of no known format"


_line = st.text(
    alphabet=st.sampled_from(list("|+-=> #GPU0123456789.:,EntityIDPassFailSkip-All\tabc")), max_size=60
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_line, max_size=30))
def test_the_dcgmi_parsers_never_raise(lines: list[str]) -> None:
    for parse in (parse_diag_text, parse_health_text, parse_dmon, parse_discovery):
        parse(lines, path="fuzz")  # type: ignore[operator]
