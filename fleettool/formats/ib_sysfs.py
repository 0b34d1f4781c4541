"""InfiniBand / RoCE ports read from a sysfs tree: ROOT stands in for /sys (node_exporter's --path.sysfs
convention), ports live under ROOT/class/infiniband/<dev>/ports/<n>/. Pure reads, no writes.

Each port gives state (`4: ACTIVE`), phys_state (`5: LinkUp`), rate (`400 Gb/sec (4X NDR)`) and link_layer,
and every file of counters/ and hw_counters/ as an integer, or None with the reason it could not be read
(`N/A (no PMA)`, EINVAL, empty, permission) -- never 0. Virtual functions (a `device/physfn` link) are skipped
and named with why: their counters mirror a share of the physical port.

Legacy PortCounters have fixed widths (IBTA spec v1.3, table 247; the same limits fabricmon's
infiniband/infiniband.go uses and the kernel's drivers/infiniband/core/sysfs.c PORT_PMA_ATTR declares):
the hardware stops at the maximum instead of wrapping, so a value at it is flagged `saturated` and its
delta is unknown. Counters not in the table (data/packet counters, which the kernel reads from
PortCountersExtended when it can, and hw_counters) are flagged at 2**32-1 or 2**64-1."""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

# IBTA v1.3 table 247 (PortCounters) widths, by the kernel's sysfs file name.
LEGACY_WIDTHS: dict[str, int] = {
    "symbol_error": 16,
    "link_error_recovery": 8,
    "link_downed": 8,
    "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16,
    "port_rcv_switch_relay_errors": 16,
    "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8,
    "port_rcv_constraint_errors": 8,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
    "VL15_dropped": 16,
    "port_xmit_wait": 32,
}
WIDE_MAXIMA = (2**32 - 1, 2**64 - 1)
COUNTER_DIRS = ("counters", "hw_counters")

PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
PHYS_STATES = {
    0: "NoChange",
    1: "Sleep",
    2: "Polling",
    3: "Disabled",
    4: "PortConfigurationTraining",
    5: "LinkUp",
    6: "LinkErrorRecovery",
    7: "PhyTest",
}

_NUMBERED = re.compile(r"^\s*(\d+)\s*:\s*(\S.*?)\s*$")
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec\b")


@dataclass(frozen=True, slots=True)
class Counter:
    value: int | None
    reason: str | None = None  # why value is None
    saturated: bool = False
    width: int | None = None  # bits, where the spec fixes it


@dataclass(slots=True)
class IbPort:
    device: str
    port: int
    state: int | None = None
    state_name: str | None = None
    phys_state: int | None = None
    phys_state_name: str | None = None
    rate_gbps: float | None = None
    rate_text: str | None = None
    link_layer: str | None = None
    counters: dict[str, Counter] = field(default_factory=dict)
    hw_counters: dict[str, Counter] = field(default_factory=dict)
    issues: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.device}/{self.port}"


@dataclass(slots=True)
class IbSysfs:
    ports: list[IbPort] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # device -> why
    issues: list[str] = field(default_factory=list)


def _read(path: Path) -> tuple[str | None, str | None]:
    """(text, None) or (None, reason)."""
    try:
        text = path.read_text(errors="replace")
    except PermissionError:
        return None, "permission denied"
    except OSError as e:
        if e.errno == errno.EINVAL:
            return None, "invalid argument (EINVAL)"
        return None, e.strerror or type(e).__name__
    text = text.strip()
    if not text:
        return None, "empty"
    return text, None


def is_saturated(name: str, value: int) -> bool:
    width = LEGACY_WIDTHS.get(name)
    if width is not None:
        return value >= (1 << width) - 1
    return value in WIDE_MAXIMA


def read_counter(path: Path) -> Counter:
    name = path.name
    width = LEGACY_WIDTHS.get(name)
    text, why = _read(path)
    if text is None:
        return Counter(None, why, width=width)
    try:
        value = int(text, 0) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return Counter(
            None, text if text.upper().startswith("N/A") else f"not an integer: {text!r}", width=width
        )
    if value < 0:
        return Counter(None, f"negative: {value}", width=width)
    return Counter(value, None, is_saturated(name, value), width)


def parse_numbered(text: str) -> tuple[int | None, str | None]:
    """`4: ACTIVE` -> (4, "ACTIVE"); a bare word -> (None, word)."""
    m = _NUMBERED.match(text)
    if m:
        return int(m.group(1)), m.group(2)
    return None, text.strip() or None


def parse_rate(text: str) -> float | None:
    """`400 Gb/sec (4X NDR)` -> 400.0; `10 Gb/sec (4X)` -> 10.0."""
    m = _RATE.match(text)
    return float(m.group(1)) if m else None


def read_port(device: str, port_dir: Path) -> IbPort | None:
    try:
        num = int(port_dir.name)
    except ValueError:
        return None
    port = IbPort(device, num)
    for attr in ("state", "phys_state", "rate", "link_layer"):
        text, why = _read(port_dir / attr)
        if text is None:
            port.issues.append(f"{attr}: {why}")
            continue
        if attr == "state":
            port.state, port.state_name = parse_numbered(text)
        elif attr == "phys_state":
            port.phys_state, port.phys_state_name = parse_numbered(text)
        elif attr == "rate":
            port.rate_text = text
            port.rate_gbps = parse_rate(text)
            if port.rate_gbps is None:
                port.issues.append(f"rate: not in Gb/sec: {text!r}")
        else:
            port.link_layer = text
    for sub in COUNTER_DIRS:
        d = port_dir / sub
        if not d.is_dir():
            continue
        target = port.counters if sub == "counters" else port.hw_counters
        for f in sorted(d.iterdir(), key=lambda p: p.name):
            if f.is_file() or f.is_symlink():  # a dangling link is read, and says why it failed
                target[f.name] = read_counter(f)
    return port


def read_ib_sysfs(root: str | os.PathLike[str]) -> IbSysfs:
    """Every physical function's ports under ROOT/class/infiniband, sorted by device and port."""
    out = IbSysfs()
    base = Path(root) / "class" / "infiniband"
    if not base.is_dir():
        out.issues.append(f"{base}: no such directory (no RDMA devices, or not a sysfs root)")
        return out
    for dev in sorted(base.iterdir(), key=lambda p: p.name):
        if not dev.is_dir():
            continue
        physfn = dev / "device" / "physfn"
        if physfn.exists() or physfn.is_symlink():
            out.skipped[dev.name] = (
                f"virtual function ({physfn} exists); its physical function is read instead"
            )
            continue
        ports_dir = dev / "ports"
        if not ports_dir.is_dir():
            out.issues.append(f"{dev.name}: no ports directory")
            continue
        ports = [p for p in (read_port(dev.name, d) for d in ports_dir.iterdir() if d.is_dir()) if p]
        out.ports.extend(sorted(ports, key=lambda p: p.port))
    return out


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Counters of one read, keyed by port key then counter name (`counters/link_downed`)."""

    boot_id: str
    values: dict[str, dict[str, Counter]]


def snapshot(reading: IbSysfs, boot_id: str) -> Snapshot:
    values: dict[str, dict[str, Counter]] = {}
    for p in reading.ports:
        row = {f"counters/{k}": v for k, v in p.counters.items()}
        row.update({f"hw_counters/{k}": v for k, v in p.hw_counters.items()})
        values[p.key] = row
    return Snapshot(boot_id, values)


@dataclass(frozen=True, slots=True)
class Delta:
    value: int | None
    reason: str | None = None  # why None, or why the delta is not cur - prev
    reset: bool = False


def counter_delta(prev: Counter | None, cur: Counter, same_boot: bool = True) -> Delta:
    if cur.value is None:
        return Delta(None, f"unreadable: {cur.reason}")
    if cur.saturated:
        return Delta(None, f"saturated at {cur.value}: the counter stopped counting")
    if prev is None or prev.value is None:
        return Delta(None, "no earlier reading")
    if not same_boot:
        return Delta(cur.value, "new boot: counted from 0", reset=True)
    if cur.value < prev.value:
        return Delta(cur.value, f"dropped from {prev.value}: counters were reset", reset=True)
    if prev.saturated and cur.value == prev.value:
        return Delta(None, f"saturated at {cur.value}")
    return Delta(cur.value - prev.value)


def delta(prev: Snapshot | None, cur: Snapshot) -> dict[str, dict[str, Delta]]:
    """Per port and counter: cur - prev. A drop is a reset (delta = cur), a different boot_id counts from 0,
    a saturated or unreadable counter's delta is None with why."""
    same_boot = prev is not None and prev.boot_id == cur.boot_id
    out: dict[str, dict[str, Delta]] = {}
    for key, row in cur.values.items():
        before = prev.values.get(key, {}) if prev is not None else {}
        out[key] = {
            name: counter_delta(before.get(name), c, same_boot or prev is None) for name, c in row.items()
        }
    return out
