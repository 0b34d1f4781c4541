"""nccl-tests parser and reader: every sample version, values asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleettool.formats.nccl_tests import clean_line, parse_nccl_json, parse_nccl_text
from fleettool.recording.files import iter_lines
from tests.conftest import FIXTURES, run_cli

S = FIXTURES / "samples" / "nccl-tests"


def runs_of(name: str):  # type: ignore[no-untyped-def]
    runs, issues = parse_nccl_text(iter_lines(S / name), path=name)
    assert issues == []
    return runs


def test_h100x8_single_node_and_two_nodes() -> None:
    runs = runs_of("nccl-tests-h100x8-single-node-and-2node-issue290.txt")
    assert len(runs) == 3
    one, two, ring = runs
    assert (one.op, one.nranks, one.nodes, len(one.rows)) == ("all_reduce", 8, ["node005"], 6)
    assert one.avg_busbw_gbps == pytest.approx(439.369) and one.peak_busbw_gbps == pytest.approx(476.53)
    # the footer is the mean of every busbw printed, out-of-place and in-place (SOURCES.md)
    mean = sum(v for r in one.rows for v in (r.oop_busbw_gbps, r.ip_busbw_gbps)) / 12  # type: ignore[misc]
    assert mean == pytest.approx(439.369, abs=0.01)
    assert one.rows[-1].oop_time_us == 15870.0  # integer-looking time column
    assert (two.nranks, two.nodes, two.avg_busbw_gbps) == (16, ["node005", "node007"], pytest.approx(142.735))
    assert two.rows[0].oop_wrong is None and two.wrong is None  # N/A when validation is off
    assert two.rows[-1].oop_busbw_gbps == pytest.approx(155.57)
    assert two.rows[-1].oop_busbw_gbps == pytest.approx(two.rows[-1].oop_algbw_gbps * 2 * 15 / 16, abs=0.01)
    assert ring.avg_busbw_gbps == pytest.approx(85.5294) and ring.rows[-1].oop_busbw_gbps == pytest.approx(
        89.90
    )


def test_a100_2_19_4() -> None:
    (run,) = runs_of("nccl-tests-a100x8-2.19.4-allreduce.txt")
    assert run.version == "2.19.4" and run.op == "all_reduce" and run.nranks == 8 and run.nodes == ["dkh"]
    assert len(run.rows) == 25 and run.rows[0].size_bytes == 8
    assert run.peak_busbw_gbps == pytest.approx(182.90) and run.avg_busbw_gbps == pytest.approx(34.9024)
    assert run.ranks[0].bus == "0000:14:00"


def test_h200_per_iteration_columns() -> None:
    (run,) = runs_of("nccl-tests-2.19.6-h200x1-I1.txt")
    r = run.rows[-1]
    assert (r.size_bytes, r.oop_time_us, r.oop_algbw_gbps, r.ip_time_us, r.ip_algbw_gbps) == (
        134217728,
        67.96,
        1974.8,
        2.20,
        60986.0,
    )


def test_variants_excerpts() -> None:
    runs = runs_of("nccl-tests-format-variants-excerpts.txt")
    first = runs[0]  # no redop/root columns, `error` column in %e
    assert len(first.rows) == 12 and first.rows[0].size_bytes == 65536 and first.rows[0].oop_wrong is None
    assert first.avg_busbw_gbps == pytest.approx(6.6972) and first.rows[-1].ip_busbw_gbps == pytest.approx(
        21.86
    )
    tagged = [r for r in runs if any(x.oop_time_us == 24410 for x in r.rows)]
    assert len(tagged) == 1  # mpirun "[0]" tags inserted mid-line
    assert tagged[0].rows[0].size_bytes == 1048576 and tagged[0].rows[0].ip_busbw_gbps == pytest.approx(0.87)
    bcast = [r for r in runs if r.rows and r.rows[0].redop == "none"]
    assert bcast and bcast[0].op == "broadcast" and bcast[0].avg_busbw_gbps == pytest.approx(3.41227)
    spark = [r for r in runs if r.version == "2.20.0"][0]
    assert spark.nodes == ["spark-d708", "spark-dbf4"] and spark.rows[0].ip_busbw_gbps == pytest.approx(0.27)


def test_json() -> None:
    runs, issues = parse_nccl_json((S / "nccl-tests-2.19.6-h200x1-J.json").read_text())
    assert issues == [] and len(runs) == 1
    run = runs[0]
    assert run.op == "all_reduce" and run.nranks == 1 and run.nodes == ["vm"] and run.nccl_version == "2.28.9"
    assert run.rows[-1].size_bytes == 536870912 and run.rows[-1].oop_algbw_gbps == pytest.approx(2084.804015)


def test_launcher_prefixes() -> None:
    assert clean_line(" 0:      8388608       2097152     float").strip().startswith("8388608")
    assert "[" not in clean_line("[1,0]<stdout>:   1024  256 float")


def test_replay_and_cli_json(tmp_path: Path) -> None:
    db = tmp_path / "n.duckdb"
    rc = run_cli("replay", str(FIXTURES / "scenarios" / "nccl-pairwise-straggler"), "--db", str(db))
    assert rc.returncode == 0, rc.stderr
    out = json.loads(run_cli("nccl", "--db", str(db), "--json").stdout)
    assert len(out) == 5
    by_pair = {tuple(r["nodes"]): r for r in out}
    slow = by_pair[("gpu-33", "gpu-34")]
    assert slow["op"] == "all_reduce" and slow["ranks"] == 16
    assert slow["avg_busbw_gbps"] == pytest.approx(218.6127) and slow["peak_busbw_gbps"] == pytest.approx(
        294.61
    )
    assert len(slow["rows"]) == 8 and slow["rows"][-1]["size_bytes"] == 17179869184
    assert by_pair[("gpu-33", "gpu-35")]["peak_busbw_gbps"] == pytest.approx(475.86)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(max_size=120), st.from_regex(r"\s*\d{1,12}( +[-\w.#/]{1,10}){0,14}", fullmatch=True)
        ),
        max_size=30,
    )
)
def test_fuzz_text_never_raises(lines: list[str]) -> None:
    parse_nccl_text(
        [
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
            *lines,
        ]
    )
    parse_nccl_text(lines)


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.floats() | st.text(max_size=10),
        lambda c: (
            st.lists(c, max_size=4)
            | st.dictionaries(
                st.sampled_from(["results", "size", "args", "config", "devices", "out_of_place", "time"]),
                c,
                max_size=4,
            )
        ),
        max_leaves=20,
    )
)
def test_fuzz_json_never_raises(doc: object) -> None:
    parse_nccl_json(json.dumps(doc))
