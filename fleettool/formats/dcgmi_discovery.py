"""`dcgmi discovery -l`: the GPUs DCGM sees, each with its name, PCI bus id and UUID.

    4 GPUs found.
    +--------+----------------------------------------------------------------------+
    | GPU ID | Device Information                                                   |
    +--------+----------------------------------------------------------------------+
    | 0      | Name: <<<NULL>>>                                                     |
    |        | PCI Bus ID: 00000000:4C:00.0                                         |
    |        | Device UUID: GPU-d6a2c177-4cd8-8d01-0310-79f2720f37de                |

`<<<NULL>>>` is DCGM's blank string (DCGM_STR_BLANK): no name. The NvSwitch and CPU tables that follow are not
GPUs and are passed over.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from fleettool.formats.errors import ParseIssue

_RE_FOUND = re.compile(r"^(\d+)\s+(GPUs?|NvSwitch(?:es)?|CPUs?|ConnectX(?:es)?)\s+found\.?", re.I)
_RE_ROW = re.compile(r"^\|\s*(\d*)\s*\|\s*(.*?)\s*\|\s*$")
_BLANK = "<<<NULL>>>"


@dataclass
class DiscoveredGpu:
    gpu: int
    name: str | None = None
    pci_bus_id: str | None = None
    uuid: str | None = None
    line: int = 0


@dataclass
class Discovery:
    gpus: list[DiscoveredGpu] = field(default_factory=list)
    announced: int | None = None  # "4 GPUs found."
    issues: list[ParseIssue] = field(default_factory=list)


def parse_discovery(lines: Iterable[str], path: str = "") -> Discovery:
    out = Discovery()
    in_gpus = False
    cur: DiscoveredGpu | None = None
    for lineno, raw in enumerate(lines, 1):
        line = raw.strip().lstrip("> ")
        f = _RE_FOUND.match(line)
        if f:
            in_gpus = f.group(2).lower().startswith("gpu")
            if in_gpus:
                out.announced = int(f.group(1))
            cur = None
            continue
        m = _RE_ROW.match(line)
        if not (in_gpus and m):
            continue
        if m.group(1):
            cur = DiscoveredGpu(int(m.group(1)), line=lineno)
            out.gpus.append(cur)
        if cur is None or ":" not in m.group(2):
            continue
        key, value = (x.strip() for x in m.group(2).split(":", 1))
        value = "" if value == _BLANK else value
        if key == "Name":
            cur.name = value or None
        elif key == "PCI Bus ID":
            cur.pci_bus_id = value or None
        elif key == "Device UUID":
            cur.uuid = value or None
    if out.announced is not None and out.announced != len(out.gpus):
        out.issues.append(
            ParseIssue(path, 0, f"dcgmi discovery: says {out.announced} GPUs found, lists {len(out.gpus)}")
        )
    return out
