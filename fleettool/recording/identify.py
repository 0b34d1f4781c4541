"""Identify a recording file by its content, never by its name: the first `HEAD` bytes (after gunzip), line by line.

`identify` returns the format, the key of a reader in fleettool.ingest.readers; `identify_why` also the shape
(e.g. `dmesg -T`) or, for a file no reader takes, why.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from fleettool.formats import ib_text, kube_nodes, sacct, slurm_topology, topology_csv
from fleettool.formats.fleettool_events import EVENT_KEYS_REQUIRED
from fleettool.formats.ib_sysfs_tar import sniff_tar
from fleettool.formats.kmsg_prefix import LINE_SHAPES
from fleettool.formats.nvidia_smi_paste import sniff as sniff_smi_paste
from fleettool.formats.openmetrics import decide_millis
from fleettool.recording.files import GZIP_MAGIC, HEAD, read_head


@dataclass(frozen=True)
class Identity:
    """What a file is: the reader's format key, the shape within it, or (format 'unknown') why not."""

    format: str
    shape: str = ""
    why: str = ""


_KSHAPES = LINE_SHAPES  # the kernel-log line shapes, named, from the parser that reads them
_RE_KMSG_RAW = re.compile(r"^\d{1,3},\d+,\d+,[^;,]*(?:,[^;]*)?;")
_RE_KMSG_CONT = re.compile(r"^ [A-Z_]+=")
_RE_JOURNAL_SEP = re.compile(r"^-- .* --$")
_RE_GPU_KERNEL = re.compile(r"NVRM: (?:Xid \(|GPU at PCI|The NVIDIA GPU )|SXid \(PCI:")

_RE_EXPO_SAMPLE = re.compile(
    r"^[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{.*\})?\s+[-+]?(?:[0-9.eE+-]+|NaN|[+-]?Inf)(?:\s+-?[0-9.eE+-]+)?\s*$"
)
_RE_EXPO_COMMENT = re.compile(r"^# (?:TYPE|HELP|UNIT) [a-zA-Z_:][a-zA-Z0-9_:]*|^# EOF\s*$")

_DTYPES = (
    "float|half|bfloat16|double|int8|uint8|int32|uint32|int64|uint64|f8e4m3|f8e5m2|fp8_e4m3|fp8_e5m2"
    "|int|char|float16|float32|float64|bf16"
)
_NCCL_PATTERNS = [
    re.compile(r"#\s*nThread\s+\d+\s+nGpus\s+\d+"),
    re.compile(r"#\s*Rank\s+\d+\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+\S+\s+device\s+\d+"),
    re.compile(r"#\s*size\s+count\s+type\b"),
    re.compile(r"#\s*Avg bus bandwidth\s*:"),
    re.compile(r"#\s*Out of bounds values\s*:"),
    re.compile(r"#\s*\(B\)\s+\(elements\)"),
    re.compile(rf"(?:^|[\s:>\]])\d+\s+\d+\s+(?:{_DTYPES})\s+(?:\S+\s+){{0,2}}[\d.]+\s+[\d.]+\s+[\d.]+"),
]
_RE_NCCL_ROW = _NCCL_PATTERNS[-1]
_RE_NCCL_NOISE = re.compile(r"NCCL (?:INFO|WARN)|#\s*Using devices|#\s*nccl-tests|_perf\b|^#\s*$")

_RE_MD = re.compile(r"^(?:#{1,6}\s+(?:[^\W\d_]|[`*\[])|```|\|.*\|\s*$|\s*[-*]\s+\S|\s*\d+\.\s+[A-Z`*])")
_RE_WORD = re.compile(r"[^\W\d_]{2,}")
# a line that starts with a time stamp (any program's log): `2026-12-05 10:01:02,123 INFO`, `[10:01:02]`,
# `Dec  5 10:01:02`, `[  12.345]`, `I1205 10:01:02.123`: a file of them is a log, never "documentation"
_RE_LOG_STAMP = re.compile(
    r"^\s*\[?\s*(?:\d{4}[-/]\d\d[-/]\d\d[T ]\d\d:\d\d|\d\d:\d\d:\d\d|[^\W\d_]{3}\s+\d{1,2}\s+\d\d:\d\d"
    r"|[+]?\d+\.\d+\s*\]|[IWEF]\d{4}\s+\d\d:\d\d)"
)


def _is_prose(line: str) -> bool:
    """A sentence: mostly words, not numbers or key=value fields."""
    toks = line.split()
    if len(toks) < 7:
        return False
    words = sum(1 for t in toks if _RE_WORD.fullmatch(t.strip(".,;:()!?'\"`*")))
    return words >= 0.6 * len(toks)


def _text_like(head: bytes) -> bool:
    if not head:
        return True
    if b"\0" in head[:4096]:
        return False
    sample = head[:4096]
    bad = sum(1 for b in sample if b < 9 or 13 < b < 32)
    return bad <= len(sample) // 100


def identify(path: Path) -> str:
    """'openmetrics', 'prometheus', 'kmsg', 'kmsg-journal-json', 'kmsg-raw', 'fleettool-events', 'nccl-tests',
    'nccl-tests-json', 'nvidia-smi-xml', 'nvidia-smi-text', 'dcgmi-diag', 'dcgmi-diag-json', 'dcgmi-health',
    'dcgmi-health-json', 'dcgmi-dmon', 'dcgmi-discovery', 'slurm-topology', 'sacct', 'kube-nodes',
    'topology-csv', 'ibstat', 'ibv-devinfo', 'perfquery', 'iblinkinfo', 'ib-sysfs-tar', 'duckdb', or 'unknown', from the content (gunzipped)."""
    return identify_why(path).format


def identify_why(path: Path) -> Identity:
    """The file's format from its content, with the shape (kernel log: which one) or why no reader takes it."""
    try:
        raw = read_head(path)
    except OSError as e:
        return Identity("unknown", why=f"cannot read it ({e.strerror or e})")
    return identify_bytes(raw)


def identify_bytes(raw: bytes) -> Identity:
    """identify() over the first bytes of a file's content."""
    if raw[:2] == GZIP_MAGIC:
        return Identity("unknown", why="gzip data that does not decompress")
    if len(raw) >= 12 and raw[8:12] == b"DUCK":
        return Identity("duckdb", why="a DuckDB database, not a recording")
    if not raw.strip():
        return Identity("unknown", why="empty file" if not raw else "only whitespace")
    if raw[257:262] == b"ustar":  # a tar archive (gunzipped above): a saved /sys/class/infiniband, or why not
        lay = sniff_tar(raw)
        if lay is not None:
            return Identity("ib-sysfs-tar", f"tar of {lay}")
        return Identity("unknown", why="a tar archive, but not of /sys/class/infiniband")
    if not _text_like(raw):
        return Identity("unknown", why="binary data, not text")
    head = raw.decode("utf-8", "replace")
    if len(raw) == HEAD:  # the last line may be cut: leave it out
        head = head[: head.rfind("\n") + 1] or head
    stripped = head.lstrip("\ufeff \t\r\n")
    if "<nvidia_smi_log" in head:
        return Identity("nvidia-smi-xml", "nvidia-smi -q -x")
    if stripped.startswith("<"):
        return Identity("unknown", why="XML/HTML, but not nvidia-smi -q -x (no <nvidia_smi_log>)")
    if "==============NVSMI LOG==============" in head:
        return Identity("nvidia-smi-text", "nvidia-smi -q")
    dcgmi = identify_dcgmi(head)
    if dcgmi is not None:
        return dcgmi
    topo = identify_topology(head)
    if topo is not None:
        return topo
    ib = ib_text.sniff(head)  # ibstat, ibstatus, ibv_devinfo, perfquery, iblinkinfo
    if ib is not None:
        return Identity(*ib)
    if re.search(r"^\|\s*NVIDIA-SMI \d", head, re.M):
        return Identity("unknown", why="nvidia-smi's table view (save nvidia-smi -q or -q -x instead)")
    smi_paste = sniff_smi_paste(head.splitlines()[:400])  # -q as pasted: a prompt line, a lone -d section
    if smi_paste is not None:
        return Identity("nvidia-smi-text", smi_paste)
    if stripped.startswith("{"):
        hit = _identify_json(stripped)
        if hit is not None:
            return hit
    lines = [ln.rstrip("\r") for ln in head.splitlines() if ln.strip()][:400]
    if stripped.startswith("[") and not any(rx.match(lines[0]) for _, rx in _KSHAPES[:2]):
        try:
            json.loads(head)
            return Identity("unknown", why="a JSON array, not nccl-tests -J nor journalctl -o json")
        except ValueError:
            pass
    ident = _identify_lines(lines)
    if ident.format == "metrics":
        fmt = refine_metrics(head)
        return Identity(fmt)
    return ident


def identify_topology(head: str) -> Identity | None:
    """Topology and job files: Slurm topology.conf, sacct --parsable2, kubectl get nodes -o json, a topology CSV."""
    lines = [ln.rstrip("\r") for ln in head.splitlines() if ln.strip()][:400]
    plugin = slurm_topology.sniff(lines)
    if plugin is not None:
        return Identity("slurm-topology", f"topology/{plugin}")
    if lines and sacct.is_header(lines[0]):
        return Identity("sacct", "sacct --parsable2")
    if kube_nodes.sniff(head):
        return Identity("kube-nodes", "kubectl get nodes -o json")
    if lines and topology_csv.sniff(lines[0]):
        return Identity("topology-csv", "node,rack,nvlink_domain,leaf")
    return None


# dcgmi's outputs (fleettool.formats.dcgmi_*): their tables must not be taken for Markdown
_RE_DCGMI_DIAG = re.compile(
    r"^[ \t]*(?:>[ \t]*)?(?:\|\s*Diagnostic\s+\|\s*Result\s*\||[|+]-{2,}\s+(?:Metadata|Deployment|Integration|Hardware"
    r"|Stress|Software|Custom)\s+-+[+|])",
    re.M,
)
_RE_DCGMI_HEALTH = re.compile(
    r"^[ \t]*(?:>[ \t]*)?\|\s*Overall Health\s+\|\s*(?:Healthy|Warning|Failure)", re.M
)
_RE_DCGMI_DMON = re.compile(r"^[ \t]*(?:>[ \t]*)?#Entity\s+\S", re.M)
_RE_DCGMI_DMON_ROW = re.compile(
    r"^[ \t]*(?:>[ \t]*)?(?:GPU|GPU-I|GPU-CI|Switch|CPU|Core|Link)\s+\d+\s+\S", re.M
)
_RE_DCGMI_DISCOVERY = re.compile(r"^[ \t]*(?:>[ \t]*)?\d+ GPUs? found\.", re.M)
_RE_DCGMI_DISCOVERY_ROW = re.compile(r"^[ \t]*(?:>[ \t]*)?\|\s*GPU ID\s*\|\s*Device Information", re.M)


def identify_dcgmi(head: str) -> Identity | None:
    """dcgmi's text outputs, by what they print: diag's table, health's report, dmon's columns, discovery's list;
    and their -j JSON (after a prompt line too)."""
    if _RE_DCGMI_DIAG.search(head):
        return Identity("dcgmi-diag", "dcgmi diag")
    if "Health Monitor Report" in head and _RE_DCGMI_HEALTH.search(head):
        return Identity("dcgmi-health", "dcgmi health -c")
    if _RE_DCGMI_DMON.search(head) and _RE_DCGMI_DMON_ROW.search(head):
        return Identity("dcgmi-dmon", "dcgmi dmon")
    if _RE_DCGMI_DISCOVERY.search(head) and _RE_DCGMI_DISCOVERY_ROW.search(head):
        return Identity("dcgmi-discovery", "dcgmi discovery -l")
    brace = head.find("{")
    if brace >= 0 and (not head[:brace].strip(" \t\r\n$#>`") or "dcgmi" in head[:brace]):
        body = head[brace:]
        if '"DCGM GPU Diagnostic"' in body or ('"test_categories"' in body and '"status"' in body):
            return Identity("dcgmi-diag-json", "dcgmi diag -j")
        if '"Health Monitor Report"' in body and '"body"' in body:
            return Identity("dcgmi-health-json", "dcgmi health -c -j")
    return None


def _identify_json(text: str) -> Identity | None:
    first = text.split("\n", 1)[0].strip()
    try:
        doc = json.loads(first)
    except ValueError:
        doc = None
    if (
        isinstance(doc, dict)
        and "MESSAGE" in doc
        and ("__REALTIME_TIMESTAMP" in doc or "_TRANSPORT" in doc or "__CURSOR" in doc)
    ):
        return Identity("kmsg-journal-json", "journalctl -o json")
    if isinstance(doc, dict) and doc.keys() >= EVENT_KEYS_REQUIRED:
        return Identity("fleettool-events", "JSON lines")
    keys = set(re.findall(r'"([A-Za-z_]+)"\s*:', text[:HEAD]))
    if ("results" in keys or "nccl_version" in keys) and (
        {"busbw", "algbw", "config", "nccl_version", "devices"} & keys
    ):
        return Identity("nccl-tests-json", "nccl-tests -J")
    return Identity("unknown", why="JSON, but not nccl-tests -J, journalctl -o json nor fleettool's events")


def _identify_lines(lines: list[str]) -> Identity:
    n = len(lines)
    shapes: dict[str, int] = {}
    kernel = raw_kmsg = expo = expo_comments = nccl_struct = nccl_noise = markdown = prose = gpu_kernel = 0
    stamped = 0  # lines of another program's log (a time stamp first)
    nccl_kinds: set[int] = set()
    for ln in lines:
        if _RE_GPU_KERNEL.search(ln):
            gpu_kernel += 1
        if _RE_KMSG_RAW.match(ln) or _RE_KMSG_CONT.match(ln):
            raw_kmsg += 1
            continue
        if (
            "kernel:" not in ln
            and not _RE_GPU_KERNEL.search(ln)
            and not _RE_EXPO_COMMENT.match(ln)
            and not _RE_EXPO_SAMPLE.match(ln)
        ):
            # another program's lines in a syslog or journal (`host nccl-tests[29520]: # nThread 1 ...`) match the
            # syslog shape; what they say decides, so nccl-tests output logged through syslog stays nccl-tests
            nk = [i for i, rx in enumerate(_NCCL_PATTERNS) if rx.search(ln)]
            if nk:
                nccl_struct += 1
                nccl_kinds.update(nk)
                continue
            if _RE_NCCL_NOISE.search(ln):
                nccl_noise += 1
                continue
        hit = False
        for name, rx in _KSHAPES:
            if rx.match(ln):
                shapes[name] = shapes.get(name, 0) + 1
                kernel += 1
                hit = True
                break
        if hit:
            continue
        if _RE_JOURNAL_SEP.match(ln) or (ln[:1].isspace() and "NVRM:" in ln):
            kernel += 1  # journal boot separators, continuation lines of a multi-line kernel message
            continue
        if _RE_EXPO_COMMENT.match(ln):
            expo_comments += 1
            continue
        if _RE_EXPO_SAMPLE.match(ln):
            expo += 1
            continue
        if _RE_LOG_STAMP.match(ln):
            stamped += 1
        elif _RE_MD.match(ln):
            markdown += 1
        elif _is_prose(ln):
            prose += 1
    doc = markdown + prose
    if raw_kmsg >= max(1, n // 2):
        return Identity("kmsg-raw", "/dev/kmsg records")
    if kernel >= max(1, n // 2) or (gpu_kernel and kernel >= n // 4 and doc < n // 4):
        shape = max(shapes, key=lambda k: shapes[k]) if shapes else "kernel lines"
        return Identity("kmsg", shape)
    if (expo + expo_comments) >= max(1, (n + 1) // 2) and expo:
        return Identity("metrics", "exposition")  # refined by the caller of _identify_lines
    row = len(_NCCL_PATTERNS) - 1
    structural = {0, 1, 2, 3}
    if (
        (nccl_kinds & structural or row in nccl_kinds)
        and nccl_struct >= 2
        and nccl_struct + nccl_noise >= max(2, (n * 3) // 10)
        and doc * 2 < n
    ):
        return Identity("nccl-tests")
    commas = lines[0].count(",") if lines else 0
    if commas >= 2 and sum(1 for ln in lines if ln.count(",") >= commas) * 10 >= n * 6:
        return Identity("unknown", why="a CSV table, not a recording")
    if stamped >= max(1, n // 4) and stamped >= doc:
        return Identity("unknown", why=_log_why(lines, stamped, n, gpu_kernel))
    if doc >= max(1, n // 4):
        kind = "Markdown" if markdown else "prose"
        return Identity("unknown", why=f"documentation ({kind}), not a recording")
    if gpu_kernel:
        return Identity(
            "unknown",
            why=f"mentions {gpu_kernel} NVRM lines but is not a kernel log ({n - kernel} other lines)",
        )
    first = lines[0][:60] if lines else ""
    return Identity("unknown", why=f"not a format fleettool reads (first line: {first!r})")


def _log_why(lines: list[str], stamped: int, n: int, gpu_kernel: int) -> str:
    """Why a log no reader takes is skipped: what it looked like, with its first stamped line."""
    first = next((ln for ln in lines if _RE_LOG_STAMP.match(ln)), "")[:60]
    gpu = f", {gpu_kernel} NVRM lines among them" if gpu_kernel else ", no NVRM line"
    return (
        f"a program's log ({stamped} of {n} lines start with a time stamp{gpu}; first: {first!r}), "
        "not a kernel log, nccl-tests output nor metrics"
    )


def refine_metrics(head: str) -> str:
    """'openmetrics' when the exposition ends in `# EOF` or its timestamps are seconds, else 'prometheus'."""
    if "# EOF" in head:
        return "openmetrics"
    for ln in head.splitlines():
        if not ln or ln.startswith("#"):
            continue
        ts = sample_timestamp(ln)
        # the first plausible timestamp decides: one absurd value (-5, 1e30) must not turn a file of milliseconds
        # into seconds, which would put every other sample out of range
        millis = decide_millis(ts) if ts is not None else None
        if millis is not None:
            return "prometheus" if millis else "openmetrics"
    return "prometheus"


def sample_timestamp(line: str) -> float | None:
    """The timestamp of one exposition sample line, or None when it has none."""
    brace = line.rfind("}")
    rest = line[brace + 1 :].split() if brace >= 0 else line.split()[1:]
    if len(rest) != 2:
        return None
    try:
        return float(rest[1])
    except ValueError:
        return None


def exposition_timestamps(path: Path) -> tuple[int, int]:
    """(sample lines with a timestamp, sample lines without) in the first HEAD bytes of an exposition."""
    head = read_head(path).decode("utf-8", "replace")
    with_ts = without = 0
    for ln in head.splitlines():
        if not ln or ln.startswith("#") or not _RE_EXPO_SAMPLE.match(ln):
            continue
        if sample_timestamp(ln) is None:
            without += 1
        else:
            with_ts += 1
    return with_ts, without
