"""Blank lines, lines of whitespace and comments cost the bulk parser whole-array passes, never a line of Python
each (a gzip of newlines expands 1000-fold: 97 KB of it took 4 minutes and 1.1 GB), and parse exactly as the
line-by-line parser takes them."""

from __future__ import annotations

from collections.abc import Iterable

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fleettool.formats.openmetrics import parse_bytes, parse_stream
from fleettool.formats.openmetrics_lines import Chunk, ExpositionParser


class CountingParser(ExpositionParser):
    """The real parser, counting the lines the bulk path hands to its line-by-line feed."""

    fed = 0

    def feed(self, lines: Iterable[str]) -> Chunk:
        lines = list(lines)
        self.fed += len(lines)
        return super().feed(lines)


SAMPLES = [
    f'DCGM_FI_DEV_GPU_TEMP{{gpu="{g}",UUID="GPU-{g}",Hostname="n1"}} {40 + g} {1714564800 + t}'
    for t in range(0, 600, 60)
    for g in range(8)
]


def _samples(p: ExpositionParser, c: Chunk) -> list[tuple[str, tuple[tuple[str, str], ...], float, float]]:
    return [
        (p.series.names[s], tuple(sorted(p.series.labels[s].items())), float(t), float(v))
        for s, t, v in zip(list(c.sid), list(c.ts), list(c.value), strict=True)
    ]


def test_blank_whitespace_and_repeated_comment_lines_never_go_line_by_line() -> None:
    filler = ["", "   ", "\t \r", "\r", "", "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).", ""]
    filler += ["# TYPE DCGM_FI_DEV_GPU_TEMP gauge", "\x0b\x0c \x1c"]
    lines = []
    for s in SAMPLES:
        lines += filler * 300
        lines.append(s)
    text = ("\n".join(lines) + "\n# EOF\n").encode()
    p = CountingParser("f.om")
    c = parse_bytes(p, text)
    assert len(lines) > 200_000
    # three distinct comment texts, each fed once (where its last line is); no blank line, no sample
    assert p.fed == 3
    q = ExpositionParser("g.om")
    assert _samples(p, c) == _samples(q, parse_bytes(q, "\n".join(SAMPLES).encode()))
    assert p.saw_eof and not p.issues and p.lineno == len(lines) + 1
    assert p.series.types == {"DCGM_FI_DEV_GPU_TEMP": "gauge"}
    assert p.series.helps == {"DCGM_FI_DEV_GPU_TEMP": "GPU temperature (in C)."}


def test_a_block_of_nothing_but_newlines_streams_with_its_line_count() -> None:
    """A stream of blocks of newlines (what a gzip of them decompresses to), then a bad sample: its line number
    counts every blank line before it, across blocks."""
    p = CountingParser("f.om")
    blocks = [b"\n" * (1 << 20)] * 12 + [b'bad{ 1 1714564800\nok{a="1"} 2 1714564800\n']
    chunks = list(parse_stream(p, blocks))
    assert p.fed == 1  # the malformed line, not one of the blank lines
    assert [(i.line, i.message) for i in p.issues] == [(12 * (1 << 20) + 1, "unterminated label set")]
    assert sum(len(ch.sid) for ch in chunks) == 1 and p.lineno == 12 * (1 << 20) + 2


def test_a_file_of_only_comments_keeps_the_last_type_and_help_of_each_name() -> None:
    lines = []
    for i in range(20_000):
        lines.append(f"# HELP m{i % 3} help {i % 3}")
        lines.append(f"# TYPE m{i % 3} {'gauge' if i < 19_000 else 'counter'}")
        lines.append("# some other comment")
    p = CountingParser("c.om")
    c = parse_bytes(p, "\n".join(lines).encode())
    ref = ExpositionParser("c.om")
    ref.feed(lines)
    assert len(c.sid) == 0 and not p.issues and p.lineno == ref.lineno == len(lines)
    assert p.series.types == ref.series.types == {"m0": "counter", "m1": "counter", "m2": "counter"}
    assert p.series.helps == ref.series.helps
    assert p.fed == 3 + 6 + 1  # the distinct texts: 3 HELP, 6 TYPE (gauge, then counter), 1 other
    assert not p.saw_eof


_LINE = st.one_of(
    st.sampled_from(
        ["", " ", "\t", "\r", " \r", "# EOF", "# TYPE a gauge", "# TYPE a counter", "# HELP a x"]
    ),
    st.from_regex(r'[a-c](\{g="[0-9 ]{0,2}"\})? [-0-9.eNaInf]{1,4}( 17145648[0-9]{2})?\r?', fullmatch=True),
    st.text(alphabet='ab{}=",# \t\r01.5eE+-NaInf', max_size=30),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_LINE, max_size=40), st.booleans())
def test_bulk_parse_equals_line_by_line_with_blanks_and_comments(lines: list[str], trailing: bool) -> None:
    """The bulk path and the line-by-line parser agree on samples, issues (file:line), TYPE/HELP, # EOF and the
    line count, whatever blank lines, whitespace, carriage returns and comments sit among the samples."""
    text = "\n".join(lines) + ("\n" if trailing and lines else "")
    assume(text)
    bulk = ExpositionParser("f", default_ts=1714564800.0)
    c = parse_bytes(bulk, text.encode())
    ref = ExpositionParser("f", default_ts=1714564800.0)
    pieces = text.split("\n")
    if pieces[-1] == "":  # a trailing newline ends the last line, it starts none
        pieces.pop()
    one = ref.feed(ln.removesuffix("\r") for ln in pieces)
    assert sorted(_samples(bulk, c), key=repr) == sorted(_samples(ref, one), key=repr)
    # the same lines are issues (the two paths word a bad value apart: 'in sample value', 'in 'I 17...'')
    assert sorted((i.path, i.line) for i in bulk.issues) == sorted((i.path, i.line) for i in ref.issues)
    assert (bulk.series.types, bulk.series.helps, bulk.saw_eof) == (
        ref.series.types,
        ref.series.helps,
        ref.saw_eof,
    )
    assert bulk.lineno == ref.lineno
