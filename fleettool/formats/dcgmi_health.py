"""`dcgmi health -c` (the tree dcgmi prints, and `-j` JSON) as incidents per entity, each with DCGM's error code.

The text is DCGM's DcgmiOutputTree (dcgmi/Health.cpp, dcgmi/DcgmiOutput.cpp @ 72fa3fe): a section `GPU` with an
entity per line (`-> 3 | Failure`), its `Errors`, then one line per system (`-> Memory system | Failure`)
followed by the system's messages, cut at word boundaries into the right column; several incidents of one
system are joined with ', ':

    | Overall Health            | Failure                                                  |
    | GPU                       |                                                          |
    | -> 3                      | Failure                                                  |
    |    -> Errors              |                                                          |
    |       -> Memory system    | Failure                                                  |
    |                           | GPU 3 had memory errors and row remappings are           |
    |                           | pending                                                  |

JSON: {"header": ["Health Monitor Report"], "body": {"Overall Health": {"value": ...}, "GPU": {"children":
{"3": {"value": ..., "children": {"Errors": {"children": {"Memory system": {"value": ..., "overflow": [...]}}}}}}}}}.
The messages carry no code: each is matched back to its dcgmError_t by its format (formats.dcgmi_codes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from fleettool.formats.dcgmi_codes import match_errors
from fleettool.formats.errors import ParseIssue

HEALTH_WORDS = ("Healthy", "Warning", "Failure", "Internal error")


@dataclass
class Incident:
    entity_group: str  # GPU, NvSwitch, ConnectX, CPU ...
    entity_id: int | None
    system: str  # "Memory system", "PCIe system", "Driver"
    health: str  # Warning | Failure
    message: str
    code: int | None = None  # dcgmError_t, None when no known format matched
    code_name: str = ""
    line: int = 0


@dataclass
class HealthReport:
    overall: str | None = None
    incidents: list[Incident] = field(default_factory=list)
    issues: list[ParseIssue] = field(default_factory=list)


_RE_ROW = re.compile(r"^\|\s(.*?)\s\|\s(.*?)\s*\|\s*$")
_RE_LABEL = re.compile(r"^(\s*)(->\s+)?(.*?)\s*$")


def _split(
    rep: HealthReport, group: str, eid: int | None, system: str, health: str, text: str, line: int
) -> None:
    text = " ".join(text.split())
    for m in match_errors(text) or []:
        rep.incidents.append(
            Incident(
                group,
                eid,
                system,
                health,
                m.text,
                m.error.code if m.error else None,
                m.error.name if m.error else "",
                line,
            )
        )


def parse_health_text(lines: Iterable[str], path: str = "") -> HealthReport:
    rep = HealthReport()
    group = ""
    eid: int | None = None
    sysrow: tuple[str, str, int] | None = None  # the system being read: name, health, line
    text: list[str] = []

    def flush() -> None:
        nonlocal sysrow, text
        if sysrow is not None:
            _split(rep, group, eid, sysrow[0], sysrow[1], " ".join(text), sysrow[2])
        sysrow, text = None, []

    for lineno, line in enumerate(lines, 1):
        m = _RE_ROW.match(line.strip().lstrip("> "))
        if not m:
            continue
        left, value = m.group(1), m.group(2).strip()
        lab = _RE_LABEL.match(left)
        assert lab is not None
        depth, arrow, label = len(lab.group(1)), bool(lab.group(2)), lab.group(3)
        if not label:
            if sysrow is not None:
                text.append(value)
            continue
        if label == "Health Monitor Report":
            continue
        if label == "Overall Health":
            rep.overall = value
            continue
        if not arrow:  # a section: the entity group
            flush()
            group, eid = label, None
            continue
        if depth == 0:  # an entity of the group
            flush()
            eid = int(label) if label.isdigit() else None
            if eid is None:
                rep.issues.append(ParseIssue(path, lineno, f"dcgmi health: entity {label!r} is not a number"))
            continue
        if label == "Errors":
            continue
        flush()
        if value not in HEALTH_WORDS:
            rep.issues.append(ParseIssue(path, lineno, f"dcgmi health: {label!r}: health {value!r} not read"))
            continue
        sysrow = (label, value, lineno)
    flush()
    return rep


def parse_health_json(doc: dict[str, Any]) -> HealthReport:
    rep = HealthReport()
    body = doc.get("body") or {}
    overall = body.get("Overall Health")
    rep.overall = overall.get("value") if isinstance(overall, dict) else None
    for group, sec in body.items():
        if group == "Overall Health" or not isinstance(sec, dict):
            continue
        for ent, node in (sec.get("children") or {}).items():
            eid = int(ent) if str(ent).isdigit() else None
            errors = ((node.get("children") or {}).get("Errors") or {}).get("children") or {}
            for system, s in errors.items():
                text = " ".join(str(x) for x in s.get("overflow") or [])
                _split(rep, group, eid, system, str(s.get("value", "")), text, 0)
    return rep
