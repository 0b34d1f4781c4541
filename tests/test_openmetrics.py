"""The bulk OpenMetrics/Prometheus parser against prometheus_client's (the reference) and bad input."""

from __future__ import annotations

import gzip
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families
from prometheus_client.parser import text_string_to_metric_families as prom_families

from fleettool.formats.errors import ParseError
from fleettool.formats.openmetrics import ExpositionParser, parse_bytes, parse_series, parse_stream
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
            ref.append((s.name, tuple(sorted(s.labels.items())), round(float(s.timestamp), 3), s.value))
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
            ref.append((s.name, tuple(sorted(s.labels.items())), round(float(s.timestamp), 3), s.value))
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


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_fuzz_arbitrary_bytes_never_raise_out_of_the_parser(data: bytes) -> None:
    p = ExpositionParser("fuzz", default_ts=1.0)
    c = parse_bytes(p, data)
    assert len(c.sid) == len(c.ts) == len(c.value)
    for issue in p.issues:
        assert issue.path == "fuzz" and issue.line >= 1


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet='ab{}=",# \n01.5eE+-NaInf', max_size=200))
def test_fuzz_prometheus_like_text(data: str) -> None:
    p = ExpositionParser("fuzz", default_ts=1.0)
    parse_bytes(p, data.encode())
    strict = ExpositionParser("fuzz", default_ts=1.0, strict=True)
    try:
        parse_bytes(strict, data.encode())
    except ParseError as e:
        assert str(e).startswith("fuzz:")
