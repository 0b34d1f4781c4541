"""A remote burn-in's answer (`fleettool burnin --via ssh`): JSON that is not a burn-in report is one line naming
the node and what is wrong where, exit 7 (no verdict was reached), nothing stored; never an internal error (70).
A stand-in `ssh` on PATH prints what the remote side would."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import duckdb
import pytest

import fleettool.burnin.report as report
from tests.conftest import run_cli

GOOD = {
    "run_id": "r1",
    "node": "gpu-17",
    "started": 1714564800.0,
    "finished": 1714564860.0,
    "exit_code": 0,
    "devices": [{"index": 0}],
    "results": [
        {"node": "gpu-17", "gpu": 0, "test": "hbm", "verdict": "PASS", "figure": 4000.0, "unit": "GB/s"}
    ],
    "allreduce": None,
    "busy": None,
}


def _with(**kw: object) -> str:
    return json.dumps({**GOOD, **kw})


def _result(**kw: object) -> str:
    return _with(results=[{**GOOD["results"][0], **kw}])  # type: ignore[index]


BAD = [
    ('{"ok": true}', "run_id is missing, not a name"),
    ("[1, 2]", "the report is list [1, 2], not a JSON object"),
    ("null", "the report is null, not a JSON object"),
    (_with(started="x"), "started is str 'x', not a number in 0..4102444800"),
    (_with(started=1e400), "started is float inf, not a number in 0..4102444800"),
    (_with(node=""), "node is empty, not a name"),
    (_with(results=5), "results is int 5, not a list"),
    (_with(results=["PASS"]), "results[0] is str 'PASS', not a JSON object"),
    (
        _result(verdict="MAYBE"),
        "results[0].verdict 'MAYBE' is not one of PASS, WARN, FAIL, SKIPPED, INCONCLUSIVE",
    ),
    (_result(gpu="zero"), "results[0].gpu is str 'zero', not a number in 0..1023"),
    (_result(gpu=99999), "results[0].gpu is int 99999, not a number in 0..1023"),
    (_result(gpu=1.5), "results[0].gpu is 1.5, not a GPU index"),
    (_result(figure=True), "results[0].figure is bool True, not a number"),
    (_result(evidence=[1]), "results[0].evidence is list [1], not a JSON object"),
    (_with(allreduce={"rows": [{}]}), "allreduce.world is missing, not a number"),
    (
        _with(allreduce={"world": 2, "rows": [{"size_bytes": 8}]}),
        "allreduce.rows[0].time_us is missing, not a number",
    ),
]


@pytest.fixture
def ssh(tmp_path: Path) -> Path:
    """A directory holding `ssh`, which prints the file $FAKE_REPORT (the remote burn-in's stdout)."""
    d = tmp_path / "bin"
    d.mkdir()
    exe = d / "ssh"
    exe.write_text(
        f"#!{sys.executable}\nimport os, sys\nsys.stdout.write(open(os.environ['FAKE_REPORT']).read())\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return d


def _burnin(ssh: Path, tmp_path: Path, answer: str) -> tuple[int, str, Path]:
    (tmp_path / "answer.json").write_text(answer)
    db = tmp_path / "b.duckdb"
    env = {"PATH": f"{ssh}{os.pathsep}{os.environ['PATH']}", "FAKE_REPORT": str(tmp_path / "answer.json")}
    r = run_cli("burnin", "--node", "gpu-17", "--via", "ssh", "--db", str(db), env=env)
    return r.returncode, r.stderr, db


@pytest.mark.parametrize(("answer", "why"), BAD)
def test_json_of_the_wrong_shape_is_one_line_exit_7_nothing_stored(
    ssh: Path, tmp_path: Path, answer: str, why: str
) -> None:
    rc, err, db = _burnin(ssh, tmp_path, answer)
    assert rc == 7, err
    assert err.splitlines() == [
        "fleettool: burn-in on gpu-17 via ssh: ssh -o BatchMode=yes...: exit 0, its JSON is not a burn-in report: "
        + why
    ]
    assert not db.exists()


def test_a_burn_in_report_still_comes_back_into_the_store(ssh: Path, tmp_path: Path) -> None:
    rc, err, db = _burnin(ssh, tmp_path, json.dumps(GOOD))
    assert rc == 0, err
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.execute("SELECT node, gpu, test, verdict, figure FROM burnin_results").fetchall() == [
            ("gpu-17", 0, "hbm", "PASS", 4000.0)
        ]
    finally:
        con.close()


@pytest.mark.parametrize(("answer", "why"), BAD)
def test_from_dict_says_what_is_wrong_where(answer: str, why: str) -> None:
    with pytest.raises(report.NotAReport) as e:
        report.from_dict(json.loads(answer))
    assert str(e.value) == why
