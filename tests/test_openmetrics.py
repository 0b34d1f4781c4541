"""The bulk OpenMetrics/Prometheus parser against prometheus_client's (the reference) and bad input."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families
from prometheus_client.parser import text_string_to_metric_families as prom_families

from fleettool.collectors.series import MetricsIngest, gpu_index
from fleettool.formats.errors import ParseError
from fleettool.formats.openmetrics import parse_bytes, parse_stream
from fleettool.formats.openmetrics_lines import TS_MAX, TS_MIN, ExpositionParser, decide_millis, parse_series
from tests.conftest import FIXTURES, SCENARIOS


def _ours(text: bytes, **kw: object) -> list[tuple[str, tuple[tuple[str, str], ...], float, float]]:
    p = ExpositionParser("x", **kw)  # type: ignore[arg-type]
    c = parse_bytes(p, text)
    out = []
    for sid, ts, v in zip(list(c.sid), list(c.ts), list(c.value), strict=True):
        out.append((p.series.names[sid], tuple(sorted(p.series.labels[sid].items())), round(ts, 3), v))
    return sorted(out)


def test_differential_against_prometheus_client_on_a_scenario() -> None:
    raw = gzip.decompress((SCENARIOS / "thermal-throttle" / "dcgm-exporter.om.gz").read_bytes()).decode()
    lines = raw.splitlines()
    # the reference parser is slow (~15k samples/s): compare a slice of whole metric families
    head = "\n".join(lines[:3000])
    cut = head.rfind("\n# TYPE")
    text = head[:cut] + "\n# EOF\n"
    ref = []
    for fam in om_families(text):
        for s in fam.samples:
            ref.append((s.name, tuple(sorted(s.labels.items())), round(float(s.timestamp), 3), s.value))  # type: ignore[arg-type]
    mine = _ours(text.encode(), millis=False)
    assert len(ref) > 2000
    assert mine == sorted(ref)


def test_prometheus_text_with_millisecond_timestamps_matches_reference() -> None:
    text = (
        "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",modelName="NVIDIA H100 80GB HBM3",Hostname="n1"} 41 1795996800123\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="1", UUID="GPU-b",Hostname="n1"} 43 1795996800123\n'
    )
    ref = []
    for fam in prom_families(text):
        for s in fam.samples:
            ref.append((s.name, tuple(sorted(s.labels.items())), round(float(s.timestamp), 3), s.value))  # type: ignore[arg-type]
    assert _ours(text.encode()) == sorted(ref)
    assert ref[0][2] == pytest.approx(1795996800.123)


def test_dcgm_exporter_samples_parse_without_issues() -> None:
    lines = [
        ln
        for ln in (FIXTURES / "samples" / "dcgm-exporter" / "dcgm-exporter-metrics-samples.txt")
        .read_text()
        .splitlines()
        if ln.startswith("DCGM_") or ln.startswith("# ")
    ]
    p = ExpositionParser("samples.txt", default_ts=1.0)
    c = parse_bytes(p, "\n".join(lines).encode())
    # one excerpt in the samples file is cut before its value; it must be reported, not guessed
    assert [(i.line, i.message) for i in p.issues] == [(62, "sample has no value")]
    assert lines[61].startswith("DCGM_FI_DEV_XID_ERRORS{err_code=")
    names = set(p.series.names)
    assert "DCGM_FI_DEV_MEMORY_TEMP" in names and "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in names
    mig = [lab for lab in p.series.labels if lab.get("GPU_I_ID")]
    assert mig and all("GPU_I_PROFILE" in lab for lab in mig)
    sentinel = [v for sid, v in zip(list(c.sid), list(c.value), strict=True) if v > 9e18]
    assert sentinel, "the README sample's not-supported sentinel must parse as a number (dropped later)"


def test_bad_lines_name_file_and_line_and_are_skipped() -> None:
    text = b'a{x="1"} 1 1700000000\nbad{ 2 1700000000\nb{y="2"} abc 1700000000\nc 3 1700000000\n'
    p = ExpositionParser("rec/dcgm.om")
    c = parse_bytes(p, text)
    assert sorted(p.series.names[s] for s in c.sid) == ["a", "c"]
    assert [str(i) for i in sorted(p.issues, key=lambda i: i.line)] == [
        "rec/dcgm.om:2: unterminated label set",
        "rec/dcgm.om:3: bad number in sample value",
    ]


def test_strict_mode_raises_with_file_and_line() -> None:
    p = ExpositionParser("f.prom", strict=True)
    with pytest.raises(ParseError, match=r"^f\.prom:2: "):
        parse_bytes(p, b'ok{a="1"} 1 1700000000\nnot a sample line at all\n')


def test_special_values_exemplars_and_missing_timestamps() -> None:
    text = (
        b'a{x="1"} NaN 1700000000.5\nb{x="1"} +Inf 1700000000.5\nc{x="1"} 7\n'
        b'd_total{x="1"} 2 1700000001 # {trace_id="abc"} 1.0\n# EOF\n'
    )
    p = ExpositionParser("f", default_ts=42.0)
    c = parse_bytes(p, text)
    got = {p.series.names[s]: (t, v) for s, t, v in zip(list(c.sid), list(c.ts), list(c.value), strict=True)}
    assert math.isnan(got["a"][1]) and got["b"][1] == math.inf
    assert got["c"] == (42.0, 7.0)
    assert got["d_total"] == (1700000001.0, 2.0)
    assert p.saw_eof and not p.issues


def test_label_values_with_spaces_quotes_and_escapes() -> None:
    name, labels = parse_series('m{a="x y",b="q\\"uote",c="back\\\\slash",d="line\\nbreak"}')
    assert name == "m" and labels == {"a": "x y", "b": 'q"uote', "c": "back\\slash", "d": "line\nbreak"}


def test_stream_parse_equals_whole_parse_across_block_boundaries() -> None:
    raw = gzip.decompress((SCENARIOS / "pcie-width-degraded" / "dcgm-exporter.om.gz").read_bytes())
    whole = ExpositionParser("w")
    c = parse_bytes(whole, raw)
    streamed = ExpositionParser("s")
    blocks = [raw[i : i + 7777] for i in range(0, len(raw), 7777)]
    import fleettool.formats.openmetrics as om

    old = om.BLOCK
    om.BLOCK = 100_000  # force many blocks and carries
    try:
        chunks = list(parse_stream(streamed, blocks))
    finally:
        om.BLOCK = old
    assert len(chunks) > 5
    n = sum(len(ch.sid) for ch in chunks)
    assert n == len(c.sid) == 19360


@pytest.mark.parametrize(
    "ts", ["1e30", "-5", "NaN", "99999999999999999999", "+Inf", "0", "abc", "4102444801"]
)
@pytest.mark.parametrize("millis", [None, True, False])
def test_absurd_timestamps_are_file_line_issues_on_both_paths(ts: str, millis: bool | None) -> None:
    good = "1714564800000" if millis else "1714564800"
    text = (
        f'a{{x="1"}} 1 {good}\n'
        f'a{{x="1"}} 2 {ts}\n'  # the vectorised path
        f"b 3 {ts}\n"  # no labels: the line-by-line path
        f'a{{x="1"}} 4 {ts} # {{trace_id="t"}} 1\n'  # an exemplar: the line-by-line path
    ).encode()
    p = ExpositionParser("f.prom", millis=millis)
    c = parse_bytes(p, text)
    assert list(c.value) == [1.0] and list(c.ts) == [1714564800.0]
    assert [(i.path, i.line) for i in sorted(p.issues, key=lambda i: i.line)] == [
        ("f.prom", n) for n in (2, 3, 4)
    ]
    assert all("timestamp" in i.message for i in p.issues)
    with pytest.raises(ParseError, match=r"^f\.prom:2: "):
        parse_bytes(ExpositionParser("f.prom", millis=millis, strict=True), text)


def test_first_plausible_timestamp_decides_seconds_or_millis() -> None:
    assert (decide_millis(1714564800), decide_millis(1714564800123), decide_millis(-5)) == (False, True, None)
    assert decide_millis(float("nan")) is None and decide_millis(5e10) is None  # between the two ranges
    for first in (b"-5", b"1e30", b"NaN"):
        p = ExpositionParser("f")
        c = parse_bytes(p, b'a{x="1"} 1 ' + first + b'\na{x="1"} 2 1714564800123\na{x="1"} 3 1714564801123\n')
        assert (
            p.millis is True
            and list(c.ts) == [1714564800.123, 1714564801.123]
            and [i.line for i in p.issues] == [1]
        )
    p = ExpositionParser("f")
    parse_bytes(p, b"b 1 -5\nb 2 1714564800.5\n")  # the same on the line-by-line path
    assert p.millis is False and [i.line for i in p.issues] == [1]


def test_special_values_stay_legal_with_millisecond_timestamps() -> None:
    p = ExpositionParser("f")
    c = parse_bytes(
        p, b'a{x="1"} NaN 1714564800000\na{x="1"} +Inf 1714564800000\na{x="1"} -Inf 1714564800000\n'
    )
    assert not p.issues and math.isnan(c.value[0]) and list(c.value[1:]) == [math.inf, -math.inf]


def test_samples_without_timestamps_one_counted_issue_or_default_ts() -> None:
    body = b"# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n" + b"".join(
        b'DCGM_FI_DEV_GPU_TEMP{gpu="%d",UUID="GPU-%d"} 4%d\n' % (g, g, g) for g in range(8)
    )
    p = ExpositionParser("gpu-17.prom", millis=None)
    assert sum(len(c.sid) for c in parse_stream(p, [body])) == 0
    assert [str(i) for i in p.issues] == [
        "gpu-17.prom:2: sample has no timestamp and none was given for the file (8 samples from this line on skipped)"
    ]
    p = ExpositionParser("gpu-17.prom", millis=None, default_ts=1714564800.0)
    chunks = list(parse_stream(p, [body]))
    assert not p.issues and [t for c in chunks for t in c.ts] == [1714564800.0] * 8
    ing = MetricsIngest(p, "gpu-17")
    assert sum(ing.table(c).num_rows for c in chunks) == 8  # a curl'd scrape stores its samples


@pytest.mark.parametrize(
    ("label", "want"),
    [
        ("0", 0),
        (" 7 ", 7),
        ("1023", 1023),
        ("1024", None),
        ("99999999", None),
        ("-1", None),
        ("abc", None),
        ("٣", None),
        ("", None),
        (None, None),
    ],
)
def test_gpu_index(label: str | None, want: int | None) -> None:
    assert gpu_index(label) == want


def test_bad_gpu_label_is_an_issue_and_the_samples_keep_no_gpu() -> None:
    text = (
        b'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",Hostname="n1"} 41 1714564800\n'
        b'DCGM_FI_DEV_GPU_TEMP{gpu="99999999",UUID="GPU-b",Hostname="n1"} 42 1714564800\n'
        b'DCGM_FI_DEV_GPU_TEMP{gpu="-1",UUID="GPU-c",Hostname="n1"} 43 1714564800\n'
        b'DCGM_FI_DEV_GPU_TEMP{gpu="abc",UUID="GPU-d",Hostname="n1"} 44 1714564800\n'
        b'DCGM_FI_DEV_GPU_TEMP{gpu="99999999",UUID="GPU-b",Hostname="n1"} 45 1714564860\n'
    )
    p = ExpositionParser("f.prom")
    ing = MetricsIngest(p, "x")
    t = ing.table(parse_bytes(p, text))
    assert t.column("gpu").to_pylist() == [0, None, None, None, None]
    assert t.column("uuid").to_pylist() == ["GPU-a", "GPU-b", "GPU-c", "GPU-d", "GPU-b"]
    assert [(i.line, i.message.split(" of ")[0]) for i in p.issues] == [
        (2, "gpu label '99999999'"),
        (3, "gpu label '-1'"),
        (4, "gpu label 'abc'"),
    ]  # once per series, at its first line
    strict = ExpositionParser("f.prom", strict=True)
    with pytest.raises(ParseError, match=r"^f\.prom:2: gpu label"):
        MetricsIngest(strict, "x").table(parse_bytes(strict, text))


def _check(p: ExpositionParser, data: bytes, c: object) -> None:
    lines = data.count(b"\n") + 1
    sid, ts, value = c.sid, c.ts, c.value  # type: ignore[attr-defined]
    assert len(sid) == len(ts) == len(value) <= lines
    assert all(TS_MIN <= t <= TS_MAX or t == 1.0 for t in list(ts))  # 1.0: the default_ts given
    assert all(0 <= s < len(p.series.names) for s in list(sid))
    assert len(p.series.lines) == len(p.series.names)
    for issue in p.issues:
        assert issue.path == "fuzz" and 1 <= issue.line <= lines and issue.message


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_fuzz_arbitrary_bytes_invariants(data: bytes) -> None:
    p = ExpositionParser("fuzz", default_ts=1.0)
    _check(p, data, parse_bytes(p, data))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(alphabet='ab{}=",# \n01.5eE+-NaInf', max_size=60),
            st.from_regex(
                r'[a-z]{1,4}(\{gpu="[-0-9a-z²]{0,9}"\})? [-+0-9.eENaInf]{1,8}( [-+0-9.eENaInf]{1,22})?',
                fullmatch=True,
            ),
        ),
        max_size=20,
    )
)
def test_fuzz_prometheus_like_text_invariants(lines: list[str]) -> None:
    data = "\n".join(lines).encode()
    p = ExpositionParser("fuzz", default_ts=1.0)
    c = parse_bytes(p, data)
    _check(p, data, c)
    t = MetricsIngest(p, "n").table(c)  # the store's columns: no overflow, no traceback
    assert t.num_rows <= len(c.sid)
    strict = ExpositionParser("fuzz", default_ts=1.0, strict=True)
    try:
        MetricsIngest(strict, "n").table(parse_bytes(strict, data))
    except ParseError as e:
        assert str(e).startswith("fuzz:")


def test_stream_over_an_open_file_equals_blocks_and_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """parse_stream reading a file straight into its buffer (readinto) parses what the same bytes give as
    blocks and as one whole: across reads and blocks, a line longer than a block (the buffer grows), the
    unfinished line carried to the front, and no newline at the end."""
    import fleettool.formats.openmetrics as om

    raw = gzip.decompress((SCENARIOS / "pcie-width-degraded" / "dcgm-exporter.om.gz").read_bytes())
    long_line = b'm{a="' + b"x" * 300_000 + b'"} 1 1714564800\n'
    cut = raw.index(b"\n", len(raw) // 2) + 1
    raw = raw[:cut] + long_line + raw[cut:].rstrip(b"\n").replace(b"# EOF", b"")
    path = tmp_path / "f.om"
    path.write_bytes(raw)
    whole = ExpositionParser("f")
    c = parse_bytes(whole, raw)
    monkeypatch.setattr(om, "BLOCK", 100_000)
    monkeypatch.setattr(om, "READ", 33_333)
    for source in ("file", "blocks"):
        p = ExpositionParser("f")
        if source == "file":
            with open(path, "rb", buffering=0) as f:
                chunks = list(parse_stream(p, f))
        else:
            chunks = list(parse_stream(p, [raw[i : i + 33_333] for i in range(0, len(raw), 33_333)]))
        assert len(chunks) > 5
        sids = [int(s) for ch in chunks for s in ch.sid]
        assert [p.series.names[s] for s in sids] == [whole.series.names[s] for s in c.sid]
        assert [float(t) for ch in chunks for t in ch.ts] == [float(t) for t in c.ts]
        assert [float(v) for ch in chunks for v in ch.value] == [float(v) for v in c.value]
        assert [str(i) for i in p.issues] == [str(i) for i in whole.issues]
        assert p.lineno == whole.lineno
