"""Parse nccl-tests output (stdout of all_reduce_perf and friends, and its -J JSON) into runs.

Every version seen in the wild (fixtures/samples/nccl-tests/SOURCES.md): with and without the `redop`/`root`
columns, the old `error` column (`0e+00`) instead of `#wrong`, `N/A` in `#wrong` when validation is off,
per-iteration columns (`-I 1`), `cputime`/`timestamp` columns, time values that turn integer past 10 ms,
stray `NCCL version` and `NCCL INFO` lines, '#' lost in pasted copies, tables cut off mid-row.

Launcher prefixes (fixtures/formats/nccl-tests/) are stripped before parsing, in any combination: timestamps
(ISO, python logging, `[...]`, syslog with host and tag), SkyPilot `(head, rank=0, pid=N)`, mpirun
`--tag-output` `[1,0]<stdout>:` (and `[0]` tags mid-line), `srun --label`, torchrun `[default0]:`/`[rank0]:`,
`kubectl logs --prefix` `[pod/NAME/CONTAINER]`, `pod-name: ` and docker compose `svc | `. Lines are parsed per
prefix (per rank, task or pod), so interleaved outputs do not mix.

One run per invocation: a new run starts at a new `# nThread` banner once the current one has rows, or after the
footer. A run is rows (under a header, or strictly row-shaped in an excerpt): a banner, a header or a footer
alone, or prose quoting them, is not. A run that stops before `# Avg bus bandwidth` is kept, truncated=True.
Numbers are ASCII and finite or they are NULL; a row-like line with other characters is a file:line issue.

busbw as nccl-tests defines it (doc/PERFORMANCE.md): all-reduce algbw x 2(n-1)/n; `# Avg bus bandwidth` is the
mean over every row (small sizes included), so `peak_busbw_gbps` is kept beside it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from fleettool.formats.errors import ParseIssue

_KNOWN_OPS = (
    "all_reduce",
    "all_gather",
    "alltoall",
    "broadcast",
    "gather",
    "hypercube",
    "reduce_scatter",
    "reduce",
    "scatter",
    "sendrecv",
)
_RE_OP = re.compile(r"(?<![A-Za-z0-9])(" + "|".join(_KNOWN_OPS) + r")_perf(?:_mpi)?(?![A-Za-z0-9_])")
_RE_TAG = re.compile(r"\[\d+(?:,\d+)?\](?:<\w+>)?:?")  # mpirun --tag-output tags, also mid-line (nccl #1453)
_TS = r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
# One launcher prefix at the start of a line; the named group `key` identifies the rank/task/pod it came from.
_RE_PREFIX = re.compile(
    rf"""(?:
      {_TS}\s+                                                 # ISO, python logging, kubectl --timestamps
    | \[{_TS}\]:?\s*                                           # [2024-05-01 12:00:00]
    | [A-Z][a-z]{{2}}\s+\d{{1,2}}\s\d{{2}}:\d{{2}}:\d{{2}}\s+(?P<syslog>[\w.-]+)\s+
        (?:[\w./-]+(?:\[\d+\])?:\s+)?                          # syslog: host, then an optional tag[pid]:
    | [A-Z][a-z]{{2}}\s[A-Z][a-z]{{2}}\s+\d{{1,2}}\s\d{{2}}:\d{{2}}:\d{{2}}\s\d{{4}}\s?  # mpirun --timestamp-output
    | \((?P<sky>[\w.-]+(?:,\s*\w+=[^,()\s]*)+)\)\s*            # SkyPilot (head, rank=0, pid=3808[, ip=...])
    | (?P<mpi>\[\d+(?:,\d+)?\])(?:<\w+>)?:?\s?                 # mpirun --tag-output [1,0]<stdout>:
    | (?P<torch>\[(?:default|rank)\d+\]):\s?                   # torchrun --tee: [default0]: / [rank0]:
    | (?P<pod>\[pod/[^\]\s]+\])\s?                             # kubectl logs --prefix
    | \s*(?P<srun>\d+):\s                                      # srun --label
    | (?P<host>(?=[a-z0-9.-]*[-0-9])[a-z0-9][a-z0-9.-]*):\s    # pod or host name: (kubectl -l, pdsh)
    | (?P<compose>[\w.-]+)\s+\|\s                              # docker compose logs
    )""",
    re.X,
)
_RE_RANK = re.compile(
    r"Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*)$"
)
_RE_BANNER = re.compile(r"nThread\s+(\d+)\s+nGpus\s+(\d+)")
_RE_VERSION = re.compile(r"nccl-tests version (\S+)")
_RE_NCCL_VERSION = re.compile(r"NCCL version (\S+)")
_RE_AVG = re.compile(r"Avg bus bandwidth\s*:\s*(\S+)")
_RE_OOB = re.compile(r"Out of bounds values\s*:\s*(\d{1,18})\s*(OK|FAILED)?")
_RE_NUM = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_INT64_MAX = (1 << 63) - 1

_DTYPES = {
    "int8",
    "uint8",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "half",
    "float",
    "double",
    "bfloat16",
    "f8e4m3",
    "f8e5m2",
    "fp8_e4m3",
    "fp8_e5m2",
    "char",
    "int",
    "float16",
    "float32",
    "float64",
    "bf16",
}


@dataclass
class NcclRow:
    size_bytes: int
    count: int | None
    dtype: str | None
    redop: str | None
    root: int | None
    oop_time_us: float | None = None
    oop_algbw_gbps: float | None = None
    oop_busbw_gbps: float | None = None
    oop_wrong: int | None = None
    ip_time_us: float | None = None
    ip_algbw_gbps: float | None = None
    ip_busbw_gbps: float | None = None
    ip_wrong: int | None = None


@dataclass
class Rank:
    rank: int
    pid: int
    host: str
    device: int
    bus: str
    model: str


@dataclass
class NcclRun:
    op: str | None = None
    ranks: list[Rank] = field(default_factory=list)
    rows: list[NcclRow] = field(default_factory=list)
    avg_busbw_gbps: float | None = None  # the footer's figure
    out_of_bounds: int | None = None
    version: str | None = None
    nccl_version: str | None = None
    nthreads: int | None = None
    ngpus: int | None = None
    first_line: int = 0
    start_time: str | None = None  # JSON only
    truncated: bool = (
        False  # the table stopped before its footer (a killed job, a cut log): rows kept, named partial
    )

    @property
    def nranks(self) -> int:
        if self.ranks:
            return len({r.rank for r in self.ranks})
        return (self.nthreads or 1) * (self.ngpus or 1) if self.ngpus else 0

    @property
    def nodes(self) -> list[str]:
        seen: dict[str, None] = {}
        for r in sorted(self.ranks, key=lambda r: r.rank):
            seen.setdefault(r.host, None)
        return list(seen)

    @property
    def peak_busbw_gbps(self) -> float | None:
        vals = [v for r in self.rows for v in (r.oop_busbw_gbps, r.ip_busbw_gbps) if v is not None]
        return max(vals) if vals else None

    @property
    def wrong(self) -> int | None:
        vals = [v for r in self.rows for v in (r.oop_wrong, r.ip_wrong) if v is not None]
        return sum(vals) if vals else None


def _num(tok: str | None) -> float | None:
    """A finite number written in ASCII, else None (`N/A`, `-`, nan, inf, 1e999, another script's digits)."""
    if not tok or not _RE_NUM.fullmatch(tok):
        return None
    v = float(tok)
    return v if math.isfinite(v) else None


def _int(tok: str | None) -> int | None:
    """An ASCII decimal integer that fits a BIGINT, else None."""
    if not tok:
        return None
    digits = tok[1:] if tok[0] == "-" else tok
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 19:
        return None
    v = int(tok)
    return v if -_INT64_MAX <= v <= _INT64_MAX else None


def _wrong(tok: str | None) -> int | None:
    if (
        tok is None or "e" in tok.lower() or "." in tok
    ):  # the old `error` column: a max relative error, not a count
        return None
    v = _int(tok)
    return v if v is not None and v >= 0 else None


def _known_op(text: str | None) -> str | None:
    """The collective named in a binary name, a file name or a hint (`all_gather_perf`, `reduce_scatter`)."""
    if not text:
        return None
    if text in _KNOWN_OPS:
        return text
    m = _RE_OP.search(text if text.endswith("_perf") else text + "_perf")
    return m.group(1) if m else None


def split_prefix(line: str) -> tuple[str, str]:
    """(stream key, text): the launcher prefixes at the start of a line stripped, in any order and combination
    (timestamps, syslog host, SkyPilot, mpirun --tag-output, srun --label, torchrun, kubectl pod prefixes), and
    mpirun's rank tags removed from the rest of the line. The key names the rank, task or pod the line came from,
    so interleaved outputs of several processes parse as separate streams."""
    s = line.rstrip("\r\n")
    keys: list[str] = []
    pos = 0
    for _ in range(8):
        m = _RE_PREFIX.match(s, pos)
        if m is None or m.end() == pos:
            break
        if m.lastgroup:
            keys.append(m.group(m.lastgroup))
        pos = m.end()
    text = s[pos:]
    if "[" in text:
        text = _RE_TAG.sub(" ", text)
    return "|".join(keys), text


def clean_line(line: str) -> str:
    """The line with its launcher prefixes stripped (see split_prefix)."""
    return split_prefix(line)[1]


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
    size = _int(tokens[0])
    if size is None or size < 0:
        return None
    if header is not None and header.time_idx and len(tokens) >= header.time_idx[0] + 3:
        count = _int(tokens[1])
        redop = tokens[3] if header.has_redop else None
        root = _int(tokens[header.root_idx]) if header.root_idx is not None else None
        if root is not None and not -(1 << 31) <= root < (1 << 31):
            return None
        row = NcclRow(size, count, tokens[2], redop, root)
        for k, h in enumerate(header.halves):
            if h["time"] >= len(tokens):
                break
            vals = {key: (tokens[i] if i < len(tokens) else None) for key, i in h.items()}
            t, a, b = _num(vals["time"]), _num(vals.get("algbw")), _num(vals.get("busbw"))
            w = _wrong(vals.get("wrong"))
            if k == 0:
                row.oop_time_us, row.oop_algbw_gbps, row.oop_busbw_gbps, row.oop_wrong = t, a, b, w
            else:
                row.ip_time_us, row.ip_algbw_gbps, row.ip_busbw_gbps, row.ip_wrong = t, a, b, w
        return row if row.oop_time_us is not None or row.oop_busbw_gbps is not None else None
    # no header seen (an excerpt that starts mid-table): infer the columns from the tokens, strictly
    count = _int(tokens[1])
    if count is None or count < 0 or tokens[2] not in _DTYPES:
        return None
    rest = tokens[3:]
    redop = None
    root = None
    if rest and rest[0].isascii() and rest[0].isalpha():
        redop, rest = rest[0], rest[1:]
    if len(rest) in (5, 9) and _int(rest[0]) is not None and abs(int(rest[0])) < (1 << 31):
        root, rest = int(rest[0]), rest[1:]
    if len(rest) < 3:
        return None
    row = NcclRow(size, count, tokens[2], redop, root)
    row.oop_time_us, row.oop_algbw_gbps, row.oop_busbw_gbps = _num(rest[0]), _num(rest[1]), _num(rest[2])
    row.oop_wrong = _wrong(rest[3]) if len(rest) > 3 else None
    if len(rest) >= 7:
        row.ip_time_us, row.ip_algbw_gbps, row.ip_busbw_gbps = _num(rest[4]), _num(rest[5]), _num(rest[6])
        row.ip_wrong = _wrong(rest[7]) if len(rest) > 7 else None
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
        if "_perf" in body:
            mo = _RE_OP.search(body)
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
                st.cur.avg_busbw_gbps = _num(ma.group(1))
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
        nums = [_int(mr.group(i)) for i in (1, 2, 4)]
        if any(v is None for v in nums):
            self.issues.append(ParseIssue(self.path, lineno, f"bad rank line: {mr.group(0)[:80]!r}"))
            return
        rank, pid, dev = (int(v) for v in nums)  # type: ignore[arg-type]
        rk = Rank(rank, pid, mr.group(3), dev, mr.group(5), mr.group(6).strip())
        if all(r.rank != rk.rank or r.host != rk.host for r in cur.ranks):
            cur.ranks.append(rk)

    def finish(self, op_hint: str | None) -> list[NcclRun]:
        out = [r for r in self.runs if r.rows]  # a banner, a footer or a header alone is not a run
        hint = _known_op(op_hint)
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


_ELEM_SIZE = {
    "int8": 1,
    "uint8": 1,
    "char": 1,
    "half": 2,
    "float16": 2,
    "bfloat16": 2,
    "bf16": 2,
    "float": 4,
    "float32": 4,
    "int32": 4,
    "uint32": 4,
    "int": 4,
    "double": 8,
    "float64": 8,
    "int64": 8,
    "uint64": 8,
    "f8e4m3": 1,
    "f8e5m2": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}


def infer_op(run: NcclRun) -> str | None:
    """The collective from the rows when nothing names it (the last resort). nccl-tests prints the element count
    per rank for reduce_scatter, all_gather, alltoall, gather and scatter, the whole count for the others; a
    reduction has a redop, a rooted collective a root >= 0. all_gather and alltoall rows look alike, as do
    gather and scatter: those stay None."""
    if not run.rows:
        return None
    r = run.rows[-1]
    el = _ELEM_SIZE.get(r.dtype or "")
    if not el or not r.count:
        return None
    whole = r.count * el == r.size_bytes
    n = run.nranks
    per_rank = n > 1 and r.count * el * n == r.size_bytes
    reduces = r.redop not in (None, "none")
    rooted = r.root is not None and r.root >= 0
    if reduces and not rooted:
        return "all_reduce" if whole else "reduce_scatter" if per_rank else None
    if reduces and rooted and whole:
        return "reduce"
    if r.redop == "none" and rooted and whole:
        return "broadcast"
    return None


def parse_nccl_json(text: str, *, path: str = "<input>") -> tuple[list[NcclRun], list[ParseIssue]]:
    """nccl-tests -J output (format version 3) -> one run."""
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        return [], [ParseIssue(path, e.lineno, f"not JSON: {e.msg}")]
    docs = d if isinstance(d, list) else [d]
    runs: list[NcclRun] = []
    issues: list[ParseIssue] = []
    for doc in docs:
        if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
            issues.append(ParseIssue(path, 1, "no 'results' list in nccl-tests JSON"))
            continue
        try:
            runs.append(_json_run(doc, path, issues))
        except (TypeError, AttributeError, KeyError, ValueError) as e:
            issues.append(ParseIssue(path, 1, f"malformed nccl-tests JSON ({type(e).__name__}: {e})"))
    return runs, issues


def _json_run(doc: dict[str, Any], path: str, issues: list[ParseIssue]) -> NcclRun:
    run = NcclRun()
    args = doc.get("args") or []
    if args:
        mo = _RE_OP.search(str(args[0]))
        run.op = mo.group(1) if mo else None
    nv = doc.get("nccl_version")
    if isinstance(nv, int):
        run.nccl_version = f"{nv // 10000}.{nv // 100 % 100}.{nv % 100}"
    run.start_time = doc.get("start_time")
    cfg = doc.get("config") or {}
    run.nthreads, run.ngpus = (
        _jint_or_none(cfg.get("nthreads"), 1 << 20),
        _jint_or_none(cfg.get("ngpus"), 1 << 20),
    )
    for dev in cfg.get("devices") or []:
        try:
            run.ranks.append(
                Rank(
                    _jint(dev["rank"], 1 << 31),
                    _jint(dev.get("pid", 0), 1 << 62),
                    str(dev.get("hostname", "")),
                    _jint(dev.get("device", 0), 1 << 31),
                    str(dev.get("device_hex", "")),
                    str(dev.get("device_info", "")),
                )
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            issues.append(ParseIssue(path, 1, f"bad device entry {dev!r:.80}"))
    for res in doc["results"]:
        try:
            root = str(res.get("root", "")).strip()
            row = NcclRow(
                _jint(res["size"], _INT64_MAX),
                _jint(res.get("count", 0), _INT64_MAX),
                str(res["type"]) if res.get("type") is not None else None,
                str(res["redop"]) if res.get("redop") is not None else None,
                _int(root) if _int(root) is not None and abs(int(root)) < (1 << 31) else None,
            )
            for key, pre in (("out_of_place", "oop"), ("in_place", "ip")):
                half = res.get(key) or {}
                setattr(row, f"{pre}_time_us", _f(half.get("time")))
                setattr(row, f"{pre}_algbw_gbps", _f(half.get("alg_bw")))
                setattr(row, f"{pre}_busbw_gbps", _f(half.get("bus_bw")))
                setattr(row, f"{pre}_wrong", _jint_or_none(half.get("nwrong"), _INT64_MAX))
            run.rows.append(row)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            issues.append(ParseIssue(path, 1, f"bad result entry ({e})"))
    avg = doc.get("average_bus_bandwidth") or {}
    run.avg_busbw_gbps = _f(avg.get("bandwidth")) if isinstance(avg, dict) else _f(avg)
    oob = doc.get("out_of_bounds") or {}
    if isinstance(oob, dict) and "count" in oob:
        run.out_of_bounds = _jint_or_none(oob["count"], _INT64_MAX)
    return run


def _jint(v: object, limit: int) -> int:
    """A JSON integer (an int, an integral float, or digits) in 0..limit (rank -1 aside), else ValueError."""
    if isinstance(v, bool):
        raise ValueError(f"not an integer: {v!r}")
    if isinstance(v, float):
        if not math.isfinite(v) or v != int(v):
            raise ValueError(f"not an integer: {v!r}")
        v = int(v)
    elif isinstance(v, str):
        parsed = _int(v.strip())
        if parsed is None:
            raise ValueError(f"not an integer: {v[:20]!r}")
        v = parsed
    if not isinstance(v, int) or not -1 <= v <= limit:
        raise ValueError(f"integer out of range: {v!r:.30}")
    return v


def _jint_or_none(v: object, limit: int) -> int | None:
    try:
        return None if v is None else _jint(v, limit)
    except ValueError:
        return None


def _f(v: object) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None
