"""Parse nccl-tests output (stdout of all_reduce_perf and friends, and its -J JSON) into runs.

Every version seen in the wild (fixtures/samples/nccl-tests/SOURCES.md): with and without the `redop`/`root`
columns, the old `error` column (`0e+00`) instead of `#wrong`, `N/A` in `#wrong` when validation is off,
per-iteration columns (`-I 1`), `cputime`/`timestamp` columns, time values that turn integer past 10 ms,
launcher prefixes (`srun -l`'s ` 0: `, mpirun's `[0]` even mid-line, `[1,0]<stdout>:`), stray `NCCL version` and
`NCCL INFO` lines, '#' lost in pasted copies, tables cut off mid-row. One run per invocation: a new run starts
at a new `# nThread` banner once the current one has rows, or after the footer.

busbw as nccl-tests defines it (doc/PERFORMANCE.md): all-reduce algbw x 2(n-1)/n; `# Avg bus bandwidth` is the
mean over every row (small sizes included), so `peak_busbw_gbps` is kept beside it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from fleettool.formats.errors import ParseIssue

_RE_TAG = re.compile(r"\[\d+(?:,\d+)?\](?:<\w+>)?:?")  # mpirun --tag-output / --output-filename prefixes
_RE_SRUN = re.compile(r"^\s*\d+:\s")  # srun -l
_RE_RANK = re.compile(
    r"Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*)$"
)
_RE_BANNER = re.compile(r"nThread\s+(\d+)\s+nGpus\s+(\d+)")
_RE_OP = re.compile(r"\b(\w+?)_perf(?:_mpi)?\b")
_RE_VERSION = re.compile(r"nccl-tests version (\S+)")
_RE_NCCL_VERSION = re.compile(r"NCCL version (\S+)")
_RE_AVG = re.compile(r"Avg bus bandwidth\s*:\s*([-+0-9.eE]+|nan|inf)")
_RE_OOB = re.compile(r"Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?")

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
    truncated: bool = False  # the table stopped before its footer (a killed job, a cut log): rows kept, named partial

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


def _num(tok: str) -> float | None:
    if tok in ("N/A", "n/a", "-", "nan"):
        return None
    try:
        return float(tok)
    except ValueError:
        return None


def _wrong(tok: str | None) -> int | None:
    if tok is None:
        return None
    v = _num(tok)
    if v is None:
        return None
    if "e" in tok.lower() or "." in tok:  # the old `error` column: a max relative error, not a count
        return None
    return int(v)


def clean_line(line: str) -> str:
    """Strip launcher prefixes (srun -l, mpirun tags anywhere in the line)."""
    s = line.rstrip("\r\n")
    if "[" in s:
        s = _RE_TAG.sub(" ", s)
    m = _RE_SRUN.match(s)
    if m:
        s = s[m.end() :]
    return s


class _Header:
    """Column positions for one table, from its header line."""

    def __init__(self, names: list[str]):
        self.names = names
        self.time_idx = [i for i, n in enumerate(names) if n in ("time", "cputime")]
        self.has_redop = "redop" in names
        self.has_root = "root" in names

    def halves(self) -> list[dict[str, int]]:
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
    return "size" in tokens and "busbw" in tokens and ("time" in tokens or "cputime" in tokens)


def _row_from_tokens(tokens: list[str], header: _Header | None) -> NcclRow | None:
    if len(tokens) < 5 or not tokens[0].isdigit():
        return None
    size = int(tokens[0])
    if header is not None and header.time_idx and len(tokens) >= header.time_idx[0] + 3:
        count = int(tokens[1]) if tokens[1].isdigit() else None
        dtype = tokens[2] if len(tokens) > 2 else None
        redop = tokens[3] if header.has_redop else None
        root = None
        if header.has_root:
            r = tokens[header.names.index("root")]
            root = int(r) if r.lstrip("-").isdigit() else None
        row = NcclRow(size, count, dtype, redop, root)
        for k, h in enumerate(header.halves()):
            if h["time"] >= len(tokens):
                break
            vals = {key: (tokens[i] if i < len(tokens) else None) for key, i in h.items()}
            t = _num(vals["time"] or "")
            a = _num(vals.get("algbw") or "")
            b = _num(vals.get("busbw") or "")
            w = _wrong(vals.get("wrong"))
            if k == 0:
                row.oop_time_us, row.oop_algbw_gbps, row.oop_busbw_gbps, row.oop_wrong = t, a, b, w
            else:
                row.ip_time_us, row.ip_algbw_gbps, row.ip_busbw_gbps, row.ip_wrong = t, a, b, w
        return row if row.oop_time_us is not None or row.oop_busbw_gbps is not None else None
    # no header seen (an excerpt that starts mid-table): infer the columns from the tokens
    if not tokens[1].isdigit() or tokens[2] not in _DTYPES:
        return None
    rest = tokens[3:]
    redop = None
    root = None
    if rest and rest[0].isalpha():
        redop, rest = rest[0], rest[1:]
    if len(rest) in (5, 9) and rest[0].lstrip("-").isdigit():
        root, rest = int(rest[0]), rest[1:]
    if len(rest) < 3:
        return None
    row = NcclRow(size, int(tokens[1]), tokens[2], redop, root)
    row.oop_time_us, row.oop_algbw_gbps, row.oop_busbw_gbps = _num(rest[0]), _num(rest[1]), _num(rest[2])
    row.oop_wrong = _wrong(rest[3]) if len(rest) > 3 else None
    if len(rest) >= 7:
        row.ip_time_us, row.ip_algbw_gbps, row.ip_busbw_gbps = _num(rest[4]), _num(rest[5]), _num(rest[6])
        row.ip_wrong = _wrong(rest[7]) if len(rest) > 7 else None
    return row


def parse_nccl_text(
    lines: Iterable[str], *, path: str = "<input>", op_hint: str | None = None
) -> tuple[list[NcclRun], list[ParseIssue]]:
    """nccl-tests stdout -> runs (every row kept) and the lines that looked like rows but were not."""
    runs: list[NcclRun] = []
    issues: list[ParseIssue] = []
    cur: NcclRun | None = None
    header: _Header | None = None
    pending_op: str | None = None
    pending_version: str | None = None

    def new_run(lineno: int) -> NcclRun:
        nonlocal cur, header
        cur = NcclRun(op=pending_op, first_line=lineno, version=pending_version)
        runs.append(cur)
        header = None
        return cur

    for lineno, raw in enumerate(lines, 1):
        line = clean_line(raw)
        s = line.strip()
        if not s:
            continue
        body = s.lstrip("#").strip()
        if s.startswith("===") or s.startswith("```"):  # a paste's separator: what follows is another output
            cur, header, pending_op, pending_version = None, None, None, None
            continue
        mv = _RE_VERSION.search(body)
        if mv:
            pending_version = mv.group(1)
            if cur is not None and cur.rows:
                cur = None
            continue
        if "Collective test starting" in body or (
            "_perf" in body and ("-b" in body or "-e" in body or "./" in body)
        ):
            mo = _RE_OP.search(body)
            if mo and "concluded" not in body:
                pending_op = mo.group(1)
                if cur is not None and cur.rows:
                    cur = None
                elif cur is not None and cur.op is None:
                    cur.op = pending_op
            continue
        if "Collective test concluded" in body:
            mo = _RE_OP.search(body)
            if mo and cur is not None and cur.op is None:
                cur.op = mo.group(1)
            cur = None
            pending_op = None
            pending_version = None
            continue
        mb = _RE_BANNER.search(body)
        if mb:
            if cur is None or cur.rows or cur.avg_busbw_gbps is not None:
                cur = new_run(lineno)
            cur.nthreads, cur.ngpus = int(mb.group(1)), int(mb.group(2))
            continue
        mr = _RE_RANK.search(body)
        if mr:
            if cur is None or cur.rows or cur.avg_busbw_gbps is not None:
                cur = new_run(lineno)
            rk = Rank(
                int(mr.group(1)),
                int(mr.group(2)),
                mr.group(3),
                int(mr.group(4)),
                mr.group(5),
                mr.group(6).strip(),
            )
            if all(r.rank != rk.rank or r.host != rk.host for r in cur.ranks):
                cur.ranks.append(rk)
            continue
        ma = _RE_AVG.search(body)
        if ma:
            if cur is not None:
                cur.avg_busbw_gbps = _num(ma.group(1))
            continue
        mo2 = _RE_OOB.search(body)
        if mo2:
            if cur is not None:
                cur.out_of_bounds = int(mo2.group(1))
            continue
        mn = _RE_NCCL_VERSION.search(body)
        if mn and "NCCL INFO" not in body:
            if cur is not None:
                cur.nccl_version = mn.group(1)
            continue
        if "NCCL INFO" in body or "NCCL WARN" in body:
            continue
        tokens = body.split()
        if not tokens:
            continue
        if _is_header(tokens):
            if cur is None or (cur.rows and cur.avg_busbw_gbps is not None):
                cur = new_run(lineno)
            if header is None or header.names != tokens:
                if cur.rows and header is not None:  # a second table in the same output
                    cur = new_run(lineno)
                header = _Header(tokens)
            continue
        if s.startswith("#") and not tokens[0].isdigit():
            continue
        if tokens and tokens[0].isdigit():
            row = _row_from_tokens(tokens, header)
            if row is None:
                if len(tokens) >= 5:
                    issues.append(ParseIssue(path, lineno, f"not an nccl-tests row: {s[:80]!r}"))
                continue
            if cur is None or cur.avg_busbw_gbps is not None:
                cur = new_run(lineno)
            cur.rows.append(row)
    out = [r for r in runs if r.rows or r.avg_busbw_gbps is not None]
    for r in out:
        if r.op is None:
            r.op = op_hint or infer_op(r)
    return out, issues


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
    """The collective when the output does not name it: all-reduce rows have root -1, a reduction, and
    count x element size = size (reduce_scatter and all_gather print the per-rank count)."""
    if not run.rows:
        return None
    r = run.rows[-1]
    el = _ELEM_SIZE.get(r.dtype or "")
    if (
        r.redop not in (None, "none")
        and (r.root is None or r.root < 0)
        and el
        and r.count
        and r.count * el == r.size_bytes
    ):
        return "all_reduce"
    if r.redop == "none" and r.root is not None and r.root >= 0:
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
    run.nthreads, run.ngpus = cfg.get("nthreads"), cfg.get("ngpus")
    for dev in cfg.get("devices") or []:
        try:
            run.ranks.append(
                Rank(
                    int(dev["rank"]),
                    int(dev.get("pid", 0)),
                    str(dev.get("hostname", "")),
                    int(dev.get("device", 0)),
                    str(dev.get("device_hex", "")),
                    str(dev.get("device_info", "")),
                )
            )
        except (KeyError, TypeError, ValueError):
            issues.append(ParseIssue(path, 1, f"bad device entry {dev!r:.80}"))
    for res in doc["results"]:
        try:
            root = str(res.get("root", "")).strip()
            row = NcclRow(
                int(res["size"]),
                int(res.get("count", 0)),
                res.get("type"),
                res.get("redop"),
                int(root) if root.lstrip("-").isdigit() else None,
            )
            for key, pre in (("out_of_place", "oop"), ("in_place", "ip")):
                half = res.get(key) or {}
                setattr(row, f"{pre}_time_us", _f(half.get("time")))
                setattr(row, f"{pre}_algbw_gbps", _f(half.get("alg_bw")))
                setattr(row, f"{pre}_busbw_gbps", _f(half.get("bus_bw")))
                w = _f(half.get("nwrong"))
                setattr(row, f"{pre}_wrong", None if w is None else int(w))
            run.rows.append(row)
        except (KeyError, TypeError, ValueError) as e:
            issues.append(ParseIssue(path, 1, f"bad result entry ({e})"))
    avg = doc.get("average_bus_bandwidth") or {}
    run.avg_busbw_gbps = _f(avg.get("bandwidth")) if isinstance(avg, dict) else _f(avg)
    oob = doc.get("out_of_bounds") or {}
    if isinstance(oob, dict) and "count" in oob:
        run.out_of_bounds = int(oob["count"])
    return run


def _f(v: object) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
