"""NVIDIA's XID catalog (generated data) and fleettool's policy for it (curated), joined into one judgement.

Reads fleettool/data/xid/catalog.csv (scripts/gen_xid_catalog.py) and policy.yaml. `judge(code, detail)` gives
the category, severity and action of one XID line, with the reason; the detail of the parsed line decides for
codes whose meaning is in the line (NVLink5 Fatal/Nonfatal, XID 154's recovery action). No I/O after loading.
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from fleettool.model import Action, Category, Severity
from fleettool.units import parse_duration


@dataclass(frozen=True, slots=True)
class XidEntry:
    code: int
    mnemonic: str
    description: str
    immediate: str  # NVIDIA's immediate resolution bucket
    investigatory: str


@dataclass(frozen=True, slots=True)
class RepeatRule:
    severity: Severity
    action: Action
    reason: str
    reboots: int | None = None  # escalate when the code recurs after this many reboots (reboots+1 boots)
    incidents: int | None = None  # or in this many separate bursts ...
    within_s: float | None = None  # ... within this window
    gap_s: float = 600.0  # lines closer than this are one burst
    same: tuple[str, ...] = ()  # bursts on one place: these fields of the line (gpc, tpc)


@dataclass(frozen=True, slots=True)
class Judgement:
    code: int
    name: str
    category: Category
    severity: Severity
    action: Action
    reason: str
    repeat: RepeatRule | None = None


@functools.cache
def catalog() -> dict[int, XidEntry]:
    text = resources.files("fleettool").joinpath("data/xid/catalog.csv").read_text(encoding="utf-8")
    out: dict[int, XidEntry] = {}
    for r in csv.DictReader(text.splitlines()):
        code = int(r["xid"])
        out[code] = XidEntry(code, r["mnemonic"], r["description"], r["immediate"], r["investigatory"])
    return out


@functools.cache
def policy() -> dict[str, Any]:
    text = resources.files("fleettool").joinpath("data/xid/policy.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ValueError("policy.yaml: not a mapping")
    return data


def _repeat(name: str | None) -> RepeatRule | None:
    if not name:
        return None
    prof = policy()["repeat_profiles"][name]
    return RepeatRule(
        severity=Severity(prof["severity"]),
        action=Action(prof["action"]),
        reason=str(prof["reason"]),
        reboots=prof.get("reboots"),
        incidents=prof.get("incidents"),
        within_s=parse_duration(prof["within"]) if "within" in prof else None,
        gap_s=parse_duration(prof.get("gap", "10m")),
        same=tuple(str(f) for f in prof.get("same", ())),
    )


def judge(code: int, detail: dict[str, Any] | None = None) -> Judgement:
    """The judgement for one XID line (detail: the parsed line's fields, e.g. nvlink_severity, recovery_to)."""
    pol = policy()
    entry = catalog().get(code)
    base: dict[str, Any]
    if entry is not None:
        base = dict(pol["buckets"].get(entry.immediate, pol["unknown"]))
        base["reason"] = str(base["reason"])
        name = entry.mnemonic
    else:
        base = dict(pol["unknown"])
        name = f"XID_{code}"
    over = pol["xids"].get(code)
    if over:
        base.update(over)
    detail = detail or {}
    if 144 <= code <= 150 and detail.get("nvlink_severity") in pol["nvlink5"]:
        nv = pol["nvlink5"][detail["nvlink_severity"]]
        base.update(severity=nv["severity"], action=nv["action"], reason=nv["reason"])
    if code == 154 and detail.get("recovery_to") in pol["recovery_actions"]:
        ra = pol["recovery_actions"][detail["recovery_to"]]
        base.update(
            severity=ra["severity"],
            action=ra["action"],
            reason=f"XID 154: the driver's recovery action is now {detail['recovery_to']!r}",
        )
    return Judgement(
        code=code,
        name=name,
        category=Category(base["category"]),
        severity=Severity(base["severity"]),
        action=Action(base["action"]),
        reason=str(base["reason"]),
        repeat=_repeat(base.get("repeat")),
    )
