"""The fleet reliability report from an incident log: on the public InfiniteHBD trace it agrees with the trace's
own README and statistics (584 faults on 231 servers, the class counts of fault_statistics.json); MTBF and
availability checked by hand on a small CSV with overlapping faults; the CLI's JSON, HTML and errors."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from fleettool.reliability import IncidentLogError, TooFewServers, read_incidents, summarize
from tests.conftest import FIXTURES, run_cli
from tests.test_cli_output import _cli

TRACE = FIXTURES / "samples" / "fault-traces" / "infinitehbd"


def test_the_trace_agrees_with_its_own_statistics() -> None:
    df, span = read_incidents(TRACE / "fault_trace.json")
    rep = summarize(df, 400, span)
    assert rep["faults"] == 584 and rep["servers_affected"] == 231 and rep["servers"] == 400
    assert span == pytest.approx(348.9798)  # the README's "348 days"
    stats = json.loads((TRACE / "fault_statistics.json").read_text())
    want = {
        f"{level} / {cls}": v["ClassTotal"]
        for level, classes in stats.items()
        for cls, v in classes.items()
        if isinstance(v, dict)
    }
    assert rep["by_class"] == dict(sorted(want.items(), key=lambda kv: (-kv[1], kv[0])))
    assert sum(rep["by_class"].values()) == 584
    assert rep["mtbf_days"] == pytest.approx(400 * 348.9798 / 584, abs=1e-3)
    assert 0.9 < rep["availability"] < 1.0
    assert (
        rep["repeat_offenders"]["top"][0]["faults"] == 14
        and rep["repeat_offenders"]["top_10pct_servers"] == 24
    )
    assert sum(b["count"] for b in rep["mtbi_hist"]) == 584 - 231  # one gap fewer than faults per server


def test_mtbf_and_availability_by_hand(tmp_path: Path) -> None:
    log = tmp_path / "incidents.csv"
    log.write_text(
        "node,start,end,category,subcategory\n"
        "n1,2026-01-01T00:00:00Z,2026-01-03T00:00:00Z,GPU,XID 79\n"
        "n1,2026-01-02T00:00:00Z,2026-01-04T00:00:00Z,NIC,link down\n"  # overlaps the first: counted once
        "n2,2026-01-06T00:00:00Z,2026-01-07T00:00:00Z,GPU,DBE\n"
    )
    df, span = read_incidents(log)
    rep = summarize(df, 4, span)
    # 4 servers over 6 days (Jan 1 to Jan 7) = 24 server-days; 3 faults; down: n1 3 days (not 4), n2 1 day
    assert rep["span_days"] == 6.0 and rep["mtbf_days"] == 8.0
    assert rep["down_days"] == 4.0 and rep["availability"] == round(1 - 4 / 24, 6)
    assert rep["by_class"] == {"GPU": 2, "NIC": 1}
    assert rep["repair_days"] == {"median": 2.0, "mean": round(5 / 3, 4), "p90": 2.0}
    assert rep["repeat_offenders"]["top"] == [{"server": "n1", "faults": 2}, {"server": "n2", "faults": 1}]
    with pytest.raises(TooFewServers, match="fewer than the 2 servers"):
        summarize(df, 1, span)


def test_bad_logs_name_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("node,start,end,category\nn1,yesterday,,GPU\n")
    with pytest.raises(IncidentLogError, match=r"bad.csv:2: not a time: 'yesterday'"):
        read_incidents(bad)
    other = tmp_path / "other.csv"
    other.write_text("host,when\nx,1\n")
    with pytest.raises(IncidentLogError, match=r"other.csv:1: not an incident log"):
        read_incidents(other)
    for name, body in (("empty.csv", "node,start,end,category\n"), ("not-a-trace.json", '{"a": 1}')):
        (tmp_path / name).write_text(body)
        with pytest.raises(IncidentLogError, match=f"{name}: no faults in it"):
            read_incidents(tmp_path / name)
    ms = tmp_path / "ms.csv"  # unix milliseconds, as exporters write them, are not read as seconds
    ms.write_text("node,start,end,category\nn1,1735689600000,1735776000000,GPU\n")
    assert summarize(read_incidents(ms)[0], 1)["repair_days"]["median"] == 1.0


def test_cli_json_html_and_exit_codes(tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    args = ("report", "--incidents", str(TRACE / "fault_trace.json"), "--servers", "400")
    r = run_cli(*args, "--json", "--html", str(page))
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    keys = {"faults", "servers", "servers_affected", "span_days", "mtbf_days", "availability", "by_class"}
    assert keys | {"repeat_offenders", "repair_days", "mtbi_hist"} <= set(rep)
    assert f"wrote {page}" in r.stderr
    text = page.read_text()
    assert text.startswith("<!doctype html>") and text.count("<svg") == 4 and "<script" not in text
    plain = run_cli(*args)
    assert plain.returncode == 0 and "584 faults on 231 of 400 servers" in plain.stdout
    # the units of `report` and the TUI: availability in percent, durations as a person reads them
    assert "over 349d: MTBF 239d (server time per fault), availability 97.69%" in plain.stdout
    assert "repair time: median 20h, mean 5.5d, p90 13d;" in plain.stdout
    assert "<td>239d</td>" in text and "<td>97.69%</td>" in text and "<td>20h / 5.5d / 13d</td>" in text
    assert (
        "faults per week" in plain.stdout
        and "repeat offenders" in plain.stdout
        and "\x1b[" not in plain.stdout
    )
    # the offenders read top-down, worst first, each with its count (as in the HTML)
    bars = [
        ln.split("┤")[0].strip() for ln in plain.stdout.split("repeat offenders")[1].splitlines() if "┤" in ln
    ]
    assert bars[0] == "e7b02619 (14)" and bars[-1].endswith("(7)") and len(bars) == 10
    assert run_cli("report", "--incidents", str(TRACE / "fault_trace.json")).returncode == 2  # no --servers
    assert run_cli("report", "--incidents", str(tmp_path / "none.json"), "--servers", "4").returncode == 3
    (tmp_path / "g.csv").write_text("garbage\n")
    g = run_cli("report", "--incidents", str(tmp_path / "g.csv"), "--servers", "4")
    assert g.returncode == 3 and "g.csv:1: not an incident log" in g.stderr
    few = run_cli(*args[:3], "--servers", "100")
    assert few.returncode == 2 and "fewer than the 231 servers" in few.stderr
    nodir = run_cli(*args, "--html", str(tmp_path / "no" / "r.html"))
    assert nodir.returncode == 3 and "does not exist" in nodir.stderr
    assert run_cli("report", "--incidents", str(tmp_path), "--servers", "4").returncode == 3  # a directory


def test_report_and_node_take_format_csv(tmp_path: Path) -> None:
    import csv
    import io

    r = run_cli(
        "report", "--incidents", str(TRACE / "fault_trace.json"), "--servers", "400", "--format", "csv"
    )
    faults = list(csv.DictReader(io.StringIO(r.stdout)))
    assert (
        r.returncode == 0
        and len(faults) == 584
        and list(faults[0]) == ["node", "start", "end", "category", "subcategory"]
        and faults[0]["start"].endswith("Z")
    )
    # the CSV is an incident log: read back, the same faults, repair times and classes (the span is the CSV's
    # own, first start to last time, so MTBF and availability move with it)
    back_csv = tmp_path / "faults.csv"
    back_csv.write_text(r.stdout)
    again, trace = read_incidents(back_csv)[0], read_incidents(TRACE / "fault_trace.json")[0]
    assert again.height == trace.height == 584
    assert again["node"].to_list() == trace["node"].to_list()
    assert max(abs(a - b) for a, b in zip(again["start"], trace["start"], strict=True)) < 1e-7
    assert max(abs(a - b) for a, b in zip(again["end"], trace["end"], strict=True)) < 1e-7
    assert again["sub"].to_list() == trace["sub"].to_list()
    # --span-days gives the trace's own span back: then every figure is the trace's
    same = run_cli(
        "report", "--incidents", str(back_csv), "--servers", "400", "--span-days", "348.9798", "--json"
    )
    orig = json.loads(
        run_cli("report", "--incidents", str(TRACE / "fault_trace.json"), "--servers", "400", "--json").stdout
    )
    assert {k: json.loads(same.stdout)[k] for k in ("span_days", "mtbf_days", "availability")} == {
        k: orig[k] for k in ("span_days", "mtbf_days", "availability")
    }
    short = run_cli("report", "--incidents", str(back_csv), "--servers", "400", "--span-days", "30")
    assert short.returncode == 2 and "shorter than the log (345.08 days" in short.stderr
    # and the Parquet form reads back as the CSV does
    pq = tmp_path / "faults.parquet"
    with pq.open("wb") as f:  # parquet goes to a redirected stdout
        args = [
            "report",
            "--incidents",
            str(TRACE / "fault_trace.json"),
            "--servers",
            "400",
            "--format",
            "parquet",
        ]
        assert subprocess.run([*_cli(), *args], stdout=f, timeout=60).returncode == 0
    assert read_incidents(pq)[0].equals(again)
    r2 = run_cli("report", "--incidents", str(back_csv), "--servers", "400", "--json")
    assert (
        json.loads(r2.stdout)["by_class"]
        == json.loads(
            run_cli(
                "report", "--incidents", str(TRACE / "fault_trace.json"), "--servers", "400", "--json"
            ).stdout
        )["by_class"]
    )
    db = tmp_path / "s.duckdb"
    from tests.conftest import SCENARIOS

    assert run_cli("replay", str(SCENARIOS / "gpu-fell-off-bus"), "--db", str(db), "-q").returncode == 0
    nodes = list(csv.DictReader(io.StringIO(run_cli("report", "--db", str(db), "--format", "csv").stdout)))
    assert [n["node"] for n in nodes] == ["gpu-21"] and float(nodes[0]["availability"]) < 1
    assert run_cli("node", "gpu-21", "cordon", "--db", str(db)).returncode == 0
    moves = list(
        csv.DictReader(io.StringIO(run_cli("node", "gpu-21", "--db", str(db), "--format", "csv").stdout))
    )
    assert [(m["from_state"], m["to_state"]) for m in moves] == [("healthy", "cordoned")]
