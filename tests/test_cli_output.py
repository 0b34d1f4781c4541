"""How read commands print: JSON arrays for scripts, borderless rich tables for people (fleettool/cli/output.py),
and `fleettool alerts` in the store's triage order."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import subprocess
from pathlib import Path

import pytest

from fleettool.cli.output import FLEX_MIN, MAX_CELL, emit, iso, print_json, with_iso
from fleettool.store import Store
from fleettool.store.alerts import AlertRecord, put_alert
from tests.conftest import run_cli


def test_json_is_indent_1_with_a_newline(capsys: pytest.CaptureFixture[str]) -> None:
    emit([{"a": 1, "b": None}], ["a"], as_json=True)
    assert capsys.readouterr().out == '[\n {\n  "a": 1,\n  "b": null\n }\n]\n'
    print_json({"x": 1}, indent=None)
    assert capsys.readouterr().out == '{"x": 1}\n'


def test_iso_times_keep_milliseconds_only_when_there_are_some() -> None:
    assert iso(dt.datetime(2026, 11, 30, 0, 53, 20, 500000)) == "2026-11-30T00:53:20.500Z"
    assert iso(dt.datetime(2026, 11, 30, 0, 53, 20)) == "2026-11-30T00:53:20Z"
    assert iso(None) is None
    row = {"a": dt.datetime(2026, 1, 1), "b": 2, "c": None}
    assert list(with_iso(row, "a", "c").items()) == [("a", "2026-01-01T00:00:00Z"), ("b", 2), ("c", None)]


def test_table_is_one_line_a_row_with_data_shown_as_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        {"node": "gpu-1", "gpu": 3, "summary": "[bold]XID 79[/bold] :fire:"},
        {"node": "gpu-2", "gpu": None, "summary": "x" * 200},
    ]
    emit(rows, ["node", ("gpu", lambda r: "-" if r["gpu"] is None else r["gpu"]), "summary"], as_json=False)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NODE", "GPU", "SUMMARY"]
    assert lines[1].split() == ["gpu-1", "3", "[bold]XID", "79[/bold]", ":fire:"]  # no markup, no emoji
    assert lines[2].split()[:2] == ["gpu-2", "-"] and lines[2].endswith("\u2026")  # cut, not wrapped
    assert len(lines) == 3 and all(line == line.rstrip() for line in lines)
    assert max(len(w) for w in lines[2].split()) == MAX_CELL


def test_an_empty_table_says_none(capsys: pytest.CaptureFixture[str]) -> None:
    emit([], ["node"], as_json=False)
    assert capsys.readouterr().out == "(none)\n"
    emit([], ["node"], as_json=True)
    assert capsys.readouterr().out == "[]\n"


def _alert(aid: str, severity: str, state: str, last_seen: float) -> AlertRecord:
    return AlertRecord(
        aid, "R", "gpu-lost", severity, "gpu-1", 0, None, "reset-gpu", state, 1.7e9, last_seen, "s",
        "runbooks/r.md", aid,
    )  # fmt: skip


def test_alerts_list_a_firing_warning_above_a_resolved_critical(db: Path) -> None:
    with Store(db) as st:
        put_alert(st, _alert("old-critical", "critical", "resolved", 1.7e9 + 600))
        put_alert(st, _alert("warning", "warning", "firing", 1.7e9 + 60))
        put_alert(st, _alert("critical", "critical", "firing", 1.7e9 + 60))
    r = run_cli("alerts", "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr
    assert [a["alert_id"] for a in json.loads(r.stdout)] == ["critical", "warning", "old-critical"]
    table = run_cli("alerts", "--db", str(db)).stdout.splitlines()
    assert [line.split()[0] for line in table] == ["ALERT_ID", "critical", "warning", "old-critical"]


def test_burnin_table_keeps_brackets_in_reasons(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleettool.burnin.report import BurninReport
    from fleettool.burnin.verdict import Result, Verdict
    from fleettool.cli.burnin_cmd import _print_table

    monkeypatch.setenv("COLUMNS", "200")
    why = "torch is not installed (pip install 'fleettool[burnin]')"
    rep = BurninReport(
        "r1", "n1", 0.0, results=[Result("n1", None, "gemm-bf16", Verdict.INCONCLUSIVE, reason=why)]
    )
    _print_table(rep, 7)
    out, err = capsys.readouterr()
    assert why in out  # not eaten as a style tag
    assert err.strip() == "burn-in n1: exit code 7 (INCONCLUSIVE)"


def test_read_commands_speak_csv_and_parquet(tmp_path: Path) -> None:
    import csv
    import io

    import polars as pl

    from tests.conftest import SCENARIOS, run_cli

    db = tmp_path / "f.duckdb"
    assert run_cli("replay", str(SCENARIOS / "gpu-fell-off-bus"), "--db", str(db), "-q").returncode == 0
    as_json = json.loads(run_cli("events", "--db", str(db), "--json").stdout)
    rows = list(csv.DictReader(io.StringIO(run_cli("events", "--db", str(db), "--format", "csv").stdout)))
    assert [r["message"] for r in rows] == [e["message"] for e in as_json] and rows[0]["ts"] == as_json[0][
        "ts"
    ]
    out = tmp_path / "ev.parquet"
    with out.open("wb") as f:
        assert (
            subprocess.run(
                [*_cli(), "events", "--db", str(db), "--format", "parquet"], stdout=f, timeout=60
            ).returncode
            == 0
        )
    df = pl.read_parquet(out)
    assert df.height == len(as_json) and df["code"].drop_nulls().to_list() == [79]
    bad = run_cli("gpus", "--db", str(db), "--format", "xml")
    assert bad.returncode == 2 and "one of table, json, csv, parquet" in bad.stderr


def _cli() -> list[str]:
    import shutil
    import sys

    here = Path(sys.executable).parent / "fleettool"
    return [str(here)] if here.exists() else [shutil.which("fleettool") or "fleettool"]


def _rows() -> list[dict[str, object]]:
    return [
        {"node": "gpu-1", "gpu": 3, "state": "firing", "category": "ecc", "summary": "s" * 150},
        {"node": "gpu-22", "gpu": 7, "state": "resolved", "category": "thermal", "summary": "short"},
    ]


def test_a_wide_terminal_shows_a_long_cell_whole(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """COLUMNS=200: a 150-character summary is shown whole (it was cut at 80 whatever the width)."""
    monkeypatch.setenv("COLUMNS", "200")
    emit(_rows(), ["node", "gpu", "state", "category", "summary"], as_json=False)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NODE", "GPU", "STATE", "CATEGORY", "SUMMARY"]
    assert lines[1].split()[-1] == "s" * 150 and all(len(line) <= 200 for line in lines)


@pytest.mark.parametrize("width", [80, 60, 50])
def test_a_narrow_terminal_drops_the_least_important_columns_first(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    """The table fits COLUMNS; columns go in the command's drop order while the summary would get under
    FLEX_MIN characters; the summary keeps at least that much (it was squeezed to a few characters)."""
    monkeypatch.setenv("COLUMNS", str(width))
    emit(_rows(), ["node", "gpu", "state", "category", "summary"], as_json=False, drop=("category", "state"))
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= width for line in lines), lines
    heads = lines[0].split()
    want = {80: ["NODE", "GPU", "STATE", "CATEGORY", "SUMMARY"], 60: ["NODE", "GPU", "STATE", "SUMMARY"]}
    assert heads == want.get(width, ["NODE", "GPU", "SUMMARY"])
    summary = lines[1][lines[0].index("SUMMARY") :]
    assert summary.endswith("\u2026") and len(summary) >= FLEX_MIN
    assert lines[2].split()[:2] == ["gpu-22", "7"]


def test_the_alerts_table_has_a_rule_column_and_fits_80_columns(db: Path) -> None:
    with Store(db) as st:
        put_alert(st, _alert("a" * 16, "critical", "firing", 1.7e9 + 60))
        put_alert(
            st, dataclasses.replace(_alert("b" * 16, "warning", "firing", 1.7e9 + 60), summary="x" * 110)
        )
    table = run_cli("alerts", "--db", str(db), env={"COLUMNS": "200"}).stdout.splitlines()
    assert table[0].split()[:3] == ["ALERT_ID", "RULE", "SEVERITY"] and table[1].split()[1] == "R"
    assert table[2].split()[-1] == "x" * 110
    narrow = run_cli("alerts", "--db", str(db), env={"COLUMNS": "80"}).stdout.splitlines()
    assert narrow[0].split() == ["ALERT_ID", "RULE", "SEVERITY", "NODE", "GPU", "SUMMARY"]
    assert all(len(line) <= 80 for line in narrow) and narrow[2].endswith("x\u2026")
