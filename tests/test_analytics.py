"""fleettool.analytics: the store, incident logs and fleet segments as polars frames, and the README's notebook
example run as written against a replayed store and the public fault trace."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import polars as pl
import pytest

from fleettool import analytics as fa
from fleettool.store import Store
from tests.conftest import FIXTURES, ROOT, SCENARIOS, run_cli

TRACE = FIXTURES / "samples" / "fault-traces" / "infinitehbd" / "fault_trace.json"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("fa") / "fleet.duckdb"
    for sc in ("thermal-throttle", "gpu-fell-off-bus"):
        assert run_cli("replay", str(SCENARIOS / sc), "--db", str(p), "-q").returncode == 0
    return p


def test_store_frames_match_the_store(db: Path) -> None:
    temps = fa.samples(db, metric="gpu_temp_c", node="gpu-07")
    with Store(db, read_only=True) as st:
        n = st.scalar("SELECT count(*) FROM samples WHERE metric = 'gpu_temp_c' AND node = 'gpu-07'")
    assert temps.height == n > 0
    assert temps.columns == ["ts", "node", "gpu", "uuid", "metric", "sub", "value"]
    assert temps.schema["ts"] == pl.Datetime("us") and temps["ts"].is_sorted()
    assert temps.filter(pl.col("gpu") == 2)["value"].max() >= 85  # the throttled GPU ran hot
    ev = fa.events(db, kind="xid")
    assert ev["code"].to_list() == [79] and ev["node"].to_list() == ["gpu-21"]
    al = fa.alerts(db)
    assert set(al["node"]) == {"gpu-07", "gpu-21"}


def test_incidents_and_repeat_offenders() -> None:
    faults = fa.incidents(TRACE)
    top = fa.repeat_offenders(faults)
    assert faults.height == 584 and top.height == 231
    assert top.row(0, named=True)["faults"] == 14 and top["rank"].to_list()[:7] == [
        1,
        2,
        2,
        2,
        2,
        2,
        7,
    ]  # ties
    assert top["share"].sum() == pytest.approx(1.0)


def test_fleet_segments_scan_lazily(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "fleet"
    assert run_cli("export", "--db", str(db), "--to", str(out)).returncode == 0
    lf = fa.segments(out)
    assert isinstance(lf, pl.LazyFrame)
    got = lf.filter(pl.col("node") == "gpu-21").select(pl.len()).collect().item()
    with Store(db, read_only=True) as st:
        stored = st.scalar("SELECT count(*) FROM samples WHERE node = 'gpu-21'")
    assert 0 < got <= stored  # whole hours only are exported
    with pytest.raises(FileNotFoundError):
        fa.segments(tmp_path / "nothing")


def test_the_readme_notebook_example_runs(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"### In a notebook: polars.*?```python\n(.*?)```", text, re.S)
    assert block is not None
    code = block.group(1)
    assert len(code.strip().splitlines()) == 5
    shutil.copy(db, tmp_path / "fleet.duckdb")
    shutil.copy(TRACE, tmp_path / "fault_trace.json")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(code, "README.md", "exec"), {})  # noqa: S102 - the README's own example
    finally:
        os.chdir(cwd)
    out = capsys.readouterr().out
    assert "gpu-07" in out and "value" in out and "faults" in out and "rank" in out
