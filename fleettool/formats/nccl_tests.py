"""Parse nccl-tests stdout (all_reduce_perf and friends) into runs; its -J JSON is read by nccl_json.

Every version seen in the wild (fixtures/samples/nccl-tests/SOURCES.md): with and without the `redop`/`root`
columns, the old `error` column (`0e+00`) instead of `#wrong`, `N/A` in `#wrong` when validation is off,
per-iteration columns (`-I 1`), `cputime`/`timestamp` columns, time values that turn integer past 10 ms,
stray `NCCL version` and `NCCL INFO` lines, '#' lost in pasted copies, tables cut off mid-row.

Launcher prefixes (fixtures/formats/nccl-tests/) are stripped first (formats/nccl_prefix.py), and lines are
parsed per prefix (per rank, task or pod), so interleaved outputs do not mix.

One run per invocation: a new run starts at a new `# nThread` banner once the current one has rows, or after the
footer. A run is rows (under a header, or strictly row-shaped in an excerpt): a banner, a header or a footer
alone, or prose quoting them, is not. A run that stops before `# Avg bus bandwidth` is kept, truncated=True.
Numbers are ASCII and finite or they are NULL; a row-like line with other characters is a file:line issue.
What a run, a row and busbw are: formats/nccl_run.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from fleettool.formats.errors import ParseIssue
from fleettool.formats.nccl_json import parse_nccl_json
from fleettool.formats.nccl_prefix import split_prefix
from fleettool.formats.nccl_run import (
    DTYPES,
    RE_OP,
    NcclRow,
    NcclRun,
    Rank,
    infer_op,
    int_or_none,
    known_op,
    num,
    op_from_args,
    wrong_count,
)

# NcclRow, NcclRun and parse_nccl_json are imported from here by ingest/read_nccl.py, burnin and the rule tests
__all__ = ["NcclRow", "NcclRun", "parse_nccl_json", "parse_nccl_text"]

_RE_RANK = re.compile(
    r"Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*)$"
)
_RE_BANNER = re.compile(r"nThread\s+(\d+)\s+nGpus\s+(\d+)")
_RE_VERSION = re.compile(r"nccl-tests version (\S+)")
_RE_NCCL_VERSION = re.compile(r"NCCL version (\S+)")
_RE_AVG = re.compile(r"Avg bus bandwidth\s*:\s*(\S+)")
_RE_OOB = re.compile(r"Out of bounds values\s*:\s*(\d{1,18})\s*(OK|FAILED)?")


class _Header:
    """Column positions for one table, from its header line."""

    def __init__(self, names: list[str]):
        self.names = names
        self.time_idx = [i for i, n in enumerate(names) if n in ("time", "cputime")]
        self.has_redop = "redop" in names
        self.root_idx = names.index("root") if "root" in names else None
        self.halves = self._halves()

    def _halves(self) -> list[dict[str, int]]:
        out = []
        for t in self.time_idx[:2]:
            h: dict[str, int] = {"time": t}
            for j in range(t + 1, min(t + 9, len(self.names))):
                n = self.names[j]
                if n in ("time", "cputime"):
                    break
                if n == "algbw":
                    h["algbw"] = j
                elif n == "busbw":
                    h["busbw"] = j
                elif n in ("#wrong", "wrong", "error", "#error"):
                    h["wrong"] = j
            out.append(h)
        return out


def _is_header(tokens: list[str]) -> bool:
    return tokens[0] == "size" and "busbw" in tokens and ("time" in tokens or "cputime" in tokens)


def _row_from_tokens(tokens: list[str], header: _Header | None) -> NcclRow | None:
    """One table row (ASCII tokens) -> NcclRow, or None when the tokens are not a row."""
    if len(tokens) < 5:
        return None
    size = int_or_none(tokens[0])
    if size is None or size < 0:
        return None
    if header is not None and header.time_idx and len(tokens) >= header.time_idx[0] + 3:
        count = int_or_none(tokens[1])
        redop = tokens[3] if header.has_redop else None
        root = int_or_none(tokens[header.root_idx]) if header.root_idx is not None else None
        if root is not None and not -(1 << 31) <= root < (1 << 31):
            return None
        row = NcclRow(size, count, tokens[2], redop, root)
        for k, h in enumerate(header.halves):
            if h["time"] >= len(tokens):
                break
            vals = {key: (tokens[i] if i < len(tokens) else None) for key, i in h.items()}
            t, a, b = num(vals["time"]), num(vals.get("algbw")), num(vals.get("busbw"))
            w = wrong_count(vals.get("wrong"))
            if k == 0:
                row.oop_time_us, row.oop_algbw_gbps, row.oop_busbw_gbps, row.oop_wrong = t, a, b, w
            else:
                row.ip_time_us, row.ip_algbw_gbps, row.ip_busbw_gbps, row.ip_wrong = t, a, b, w
        return row if row.oop_time_us is not None or row.oop_busbw_gbps is not None else None
    # no header seen (an excerpt that starts mid-table): infer the columns from the tokens, strictly
    count = int_or_none(tokens[1])
    if count is None or count < 0 or tokens[2] not in DTYPES:
        return None
    rest = tokens[3:]
    redop = None
    root = None
    if rest and rest[0].isascii() and rest[0].isalpha():
        redop, rest = rest[0], rest[1:]
    if len(rest) in (5, 9) and int_or_none(rest[0]) is not None and abs(int(rest[0])) < (1 << 31):
        root, rest = int(rest[0]), rest[1:]
    if len(rest) < 3:
        return None
    row = NcclRow(size, count, tokens[2], redop, root)
    row.oop_time_us, row.oop_algbw_gbps, row.oop_busbw_gbps = num(rest[0]), num(rest[1]), num(rest[2])
    row.oop_wrong = wrong_count(rest[3]) if len(rest) > 3 else None
    if len(rest) >= 7:
        row.ip_time_us, row.ip_algbw_gbps, row.ip_busbw_gbps = num(rest[4]), num(rest[5]), num(rest[6])
        row.ip_wrong = wrong_count(rest[7]) if len(rest) > 7 else None
    return row if row.oop_time_us is not None or row.oop_busbw_gbps is not None else None


@dataclass
class _Stream:
    """Parser state for the lines of one rank/task/pod (one launcher prefix)."""

    cur: NcclRun | None = None
    header: _Header | None = None
    pending_op: str | None = None  # from `# Collective test starting: <binary>`
    pending_version: str | None = None


class _TextParser:
    def __init__(self, path: str) -> None:
        self.path = path
        self.runs: list[NcclRun] = []
        self.issues: list[ParseIssue] = []
        self.streams: dict[str, _Stream] = {}
        self.cmd_op: str | None = None  # the binary of the last command line seen (any stream)
        self.footers: set[int] = set()  # id() of the runs whose `# Avg bus bandwidth` footer was seen

    def _new_run(self, st: _Stream, lineno: int) -> NcclRun:
        st.cur = NcclRun(op=st.pending_op or self.cmd_op, first_line=lineno, version=st.pending_version)
        st.header = None
        self.runs.append(st.cur)
        return st.cur

    def _finished(self, run: NcclRun | None) -> bool:
        return run is None or bool(run.rows) or id(run) in self.footers

    def line(self, lineno: int, raw: str) -> None:
        key, line = split_prefix(raw)
        s = line.strip()
        if not s:
            return
        if s.startswith("===") or s.startswith("```"):  # a paste's separator: what follows is another output
            self.streams.clear()
            self.cmd_op = None
            return
        st = self.streams.get(key)
        if st is None:
            st = self.streams[key] = _Stream()
        body = s.lstrip("#").strip()
        if not body or "NCCL INFO" in body or "NCCL WARN" in body:
            return
        if body.startswith("nccl-tests version"):
            mv = _RE_VERSION.match(body)
            st.pending_version = mv.group(1) if mv else None
            if st.cur is not None and st.cur.rows:
                st.cur = None
            return
        if "-" in body and not body[:1].isdigit():
            arg_op = op_from_args(body)  # a wrapper's `-t all_gather`: a command line, as a binary's name is
            if arg_op is not None:
                self._op_line(st, body, arg_op)
                return
        if "_perf" in body:
            mo = RE_OP.search(body)
            if mo is not None:
                self._op_line(st, body, mo.group(1))
                return
        if body.startswith("nThread"):
            mb = _RE_BANNER.match(body)
            if mb:
                cur = self._new_run(st, lineno) if self._finished(st.cur) else st.cur
                assert cur is not None
                cur.nthreads, cur.ngpus = int(mb.group(1)), int(mb.group(2))
                return
        if body.startswith("Rank"):
            mr = _RE_RANK.match(body)
            if mr:
                self._rank(st, lineno, mr)
                return
        if body.startswith("Avg bus bandwidth"):
            ma = _RE_AVG.match(body)
            if ma and st.cur is not None:
                st.cur.avg_busbw_gbps = num(ma.group(1))
                self.footers.add(id(st.cur))
            return
        if body.startswith("Out of bounds values"):
            mo2 = _RE_OOB.match(body)
            if mo2 and st.cur is not None:
                st.cur.out_of_bounds = int(mo2.group(1))
            return
        if body.startswith("NCCL version"):
            mn = _RE_NCCL_VERSION.match(body)
            if mn and st.cur is not None:
                st.cur.nccl_version = mn.group(1)
            return
        tokens = body.split()
        if _is_header(tokens):
            if st.cur is None or (st.cur.rows and id(st.cur) in self.footers):
                self._new_run(st, lineno)
            if st.header is None or st.header.names != tokens:
                if st.cur is not None and st.cur.rows and st.header is not None:  # a second table
                    self._new_run(st, lineno)
                st.header = _Header(tokens)
            return
        if not tokens[0].isdigit():  # str.isdigit: any script's digits ("²", "٣") are row-like too
            return
        if not s.isascii():
            self.issues.append(
                ParseIssue(self.path, lineno, f"non-ASCII text in an nccl-tests row: {s[:80]!r}")
            )
            return
        row = _row_from_tokens(tokens, st.header)
        if row is None:
            if len(tokens) >= 5 or (st.header is not None and not s.startswith("#")):
                self.issues.append(ParseIssue(self.path, lineno, f"not an nccl-tests row: {s[:80]!r}"))
            return
        if st.cur is None or id(st.cur) in self.footers:
            self._new_run(st, lineno)
        assert st.cur is not None
        st.cur.rows.append(row)

    def _op_line(self, st: _Stream, body: str, op: str) -> None:
        if body.startswith("Collective test concluded"):  # the trailer names the binary that ran
            if st.cur is not None:
                st.cur.op = op
            st.cur, st.pending_op, st.pending_version = None, None, None
            return
        if body.startswith("Collective test starting"):
            st.pending_op = op
        else:  # a command line (echoed by a shell, mpirun, srun, a launcher) or an error naming the binary
            self.cmd_op = op
        if st.cur is not None and st.cur.rows:
            st.cur = None
        elif st.cur is not None:
            st.cur.op = op

    def _rank(self, st: _Stream, lineno: int, mr: re.Match[str]) -> None:
        cur = self._new_run(st, lineno) if self._finished(st.cur) else st.cur
        assert cur is not None
        nums = [int_or_none(mr.group(i)) for i in (1, 2, 4)]
        if any(v is None for v in nums):
            self.issues.append(ParseIssue(self.path, lineno, f"bad rank line: {mr.group(0)[:80]!r}"))
            return
        rank, pid, dev = (int(v) for v in nums)  # type: ignore[arg-type]
        rk = Rank(rank, pid, mr.group(3), dev, mr.group(5), mr.group(6).strip())
        if all(r.rank != rk.rank or r.host != rk.host for r in cur.ranks):
            cur.ranks.append(rk)

    def finish(self, op_hint: str | None) -> list[NcclRun]:
        # a banner, a footer or a header alone is not a run; a banner with its device list and no row is one that
        # started and never printed a result (hung, killed): kept, unfinished
        out = [r for r in self.runs if r.rows or (r.ranks and r.ngpus is not None)]
        hint = known_op(op_hint)
        for r in out:
            r.truncated = id(r) not in self.footers
            if r.op is None:
                r.op = hint or infer_op(r)
        return out


def parse_nccl_text(
    lines: Iterable[str], *, path: str = "<input>", op_hint: str | None = None
) -> tuple[list[NcclRun], list[ParseIssue]]:
    """nccl-tests stdout -> runs (every row kept) and the lines that looked like rows but were not.

    The op comes from `# Collective test starting/concluded: <binary>`, else the binary in the last command line
    (`mpirun ... ./build/all_gather_perf -b 8`), else `op_hint` (the file name), else infer_op. A run is rows
    under one invocation; a run whose table stops before `# Avg bus bandwidth` is kept with truncated=True.
    """
    p = _TextParser(path)
    for lineno, raw in enumerate(lines, 1):
        p.line(lineno, raw)
    return p.finish(op_hint), p.issues
