"""`ibstat` and `ibstatus` text (rdma-core / infiniband-diags) parsed into ib_sysfs's port shape: device, port,
state, physical state, rate in Gb/s, link layer. Pure: text in, ports and issues out.

ibstat prints `CA 'mlx5_0'` blocks with `Port 1:` sections (`State: Active`, `Physical state: LinkUp`,
`Rate: 400`, `Link layer: InfiniBand`); ibstatus prints `Infiniband device 'mlx5_0' port 1 status:` blocks in
sysfs's own words (`state: 4: ACTIVE`, `rate: 400 Gb/sec (4X NDR)`). A run that failed part-way (`ibpanic: ...`,
exit 255 in rdma-core 39) is an issue naming the line; the ports printed before it are kept."""

from __future__ import annotations

import re
from dataclasses import dataclass

from fleettool.formats.errors import ParseIssue
from fleettool.formats.ib_sysfs import PHYS_STATES, PORT_STATES, IbPort, parse_numbered, parse_rate

# ibstat's words (infiniband-diags ibstat.c port_state_str / port_phy_state_str) -> the sysfs numbers.
_STATE_WORDS = {
    "down": 1,
    "initializing": 2,
    "initialize": 2,
    "init": 2,
    "armed": 3,
    "active": 4,
    "active_defer": 5,
}
_PHYS_WORDS = {name.lower(): num for num, name in PHYS_STATES.items()} | {
    "polling": 2,
    "disabled": 3,
    "linkup": 5,
    "phy test": 7,
    "portconfigurationtraining": 4,
    "linkerrorrecovery": 6,
}

_CA = re.compile(r"^CA '([^']+)'\s*$")
_PORT = re.compile(r"^\s+Port (\d+):\s*$")
_KV = re.compile(r"^\s+([A-Za-z][A-Za-z _]*?):\s*(.*?)\s*$")
_IBSTATUS = re.compile(r"^Infiniband device '([^']+)' port (\d+) status:\s*$")


def _panic(line: str, path: str, lineno: int) -> ParseIssue | None:
    s = line.strip()
    if s.startswith("ibpanic:"):
        return ParseIssue(path, lineno, f"ibstat failed: {s}")
    if s.startswith("ibwarn:"):
        return ParseIssue(path, lineno, f"ibstat warned: {s}")
    return None


def set_state(port: IbPort, word: str) -> None:
    num, name = parse_numbered(word)
    if num is None:
        num = _STATE_WORDS.get(word.strip().lower())
    port.state = num
    port.state_name = PORT_STATES.get(num, name) if num is not None else name


def set_phys(port: IbPort, word: str) -> None:
    num, name = parse_numbered(word)
    if num is None:
        num = _PHYS_WORDS.get(word.strip().lower())
    port.phys_state = num
    port.phys_state_name = PHYS_STATES.get(num, name) if num is not None else name


def _set_rate(port: IbPort, text: str, path: str, lineno: int, issues: list[ParseIssue]) -> None:
    port.rate_text = text
    if "Gb/sec" in text:
        port.rate_gbps = parse_rate(text)
    else:
        try:
            port.rate_gbps = float(text)
        except ValueError:
            port.rate_gbps = None
    if port.rate_gbps is None:
        issues.append(ParseIssue(path, lineno, f"rate not understood: {text!r}"))


@dataclass(frozen=True)
class _Dialect:
    """What sets one tool's output apart: how a port block starts, and its words for the four fields."""

    tool: str
    keys: dict[str, str]  # the tool's key (lower case) -> state | phys | rate | layer
    missing: str  # the issue when the text holds no port block


_IBSTAT = _Dialect(
    "ibstat",
    {"state": "state", "physical state": "phys", "rate": "rate", "link layer": "layer"},
    "no CA/Port blocks: not ibstat output",
)
_IBSTATUS_D = _Dialect(
    "ibstatus",
    {"state": "state", "phys state": "phys", "rate": "rate", "link_layer": "layer"},
    "no 'Infiniband device ... status:' blocks: not ibstatus output",
)


def _start(d: _Dialect, line: str, device: str | None) -> tuple[str | None, int | None, bool]:
    """(device, port) when `line` opens a port block; (device, None, True) for ibstat's CA line."""
    if d is _IBSTATUS_D:
        m = _IBSTATUS.match(line)
        return (m.group(1), int(m.group(2)), False) if m else (device, None, False)
    m = _CA.match(line)
    if m:
        return m.group(1), None, True
    m = _PORT.match(line)
    return (device, int(m.group(1)), False) if m else (device, None, False)


def _parse(d: _Dialect, text: str, path: str) -> tuple[list[IbPort], list[ParseIssue]]:
    ports: list[IbPort] = []
    issues: list[ParseIssue] = []
    device: str | None = None
    port: IbPort | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        panic = _panic(line, path, lineno)
        if panic:
            issues.append(panic)
            port = None
            continue
        device, num, ca = _start(d, line, device)
        if ca:
            port = None
            continue
        if num is not None:
            if device is None:
                issues.append(ParseIssue(path, lineno, "a Port line before any CA line"))
                continue
            port = IbPort(device, num)
            ports.append(port)
            continue
        m = _KV.match(line)
        if m is None or port is None:
            continue
        field, value = d.keys.get(m.group(1).strip().lower()), m.group(2)
        if field == "state":
            set_state(port, value)
        elif field == "phys":
            set_phys(port, value)
        elif field == "rate":
            _set_rate(port, value, path, lineno, issues)
        elif field == "layer":
            port.link_layer = value
    if not ports and not issues:
        issues.append(ParseIssue(path, 0, d.missing))
    return ports, issues


def parse_ibstat(text: str, path: str = "-") -> tuple[list[IbPort], list[ParseIssue]]:
    return _parse(_IBSTAT, text, path)


def parse_ibstatus(text: str, path: str = "-") -> tuple[list[IbPort], list[ParseIssue]]:
    return _parse(_IBSTATUS_D, text, path)


def parse_ib_status_text(text: str, path: str = "-") -> tuple[list[IbPort], list[ParseIssue]]:
    """Either tool's output, told apart by content."""
    if any(_IBSTATUS.match(line) for line in text.splitlines()):
        return parse_ibstatus(text, path)
    return parse_ibstat(text, path)
