"""Files as on-call engineers paste them (issue 29): every skip tells the truth, dmesg's relative shapes are read,
a hung nccl-tests run is a run that did not finish, the op and GPU model of a run are kept, and the same kernel
line saved in two files is stored once. Each case replays real data (fixtures/pasted/SOURCES.md) under an
arbitrary file name through the CLI."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import duckdb

from fleettool.engine.kinds.nccl_localize import shapes
from fleettool.store import Store
from fleettool.store.baselines import nccl_largest_busbw
from tests.conftest import FIXTURES, run_cli

PASTED = FIXTURES / "pasted"
KMSG = FIXTURES / "formats" / "kmsg"
NCCL290 = FIXTURES / "samples" / "nccl-tests" / "nccl-tests-h100x8-single-node-and-2node-issue290.txt"
ALLGATHER = FIXTURES / "formats" / "nccl-tests" / "skypilot-all-gather.txt"


def _replay(tmp_path: Path, files: dict[str, Path | str], *extra: str) -> tuple[Path, dict[str, dict]]:
    """Write `files` (name -> fixture or text) into a fresh directory and replay it; the store and the report."""
    rec = tmp_path / "rec"
    rec.mkdir()
    for name, src in files.items():
        if isinstance(src, Path):
            shutil.copyfile(src, rec / name)
        else:
            (rec / name).write_text(src)
    db = tmp_path / "t.duckdb"
    rc = run_cli("replay", str(rec), "--db", str(db), "--year", "2026", "--json", *extra)
    assert "Traceback" not in rc.stderr, rc.stderr
    assert rc.returncode == 0, rc.stderr + rc.stdout
    return db, {Path(f["path"]).name: f for f in json.loads(rc.stdout)["files"]}


def _sql(db: Path, q: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(q).fetchall()
    finally:
        con.close()


# -- every skip tells the truth; dmesg's relative shapes ------------------------------------------------------


def test_dmesg_H_without_a_date_line_is_a_kernel_log_not_documentation(tmp_path: Path) -> None:
    _, files = _replay(tmp_path, {"paste-1.txt": PASTED / "dmesg-H-aer.txt"})
    f = files["paste-1.txt"]
    assert (f["format"], f["shape"], f["status"]) == ("kmsg", "dmesg -H", "read")
    assert f["skipped"] is None and f["events"] == 0
    assert any("no date line" in n for n in f["notes"]), f["notes"]


def test_dmesg_H_lines_are_timed_from_the_date_line_and_the_gaps(tmp_path: Path) -> None:
    db, files = _replay(tmp_path, {"x": PASTED / "dmesg-H-xid.txt"}, "--node", "gpu-7")
    assert files["x"]["shape"] == "dmesg -H" and files["x"]["events"] == 2 and files["x"]["issues"] == 0
    got = _sql(db, "SELECT epoch(ts), code FROM events ORDER BY ts")
    # [Dec 2 11:38] + 0.000001 + 7.135890 s; then the next date line, [Dec 2 11:40]
    assert [round(t, 6) for t, _ in got] == [1796211487.135891, 1796211600.0]
    assert [c for _, c in got] == [79, 79]


def test_a_real_dmesg_H_paste_with_date_lines_reads_as_dmesg_H(tmp_path: Path) -> None:
    """A real `dmesg -H | tail` (fixtures/pasted/SOURCES.md): its prompt line, gap lines before the first date line,
    lines a message continues on (14 blanks, no stamp), and date lines with a two-digit day (`[Feb10 09:11]`)."""
    _, files = _replay(tmp_path, {"paste.txt": PASTED / "dmesg-H-date-lines-vbox.txt"})
    f = files["paste.txt"]
    assert (f["format"], f["shape"], f["status"]) == ("kmsg", "dmesg -H", "read")
    assert f["skipped"] is None and f["events"] == 0 and f["issues"] == 0
    # the three [  +s] lines before [Feb10 09:11] have no base; the two continuation lines are not counted, and
    # the gap after each date line is timed from it
    assert any(n.startswith("3 lines timed only by the gap") and "no date line" in n for n in f["notes"]), f
    assert "documentation" not in json.dumps(f)


def test_dmesg_delta_with_no_base_is_an_issue_and_strict_fails(tmp_path: Path) -> None:
    db, files = _replay(tmp_path, {"d.log": PASTED / "dmesg-delta.txt"}, "--node", "gpu-7")
    f = files["d.log"]
    assert f["shape"] == "dmesg --time-format delta" and f["events"] == 1 and f["untimed_events"] == 1
    assert f["issues"] == 1 and "no date line" in f["first_issue"] and ":2:" in f["first_issue"]
    rc = run_cli("replay", str(tmp_path / "rec"), "--db", str(tmp_path / "s.duckdb"), "--strict")
    assert rc.returncode != 0 and "no date line" in rc.stderr


def test_dmesg_show_delta_keeps_the_uptime(tmp_path: Path) -> None:
    db, files = _replay(tmp_path, {"k": PASTED / "dmesg-d.txt"}, "--node", "gpu-7")
    assert files["k"]["shape"] == "dmesg -d" and files["k"]["events"] == 1
    assert files["k"]["boot_relative_events"] == 1
    (detail,) = _sql(db, "SELECT detail FROM events")[0]
    assert json.loads(detail)["uptime"] == 6781741.548779


def test_a_program_log_is_named_a_log(tmp_path: Path) -> None:
    text = "".join(
        f"2026-12-05 10:01:0{i},123 INFO step {i} of the training loop finished and the loss is going down\n"
        for i in range(6)
    )
    rec = tmp_path / "r"
    rec.mkdir()
    (rec / "train.out").write_text(text)
    rc = run_cli("replay", str(rec), "--db", str(tmp_path / "t.duckdb"), "--json")
    assert "documentation" not in rc.stdout + rc.stderr
    assert "a program's log (6 of 6 lines start with a time stamp" in rc.stdout + rc.stderr


# -- nccl-tests: a hung run, the op, the GPU model ----------------------------------------------------------


def test_a_hung_run_is_stored_as_not_finished(tmp_path: Path) -> None:
    db, files = _replay(
        tmp_path,
        {"a": PASTED / "nccl-hung-2node.txt", "b": PASTED / "nccl-hung-1gpu.txt"},
        "--at",
        "2026-12-05T10:00:00Z",
    )
    for name in ("a", "b"):
        assert files[name]["status"] == "read" and files[name]["runs"] == 1, files[name]
        assert any("did not finish" in n for n in files[name]["notes"])
    rows = _sql(db, "SELECT op, nodes, finished, model FROM nccl_runs ORDER BY ranks DESC")
    assert rows == [
        ("all_reduce", ["ranokau", "lascar"], False, "NVIDIA A100-SXM4-80GB"),
        ("all_reduce", ["NAME"], False, "NVIDIA RTX A6000"),
    ]
    rc = run_cli("nccl", "--db", str(db), "--json", "--no-rows")
    out = json.loads(rc.stdout)
    assert [r["finished"] for r in out] == [False, False]
    table = run_cli("nccl", "--db", str(db)).stdout
    assert "NO (hung/killed)" in table


def _without_op(text: str) -> str:
    """The all_gather table with the lines that name its binary left out: only what the test adds names it."""
    return "".join(ln for ln in text.splitlines(keepends=True) if "_perf" not in ln)


def test_the_op_from_a_wrapper_option_and_from_the_file_name(tmp_path: Path) -> None:
    bare = _without_op(ALLGATHER.read_text())
    db, files = _replay(
        tmp_path,
        {
            "nccl-allgather-h100.txt": bare,
            "run-17.txt": "$ ./bench/nccl.sh -t all_gather -g 1\n" + bare,
            "run-18.txt": bare + "\n",  # not the same content as the first (that one is not read twice)
        },
        "--at",
        "2026-12-05T10:00:00Z",
    )
    ops = dict(_sql(db, "SELECT regexp_extract(source, '[^/]+$'), op FROM nccl_runs"))
    assert ops["nccl-allgather-h100.txt"] == "all_gather"
    assert ops["run-17.txt"] == "all_gather"
    assert ops["run-18.txt"] == "unknown"  # nothing names it: all_gather and alltoall rows look alike


def test_runs_of_different_models_are_not_peers(tmp_path: Path) -> None:
    text = NCCL290.read_text()
    assert "NVIDIA H100 80GB HBM3" in text
    db, _ = _replay(
        tmp_path,
        {"one.txt": text, "two.txt": text.replace("NVIDIA H100 80GB HBM3", "NVIDIA H200")},
        "--at",
        "2026-12-05T10:00:00Z",
    )
    with Store(str(db), read_only=True) as st:
        got = shapes(st)
        sku = {m for m, _d, _op, _n, _bw in nccl_largest_busbw(st)}  # the fleet baselines' SKU of each run
    assert sku == {"NVIDIA H100 80GB HBM3", "NVIDIA H200"}  # not '?' (no inventory names these nodes)
    models = {x["shape"][4] for x in got}
    assert {"NVIDIA H100 80GB HBM3", "NVIDIA H200"} <= models
    assert len({x["shape"] for x in got}) == 2 * len({x["shape"][:4] for x in got})


def test_an_old_store_opens_and_gains_the_columns(tmp_path: Path) -> None:
    db = tmp_path / "old.duckdb"
    with Store(str(db)) as st:
        st.con.execute("ALTER TABLE nccl_runs DROP COLUMN model")
        st.con.execute("ALTER TABLE nccl_runs DROP COLUMN finished")
        st.con.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    rc = run_cli("nccl", "--db", str(db), "--json")
    assert rc.returncode == 0 and json.loads(rc.stdout) == [], rc.stderr
    with Store(str(db)) as st:
        cols = {r["column_name"] for r in st.query("DESCRIBE nccl_runs")}
    assert {"model", "finished"} <= cols


# -- the same line stored once -------------------------------------------------------------------------------


def test_the_same_kernel_line_in_kern_log_journalctl_and_a_gz_is_stored_once(tmp_path: Path) -> None:
    gz = tmp_path / "k.gz"
    gz.write_bytes(gzip.compress((KMSG / "kern.log").read_bytes()))
    db, files = _replay(
        tmp_path,
        {
            "a.log": KMSG / "kern.log",
            "b.txt": KMSG / "journalctl-k-short.txt",
            "c.txt": KMSG / "journalctl-k-short-precise.txt",
            "d.log.gz": gz,
        },
    )
    assert _sql(db, "SELECT count(*) FROM events WHERE kind = 'xid'") == [(1,)]
    assert sum(f["duplicate_events"] for f in files.values()) == 3
    assert files["a.log"]["duplicate_events"] == 0 and files["a.log"]["events"] == 1
    rc = run_cli("replay", str(tmp_path / "rec"), "--db", str(tmp_path / "u.duckdb"))
    assert "1 duplicate event dropped (already stored from another file)" in rc.stdout


def test_the_same_text_at_another_time_stays_two(tmp_path: Path) -> None:
    line = (KMSG / "kern.log").read_text().splitlines()[1]
    later = line.replace("11:38:47", "11:39:47")
    db, files = _replay(tmp_path, {"a": line + "\n", "b": line + "\n" + later + "\n"})
    assert _sql(db, "SELECT count(*) FROM events WHERE kind = 'xid'") == [(2,)]
    assert (files["a"]["events"], files["b"]["events"], files["b"]["duplicate_events"]) == (1, 1, 1)


def test_a_line_twice_in_one_file_stays_twice(tmp_path: Path) -> None:
    line = (KMSG / "kern.log").read_text().splitlines()[1]
    db, files = _replay(tmp_path, {"a": line + "\n", "b": line + "\n" + line + "\n"})
    assert _sql(db, "SELECT count(*) FROM events WHERE kind = 'xid'") == [(2,)]
    assert files["b"]["duplicate_events"] == 1
