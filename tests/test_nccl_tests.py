"""nccl-tests parser and reader: every sample version, values asserted."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleettool.formats.nccl_json import parse_nccl_json
from fleettool.formats.nccl_prefix import clean_line, split_prefix
from fleettool.formats.nccl_run import NcclRow, NcclRun, infer_op
from fleettool.formats.nccl_tests import parse_nccl_text
from fleettool.recording.files import iter_lines
from tests.conftest import FIXTURES, run_cli

S = FIXTURES / "samples" / "nccl-tests"
L = FIXTURES / "formats" / "nccl-tests"  # the same outputs behind launcher prefixes


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


H100_1N = ("all_reduce", 8, ["node005"], 6, 439.369, 476.53)
H100_2N = ("all_reduce", 16, ["node005", "node007"], 11, 142.735, 167.87)
H100_RING = ("all_reduce", 16, ["node005", "node007"], 11, 85.5294, 102.27)
A100 = ("all_reduce", 8, ["dkh"], 25, 34.9024, 182.90)
H200 = ("all_reduce", 1, ["vm"], 4, 0.0, 0.0)
LAUNCHER_FIXTURES = {
    "mpirun-tag-output.txt": H100_2N,
    "srun-label.txt": H100_RING,
    "skypilot-all-gather.txt": ("all_gather", 16, ["node005", "node007"], 11, 38.5127, 44.95),
    "torchrun-default0.txt": A100,
    "torchrun-rank0.txt": H200,
    "kubectl-prefix-timestamps.txt": H100_1N,
    "pod-name-prefix.txt": A100,
    "iso-timestamps.txt": H200,
    "logging-timestamps.txt": A100,
    "bracket-timestamps.txt": H100_1N,
    "syslog.txt": H100_1N,
    "combined-iso-skypilot-tag.txt": H100_RING,
}


@pytest.mark.parametrize("name", sorted(LAUNCHER_FIXTURES))
def test_launcher_fixtures_parse_like_the_bare_output(name: str) -> None:
    op, nranks, nodes, nrows, avg, peak = LAUNCHER_FIXTURES[name]
    runs, issues = parse_nccl_text(iter_lines(L / name), path=name)
    assert issues == []
    (run,) = runs
    assert (run.op, run.nranks, run.nodes, len(run.rows), run.truncated) == (op, nranks, nodes, nrows, False)
    assert run.avg_busbw_gbps == pytest.approx(avg) and run.peak_busbw_gbps == pytest.approx(peak)
    assert all(r.oop_busbw_gbps is not None and r.oop_time_us is not None for r in run.rows)


def test_launcher_fixture_rows_equal_the_unprefixed_sample() -> None:
    (bare,) = runs_of("nccl-tests-a100x8-2.19.4-allreduce.txt")
    for name in ("torchrun-default0.txt", "pod-name-prefix.txt", "logging-timestamps.txt"):
        (run,), _ = parse_nccl_text(iter_lines(L / name), path=name)
        assert run.rows == bare.rows and run.ranks == bare.ranks and run.version == bare.version == "2.19.4"


def test_all_gather_op_from_the_command_line_not_the_header() -> None:
    lines = (L / "skypilot-all-gather.txt").read_text().splitlines()
    assert not any("Collective test" in ln for ln in lines)  # the header does not name the op
    (run,), _ = parse_nccl_text(lines)
    assert run.op == "all_gather" and run.rows[0].redop == "none" and run.rows[0].count == 8388608 // 4 // 16
    # without the command line: the file-name hint, then "unknown" (all_gather and alltoall rows look alike)
    body = [ln for ln in lines if "mpirun" not in ln]
    assert parse_nccl_text(body, op_hint="gpu17_all_gather")[0][0].op == "all_gather"
    assert parse_nccl_text(body, op_hint="nccl-run-7")[0][0].op is None
    # the trailer of newer versions wins over a stale command line
    trailer = "(head, rank=0, pid=3808) [1,0]<stdout>:# Collective test concluded: alltoall_perf"
    assert parse_nccl_text(["./build/all_gather_perf -b 8", *body, trailer])[0][0].op == "alltoall"


def test_truncated_table_kept_and_named() -> None:
    runs, issues = parse_nccl_text(iter_lines(L / "srun-truncated.txt"), path="cut.txt")
    (run,) = runs
    assert issues == [] and run.truncated and len(run.rows) == 6 and run.avg_busbw_gbps is None
    assert run.rows[-1].size_bytes == 268435456 and run.rows[-1].ip_busbw_gbps == pytest.approx(95.88)


def test_documentation_is_not_a_run() -> None:
    for doc in (S / "SOURCES.md", L / "SOURCES.md", S / "nccl-tests-azure-8gpu-busbw-reference.md"):
        assert parse_nccl_text(iter_lines(doc), path=doc.name) == ([], [])
    # a footer or a banner alone is not a run either
    assert parse_nccl_text(["# Avg bus bandwidth    : 12.5", "# nThread 1 nGpus 8 minBytes 8"]) == ([], [])


def test_interleaved_streams_parse_separately() -> None:
    header = "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    a = [
        "0: " + header,
        "0:     1024   256  float  sum  -1  10.0  0.10  0.10  0",
        "0: # Avg bus bandwidth : 0.10",
    ]
    b = [
        "1: " + header,
        "1:     2048   512  float  sum  -1  20.0  0.10  0.10  0",
        "1: # Avg bus bandwidth : 0.10",
    ]
    runs, issues = parse_nccl_text([a[0], b[0], a[1], b[1], a[2], b[2]])
    assert issues == [] and [[r.size_bytes for r in run.rows] for run in runs] == [[1024], [2048]]
    assert not any(r.truncated for r in runs)


@pytest.mark.parametrize(
    ("line", "key", "text"),
    [
        ("[1,0]<stdout>:#  Rank  0", "[1,0]", "#  Rank  0"),
        (" 0:      8388608   2097152", "0", "     8388608   2097152"),
        (" 12: # nThread 1", "12", "# nThread 1"),
        ("(head, rank=0, pid=3808) [1,0]<stdout>: # size", "head, rank=0, pid=3808|[1,0]", "# size"),
        ("(worker1, rank=1, pid=3700, ip=10.0.0.2) 1024", "worker1, rank=1, pid=3700, ip=10.0.0.2", "1024"),
        ("[default0]:# nThread", "[default0]", "# nThread"),
        ("[rank3]: 1024", "[rank3]", "1024"),
        ("[pod/mpi-worker-0/worker] # Avg", "[pod/mpi-worker-0/worker]", "# Avg"),
        ("mpi-launcher-xyz: # Avg", "mpi-launcher-xyz", "# Avg"),
        ("2024-05-01T12:00:00.123Z # Avg", "", "# Avg"),
        ("2024-05-01 12:00:00,123 # Avg", "", "# Avg"),
        ("[2024-05-01 12:00:00] # Avg", "", "# Avg"),
        ("May  1 12:00:00 host # Avg", "host", "# Avg"),
        ("May  1 12:00:00 host nccl[12]: # Avg", "host", "# Avg"),
        ("2024-05-01T12:00:00Z [pod/l-0/c] 0: [1,0]<stdout>:# x", "[pod/l-0/c]|0|[1,0]", "# x"),
        (
            "#  Rank  0 Group  0 Pid 1 on node005 device  0 [0x18] H100",
            "",
            "#  Rank  0 Group  0 Pid 1 on node005 device  0 [0x18] H100",
        ),
    ],
)
def test_split_prefix_shapes(line: str, key: str, text: str) -> None:
    assert split_prefix(line) == (key, text)


def test_unicode_in_a_row_is_a_file_line_issue() -> None:
    header = "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    runs, issues = parse_nccl_text(
        [
            header,
            "²",
            "1024 256 float sum -1 1.0 ²2 3 0",
            "١٠٢٤ 256 float sum -1 1.0 2 3 0",
            "8 2 float sum -1 1 2 3 0",
        ],
        path="x.txt",
    )
    assert [(i.path, i.line) for i in issues] == [("x.txt", 2), ("x.txt", 3), ("x.txt", 4)]
    assert all("non-ASCII" in i.message for i in issues)
    assert [r.size_bytes for r in runs[0].rows] == [8]


def test_out_of_range_numbers_are_not_stored() -> None:
    header = "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    big = "9" * 30
    runs, issues = parse_nccl_text(
        [header, f"{big} 2 float sum -1 1 2 3 0", "8 2 float sum -1 1e999 inf 3 " + big]
    )
    assert [i.line for i in issues] == [2]
    (row,) = runs[0].rows
    assert (row.oop_time_us, row.oop_algbw_gbps, row.oop_busbw_gbps, row.oop_wrong) == (None, None, 3.0, None)


HEADER = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"


def _check_invariants(lines: list[str], runs: list, issues: list) -> None:  # type: ignore[type-arg]
    assert sum(len(r.rows) for r in runs) + len(issues) <= len(lines)
    assert len(runs) <= len(lines)
    for r in runs:
        assert r.rows and 1 <= r.first_line <= len(lines)
        for row in r.rows:
            assert 0 <= row.size_bytes < 1 << 63
            for v in vars(row).values():
                if isinstance(v, float):
                    assert math.isfinite(v)
        for v in (r.avg_busbw_gbps, r.peak_busbw_gbps):
            assert v is None or math.isfinite(v)
    for i in issues:
        assert i.path == "fuzz" and 1 <= i.line <= len(lines) and i.message


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(max_size=120),
            st.from_regex(r"\s*\d{1,12}( +[-\w.#/]{1,10}){0,14}", fullmatch=True),
            st.from_regex(
                r"(\[\d,\d\]<stdout>:| ?\d{1,2}: |\(head, rank=0, pid=1\) )?\s*\d{1,25}( +[-\w.²]{1,8}){4,13}",
                fullmatch=True,
            ),
        ),
        max_size=30,
    )
)
def test_fuzz_text_invariants(lines: list[str]) -> None:
    with_header = [HEADER, *lines]
    _check_invariants(with_header, *parse_nccl_text(with_header, path="fuzz"))
    _check_invariants(lines, *parse_nccl_text(lines, path="fuzz"))


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
def test_fuzz_json_invariants(doc: object) -> None:
    text = json.dumps(doc)  # floats include NaN and Infinity, which json.loads accepts
    runs, issues = parse_nccl_json(text, path="fuzz")
    for r in runs:
        assert isinstance(r.nranks, int) and (r.ngpus is None or isinstance(r.ngpus, int))
        for row in r.rows:
            assert 0 <= row.size_bytes < 1 << 63 and (row.count is None or 0 <= row.count < 1 << 63)
            for v in vars(row).values():
                assert not isinstance(v, float) or math.isfinite(v)
                assert not isinstance(v, int) or abs(v) < 1 << 63
        assert r.avg_busbw_gbps is None or math.isfinite(r.avg_busbw_gbps)
    for i in issues:
        assert i.path == "fuzz" and i.line >= 1 and i.message


def test_json_out_of_range_numbers_are_issues_not_tracebacks() -> None:
    runs, issues = parse_nccl_json(
        '{"results": [{"size": 1e30}, {"size": Infinity}, {"size": 8, "out_of_place": {"time": NaN, "nwrong": 1e300}}],'
        ' "config": {"ngpus": "x"}, "out_of_bounds": {"count": Infinity}}',
        path="j.json",
    )
    assert [str(i).split(" (")[0] for i in issues] == ["j.json:1: bad result entry"] * 2
    (run,) = runs
    assert [(r.size_bytes, r.oop_time_us, r.oop_wrong) for r in run.rows] == [(8, None, None)]
    assert run.ngpus is None and run.out_of_bounds is None


def test_infer_op_last_resort() -> None:
    def run(count: int, redop: str, root: int, ngpus: int = 8) -> NcclRun:
        r = NcclRun(nthreads=1, ngpus=ngpus)
        r.rows.append(NcclRow(1048576, count, "float", redop, root, 10.0, 1.0, 1.0, 0))
        return r

    assert infer_op(run(262144, "sum", -1)) == "all_reduce"
    assert infer_op(run(262144 // 8, "sum", -1)) == "reduce_scatter"
    assert infer_op(run(262144, "sum", 0)) == "reduce"
    assert infer_op(run(262144, "none", 0)) == "broadcast"
    assert infer_op(run(262144 // 8, "none", -1)) is None  # all_gather or alltoall: the rows cannot tell
    assert infer_op(run(262144 // 8, "sum", -1, ngpus=1)) is None
