"""`dcgmi diag -r N` output, the plain table and `-j` JSON, as results per test and GPU.

The table (DCGM 3 and 4), as pasted into an issue (prompt line first, in a Markdown fence, indented):

    +---------------------------+------------------------------------------------+
    | Diagnostic                | Result                                         |
    +===========================+================================================+
    |-----  Metadata  ----------+------------------------------------------------|
    | GPU Device IDs Detected   | 2330,2330,2330,2330,2330,2330,2330,2330        |
    |-----  Deployment  --------+------------------------------------------------|
    | Persistence Mode          | Pass                                           |
    +-----  Hardware  ----------+------------------------------------------------+
    | GPU Memory                | Fail - All                                     |
    | Warning                   | GPU 0 Error using CUDA API cuInit Check DCGM   |
    |                           | and system logs for errors. Reset GPU. Restar  |

A result names its GPUs (`Pass - All`, `Fail - GPU: 5`, `Pass - GPUs: 0, 1`; a second line of the same test
carries another status); `All` is every GPU the Metadata counts (`GPU Device IDs Detected`). `Warning` and
`Info` rows belong to the test above them; dcgmi cuts their text at a fixed width, mid-word, so the pieces are
joined as cut. A warning naming a GPU (`GPU 5 ...`) is that GPU's; DCGM_FR_GFLOPS_THRESHOLD_VIOLATION's message
("Detected 511.70 GFLOPs for GPU 5 which is below the threshold 1480.77") gives the measured and expected figures.

JSON: DCGM 3's `{"DCGM GPU Diagnostic": {"test_categories": [{"tests": [{"name", "results": [{"gpu_id",
"status", "info", "warnings": [{"error_id", "warning"}]}]}]}]}}` and DCGM 4's `{"tests": [{"name", "results":
[{"entity_id", "status", ...}]}]}`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from fleettool.formats.dcgmi_codes import match_errors
from fleettool.formats.errors import ParseIssue

# DCGM's status -> fleettool's burn-in verdict; a test DCGM skipped did not say the GPU is good (burnin/verdict.py)
VERDICT = {
    "pass": "PASS",
    "fail": "FAIL",
    "warn": "WARN",
    "warning": "WARN",
    "skip": "INCONCLUSIVE",
    "skipped": "INCONCLUSIVE",
    "not run": "INCONCLUSIVE",
}


@dataclass
class DiagResult:
    test: str  # DCGM's name: "GPU Memory", "Diagnostic", "Persistence Mode"
    category: str  # Deployment, Integration, Hardware, Stress ("" when the output does not say)
    gpu: int | None  # None: the node (a deployment check), or GPUs the output does not count
    status: str  # DCGM's word, lower case: pass, fail, warn, skip
    figure: float | None = None  # the measured figure a warning or info gives (GFLOPs)
    unit: str = ""
    floor: float | None = None  # the threshold it was held to
    warnings: list[str] = field(default_factory=list)
    info: list[str] = field(default_factory=list)
    error_ids: list[int] = field(default_factory=list)
    line: int = 0

    @property
    def verdict(self) -> str:
        return VERDICT.get(self.status, "INCONCLUSIVE")

    @property
    def test_key(self) -> str:
        """The burn-in test name: dcgm-gpu-memory, dcgm-diagnostic."""
        return "dcgm-" + re.sub(r"[^a-z0-9]+", "-", self.test.lower()).strip("-")


@dataclass
class DiagReport:
    results: list[DiagResult] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)  # DCGM Version, Driver Version Detected, ...
    issues: list[ParseIssue] = field(default_factory=list)


_RE_SECTION = re.compile(r"^[|+]-{2,}\s+([A-Za-z][\w ]*?)\s+-+[+|]")
_RE_STATUS = re.compile(r"^(pass|fail|warn|warning|skip|skipped|not run)\b\s*(?:-\s*(.*))?$", re.I)
_RE_GPU_LIST = re.compile(r"^GPUs?\s*:\s*([\d,\s]+)$", re.I)
_RE_GPU_LEAD = re.compile(r"^\s*GPU\s+(\d+)\b")
_RE_GFLOPS_INFO = re.compile(r"calculated at approximately\s+([\d.]+)\s+gigaflops", re.I)
_NOTE_ROWS = {"warning": "warnings", "info": "info", "error": "warnings"}


def _table_row(line: str) -> list[str] | None:
    """The cells of one table row (`| a | b |`), the raw text between the bars, or None."""
    s = line.strip()
    if s.startswith(">"):  # a Markdown quote
        s = s.lstrip("> ")
    if not (s.startswith("|") and s.count("|") >= 2):
        return None
    cells = s.split("|")[1:]
    if s.endswith("|"):
        return cells[:-1]
    cells[-1] = cells[-1].rstrip() + "  "  # a paste cut before the closing bar: its text, as if padded
    return cells


def _chunk(raw: str) -> str:
    """One piece of a cut cell: dcgmi writes ' ' + piece + padding; a full piece ends two columns before the bar."""
    return raw[1:-2] if len(raw) > 3 else raw.strip()


class _Test:
    def __init__(self, name: str, category: str, line: int) -> None:
        self.name, self.category, self.line = name, category, line
        self.statuses: list[tuple[str, str]] = []  # (status, the GPUs it names)
        self.notes: list[tuple[str, list[str]]] = []  # (warnings|info, pieces)
        self.error_row = False  # an `Error` row of its own (no test above it): a FAIL of the GPU it names


def parse_diag_text(lines: Iterable[str], path: str = "") -> DiagReport:
    rep = DiagReport()
    tests: list[_Test] = []
    category = ""
    cur: _Test | None = None
    note: list[str] | None = None
    for lineno, line in enumerate(lines, 1):
        sec = _RE_SECTION.match(line.strip().lstrip("> "))
        if sec:
            category, cur, note = sec.group(1).strip(), None, None
            continue
        cells = _table_row(line)
        if cells is None or len(cells) < 2:
            continue
        name, value = cells[0].strip(), cells[1]
        if name == "Diagnostic" and value.strip() == "Result":
            continue
        if (
            name.lower() == "error" and cur is None
        ):  # DCGM could not run the tests: `GPU 3 has uncorrectable ...`
            cur = _Test(f"{category} error".strip(), category, lineno)
            cur.statuses.append(("fail", ""))
            cur.error_row = True
            tests.append(cur)
            note = [_chunk(value)]
            cur.notes.append(("warnings", note))
        elif name.lower() in _NOTE_ROWS and cur is not None:
            note = [_chunk(value)]
            cur.notes.append((_NOTE_ROWS[name.lower()], note))
        elif not name:
            if note is not None:
                note.append(_chunk(value))
            elif cur is not None:
                m = _RE_STATUS.match(value.strip())
                if m is None:
                    rep.issues.append(
                        ParseIssue(path, lineno, f"dcgmi diag: {cur.name!r}: not read: {value.strip()!r}")
                    )
                else:
                    cur.statuses.append((m.group(1).lower(), (m.group(2) or "").strip()))
        elif category.lower() == "metadata":
            rep.metadata[name] = value.strip()
            cur = note = None
        else:
            note = None
            m = _RE_STATUS.match(value.strip())
            if m is None:
                rep.issues.append(
                    ParseIssue(path, lineno, f"dcgmi diag: {name!r} has no status: {value.strip()!r}")
                )
                cur = None
                continue
            cur = _Test(name, category, lineno)
            cur.statuses.append((m.group(1).lower(), (m.group(2) or "").strip()))
            tests.append(cur)
    n_gpus = len([x for x in rep.metadata.get("GPU Device IDs Detected", "").split(",") if x.strip()])
    for t in tests:
        rep.results.extend(_expand(t, n_gpus, path, rep.issues))
    return rep


def _gpus(which: str, n_gpus: int) -> list[int | None] | None:
    if not which:
        return [None]
    if which.lower() == "all":
        return list(range(n_gpus)) if n_gpus else [None]
    m = _RE_GPU_LIST.match(which)
    if m:
        return [int(x) for x in m.group(1).replace(",", " ").split()]
    return None


def _expand(t: _Test, n_gpus: int, path: str, issues: list[ParseIssue]) -> list[DiagResult]:
    by_gpu: dict[int | None, DiagResult] = {}
    if t.error_row:  # the GPUs its messages name, else the node
        leads = [_RE_GPU_LEAD.match(" ".join("".join(p).split())) for _, p in t.notes]
        named = sorted({int(m.group(1)) for m in leads if m})
        t.statuses = [("fail", "GPUs: " + ", ".join(map(str, named)) if named else "")]
    for status, which in t.statuses:
        gpus = _gpus(which, n_gpus)
        if gpus is None:
            issues.append(ParseIssue(path, t.line, f"dcgmi diag: {t.name!r}: GPUs not read from {which!r}"))
            gpus = [None]
        for g in gpus:
            by_gpu[g] = DiagResult(t.name, t.category, g, status, line=t.line)
    for kind, pieces in t.notes:
        text = " ".join("".join(pieces).split())
        texts = [x.strip() for x in text.split(",") if x.strip()] if kind == "info" else [text]
        for x in texts:
            lead = _RE_GPU_LEAD.match(x)
            gpu = int(lead.group(1)) if lead else None
            targets = [by_gpu[gpu]] if gpu in by_gpu else list(by_gpu.values())
            for r in targets:
                _note(r, kind, x)
    return list(by_gpu.values())


def _note(r: DiagResult, kind: str, text: str) -> None:
    (r.warnings if kind == "warnings" else r.info).append(text)
    for m in match_errors(text):
        if m.error is None:
            continue
        if m.error.code not in r.error_ids:
            r.error_ids.append(m.error.code)
        if m.error.name == "DCGM_FR_GFLOPS_THRESHOLD_VIOLATION":
            r.figure, r.unit, r.floor = float(m.args[0]), m.args[1], float(m.args[3])
    g = _RE_GFLOPS_INFO.search(text)
    if g and r.figure is None:
        r.figure, r.unit = float(g.group(1)), "GFLOPs"


def parse_diag_json(doc: dict[str, Any]) -> DiagReport:
    """`dcgmi diag -j` (DCGM 3 'DCGM GPU Diagnostic' layout, and DCGM 4's 'tests' list) -> results."""
    rep = DiagReport()
    diag = doc.get("DCGM GPU Diagnostic") or doc
    for cat in diag.get("test_categories", []) or []:
        for t in cat.get("tests", []) or []:
            for r in t.get("results", []) or []:
                rep.results.append(
                    _json_result(str(t.get("name", "?")), str(cat.get("category", "")), r, "gpu_id")
                )
    for t in doc.get("tests", []) or []:  # DCGM 4 layout
        for r in t.get("results", []) or []:
            rep.results.append(
                _json_result(str(t.get("name", "?")), str(t.get("category", "")), r, "entity_id")
            )
    meta = diag.get("metadata") or {}
    if isinstance(meta, dict):
        rep.metadata.update({str(k): str(v) for k, v in meta.items() if not isinstance(v, (dict, list))})
    return rep


def _json_result(name: str, category: str, r: dict[str, Any], id_key: str) -> DiagResult:
    gid = r.get(id_key, r.get("gpu_ids"))
    gpu = int(gid) if isinstance(gid, (int, str)) and str(gid).isdigit() else None
    out = DiagResult(name, category, gpu, str(r.get("status", "")).strip().lower())
    for w in _listed(r.get("warnings")) + _listed(r.get("errors")):
        if isinstance(w, dict):
            text = str(w.get("warning") or w.get("message") or w.get("error") or "")
            if isinstance(w.get("error_id"), int) and w["error_id"] not in out.error_ids:
                out.error_ids.append(w["error_id"])
        else:
            text = str(w)
        _note(out, "warnings", " ".join(text.split()))
    for i in _listed(r.get("info")):
        _note(out, "info", " ".join(str(i.get("message", i) if isinstance(i, dict) else i).split()))
    return out


def _listed(v: Any) -> list[Any]:
    if v is None or v == "":
        return []
    return v if isinstance(v, list) else [v]
