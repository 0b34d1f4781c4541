"""What nccl-tests runs are: rows, ranks and runs (NcclRow, Rank, NcclRun), the collectives and data types
nccl-tests knows, the strict readers of its numbers, and infer_op for a table that names no collective.

busbw as nccl-tests defines it (NVIDIA/nccl-tests doc/PERFORMANCE.md): all-reduce algbw x 2(n-1)/n;
`# Avg bus bandwidth` is the mean over every row (small sizes included), so `peak_busbw_gbps` is kept beside it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

KNOWN_OPS = (
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
RE_OP = re.compile(r"(?<![A-Za-z0-9])(" + "|".join(KNOWN_OPS) + r")_perf(?:_mpi)?(?![A-Za-z0-9_])")
# the collective as people write it beside the binary's name: a wrapper's `-t all_gather` / `--op allgather`,
# a file named `nccl-allgather-h100.log`
_OP_ALIASES = {op.replace("_", ""): op for op in KNOWN_OPS} | {"all2all": "alltoall", "a2a": "alltoall"}
_RE_OP_ARG = re.compile(
    r"(?:^|\s)(?:-t|--test|--op|--coll|--collective|--benchmark)(?:=|\s+)([A-Za-z_2]+?)(?:_perf)?(?![A-Za-z0-9_])"
)
_RE_OP_WORD = re.compile(
    r"(?<![a-z])("
    + "|".join(op.replace("_", "[-_]?") for op in sorted(KNOWN_OPS, key=len, reverse=True))
    + r"|all2all)(?![a-z])"
)
_RE_NUM = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
INT64_MAX = (1 << 63) - 1

DTYPES = {
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
    def finished(self) -> bool:
        """The run printed its footer (`# Avg bus bandwidth`), or for -J its results: it did not hang or die."""
        return bool(self.rows) and not self.truncated

    @property
    def model(self) -> str | None:
        """The GPU model(s) of the device list (`... device  0 [0x1b] NVIDIA H100 80GB HBM3`), '+'-joined."""
        models = sorted({r.model for r in self.ranks if r.model})
        return "+".join(models) if models else None

    @property
    def peak_busbw_gbps(self) -> float | None:
        vals = [v for r in self.rows for v in (r.oop_busbw_gbps, r.ip_busbw_gbps) if v is not None]
        return max(vals) if vals else None

    @property
    def wrong(self) -> int | None:
        vals = [v for r in self.rows for v in (r.oop_wrong, r.ip_wrong) if v is not None]
        return sum(vals) if vals else None


def num(tok: str | None) -> float | None:
    """A finite number written in ASCII, else None (`N/A`, `-`, nan, inf, 1e999, another script's digits)."""
    if not tok or not _RE_NUM.fullmatch(tok):
        return None
    v = float(tok)
    return v if math.isfinite(v) else None


def int_or_none(tok: str | None) -> int | None:
    """An ASCII decimal integer that fits a BIGINT, else None."""
    if not tok:
        return None
    digits = tok[1:] if tok[0] == "-" else tok
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 19:
        return None
    v = int(tok)
    return v if -INT64_MAX <= v <= INT64_MAX else None


def wrong_count(tok: str | None) -> int | None:
    if (
        tok is None or "e" in tok.lower() or "." in tok
    ):  # the old `error` column: a max relative error, not a count
        return None
    v = int_or_none(tok)
    return v if v is not None and v >= 0 else None


def known_op(text: str | None) -> str | None:
    """The collective named in a binary name, a file name or a hint (`all_gather_perf`, `reduce_scatter`)."""
    if not text:
        return None
    if text in KNOWN_OPS:
        return text
    m = RE_OP.search(text if text.endswith("_perf") else text + "_perf")
    return m.group(1) if m else None


def op_alias(word: str) -> str | None:
    """'all_gather', 'allgather', 'AllGather', 'all2all' -> the collective, or None."""
    return _OP_ALIASES.get(word.lower().replace("_", "").replace("-", ""))


def op_from_args(line: str) -> str | None:
    """The collective a wrapper's command line names by option (`run.sh -t all_gather`, `--op=allgather`): only
    a known collective's name counts (nccl-tests' own `-t 1` is its thread count)."""
    m = _RE_OP_ARG.search(line)
    return op_alias(m.group(1)) if m else None


def op_in_name(name: str) -> str | None:
    """The collective in a file name (`all_gather_perf.log`, `nccl-allgather-h100.txt`), or None."""
    m = RE_OP.search(name)
    if m:
        return m.group(1)
    hits = {op_alias(w) for w in _RE_OP_WORD.findall(name.lower())}
    hits.discard(None)
    return hits.pop() if len(hits) == 1 else None


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
