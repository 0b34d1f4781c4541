"""`dcgmi dmon -e ID,...` output: one row per entity per sample, in the order of the fields asked for.

    #Entity        XIDER       TMPTR       POWER
    ID                         C           W
    GPU 1          120         36          69.250

The header names each column by its field's short name (dcgm_fields.cpp: XIDER is 230, TMPTR 150, POWER 155);
the command line, where the paste has it (`dcgmi dmon -e 230,150,155 -d 1000`), names the ids themselves and the
delay between samples (default 1000 ms). dmon prints no time: a sample is a round of rows, one per entity, a new
round starting when an entity comes again. `N/A` (or DCGM's blank values) is no reading.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from fleettool.formats.dcgmi_codes import FIELD_OF_SHORT_NAME
from fleettool.formats.errors import ParseIssue

DEFAULT_DELAY_MS = 1000  # dcgmi dmon --delay's default

_RE_CMD = re.compile(r"\bdcgmi\s+dmon\b(.*)$")
_RE_IDS = re.compile(r"(?:-e|--field-id)[\s=]+([\d,\s]+?)(?:\s+-|\s*$)")
_RE_DELAY = re.compile(r"(?:-d|--delay)[\s=]+(\d+)")
_RE_ROW = re.compile(r"^(GPU-I|GPU-CI|GPU|Switch|Link|CPU|Core|CX|NvSwitch)\s+(\d+)\s+(.*)$")


@dataclass
class DmonRow:
    sample: int  # 0-based: which round of rows
    entity_group: str  # GPU, GPU-I, Switch, ...
    entity_id: int
    values: dict[int, float | None]  # field id -> value (None: N/A)
    line: int


@dataclass
class DmonReport:
    field_ids: list[int] = field(default_factory=list)
    unknown_columns: list[str] = field(default_factory=list)
    delay_ms: int = DEFAULT_DELAY_MS
    delay_given: bool = False
    rows: list[DmonRow] = field(default_factory=list)
    issues: list[ParseIssue] = field(default_factory=list)

    @property
    def samples(self) -> int:
        return self.rows[-1].sample + 1 if self.rows else 0


def _value(tok: str) -> float | None:
    try:
        v = float(tok)
    except ValueError:
        return None
    return None if abs(v) >= 0x7FFFFFF0 else v  # DCGM's blank sentinels (DCGM_INT32_BLANK and above)


def parse_dmon(lines: Iterable[str], path: str = "") -> DmonReport:
    rep = DmonReport()
    cmd_ids: list[int] = []
    columns: list[int | None] = []
    seen: set[tuple[str, int]] = set()
    sample = 0
    for lineno, raw in enumerate(lines, 1):
        line = raw.strip().lstrip("> ")
        c = _RE_CMD.search(line)
        if c and not line.startswith("#"):
            ids = _RE_IDS.search(c.group(1) + " ")
            if ids:
                cmd_ids = [int(x) for x in re.split(r"[,\s]+", ids.group(1).strip()) if x]
            d = _RE_DELAY.search(c.group(1))
            if d:
                rep.delay_ms, rep.delay_given = int(d.group(1)), True
            continue
        if line.startswith("#Entity"):
            names = line.split()[1:]
            if cmd_ids and len(cmd_ids) == len(names):
                columns = list(cmd_ids)
            else:
                columns = [FIELD_OF_SHORT_NAME.get(n) for n in names]
                rep.unknown_columns = [n for n, f in zip(names, columns, strict=True) if f is None]
            rep.field_ids = [f for f in columns if f is not None]
            continue
        m = _RE_ROW.match(line)
        if not m:
            continue
        if not columns:
            rep.issues.append(ParseIssue(path, lineno, "dcgmi dmon: a row before the '#Entity' header"))
            continue
        key = (m.group(1), int(m.group(2)))
        if key in seen:
            sample, seen = sample + 1, set()
        seen.add(key)
        toks = m.group(3).split()
        if len(toks) != len(columns):
            rep.issues.append(
                ParseIssue(
                    path, lineno, f"dcgmi dmon: {len(toks)} values for {len(columns)} columns: {line[:60]!r}"
                )
            )
            continue
        vals = {f: _value(t) for f, t in zip(columns, toks, strict=True) if f is not None}
        rep.rows.append(DmonRow(sample, key[0], key[1], vals, lineno))
    return rep
