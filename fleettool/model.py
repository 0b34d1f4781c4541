"""Records and vocabularies shared by every layer (no I/O here).

A Sample is (ts, node, gpu, uuid, metric, value); an Event is one line of evidence (an XID line, an NVML
error, an agent health change). docs/records.md describes every record and vocabulary field by field.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timezone


class Category(str, enum.Enum):
    XID = "xid"
    ECC = "ecc"
    ROW_REMAP = "row-remap"
    THERMAL = "thermal"
    POWER = "power"
    NVLINK = "nvlink"
    PCIE = "pcie"
    STRAGGLER = "straggler"
    GPU_LOST = "gpu-lost"
    NCCL = "nccl"
    NIC = "nic"  # InfiniBand / RoCE ports, cables and NICs
    BURNIN = "burnin"
    AGENT = "agent"


class Severity(str, enum.Enum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return ["info", "warning", "critical"].index(self.value)


class Action(str, enum.Enum):
    NONE = "none"
    CHECK_WORKLOAD = "check-workload"
    RESET_GPU = "reset-gpu"
    REBOOT_NODE = "reboot-node"
    INSPECT_HARDWARE = "inspect-hardware"

    @property
    def rank(self) -> int:
        return ["none", "check-workload", "reset-gpu", "reboot-node", "inspect-hardware"].index(self.value)


class EventKind(str, enum.Enum):
    XID = "xid"
    SXID = "sxid"
    FELL_OFF_BUS = "fell-off-bus"
    GSP_TIMEOUT = "gsp-timeout"
    GPU_ANNOUNCE = "gpu-announce"
    NVML_ERROR = "nvml-error"
    NVML_EVENT = "nvml-event"
    NIC = "nic"  # a NIC driver (mlx5) kernel line
    AGENT = "agent"


@dataclass(frozen=True, slots=True)
class Sample:
    ts: float  # unix seconds, UTC
    node: str
    gpu: int | None
    uuid: str | None
    metric: str
    value: float
    sub: str = ""  # a sub-entity of the GPU: "link=3", "mig=1/0", "collector=nvml"


@dataclass(frozen=True, slots=True)
class Event:
    ts: float | None
    node: str
    kind: str
    message: str
    gpu: int | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    code: int | None = None
    raw: str = ""
    source: str = ""
    detail: dict[str, object] = field(default_factory=dict)  # parsed fields: pid, process, link, MIG ids


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One GPU as its node announced it (NVML, dcgm-exporter labels, or the driver's kernel lines)."""

    node: str
    gpu: int | None
    uuid: str | None
    pci_bus_id: str | None = None
    model: str | None = None
    driver: str | None = None
    serial: str | None = None


def rfc3339(ts: float | None) -> str | None:
    """Unix seconds -> RFC 3339 in UTC with a Z suffix (millisecond precision when fractional)."""
    if ts is None:
        return None
    dt = datetime.fromtimestamp(ts, tz=timezone.utc)
    if dt.microsecond:
        return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return dt.isoformat(timespec="seconds").replace("+00:00", "Z")


def _pci_parts(s: str) -> tuple[str, str, str] | None:
    """A PCI id without its `PCI:` prefix split into domain, bus and device(.function) (domain 0 when it has
    none); None when it is not three such parts."""
    if s[:4].lower() == "pci:":
        s = s[4:]
    parts = s.split(":")
    if len(parts) == 2:  # bb:dd(.f) without domain
        parts = ["0", *parts]
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 else None


def normalize_pci_bus_id(raw: str) -> str:
    """Any PCI id spelling -> dddd:bb:dd (lower case): '00000000:1A:00.0', '0000:1a:00', 'PCI:0000:1a:00'.

    The kernel's XID lines name a GPU by domain:bus:device without the function, NVML and dcgm-exporter by an
    8-digit domain with the function; the canonical key drops the function and pads the domain to 4 digits.
    """
    s = raw.strip().lower()
    parts = _pci_parts(s)
    if parts is None:
        return s.removeprefix("pci:")
    dom, bus, dev = parts
    dev = dev.split(".")[0]
    try:
        return f"{int(dom, 16) & 0xFFFF:04x}:{int(bus, 16):02x}:{int(dev, 16):02x}"
    except ValueError:
        return s


def canonical_pci_bus_id(raw: str | None) -> str | None:
    """A PCI id in any spelling -> as nvidia-smi and NVML print it, `00000000:48:00.0` (8-digit domain, upper
    case, the function; function 0, the GPU itself, when the input has none): '0000:48:00', '0000:48:00.0',
    '00000000:48:00.0', 'PCI:0000:48:00', '48:00.0', any case. The one form of every output (events, gpus,
    alerts, /metrics, exports); None for None or blank; a string that is no PCI id comes back stripped."""
    if raw is None or not raw.strip():
        return None
    s = raw.strip()
    parts = _pci_parts(s)
    if parts is None:
        return s[4:] if s[:4].lower() == "pci:" else s
    dom, bus, devfn = parts
    dev, _, fn = devfn.partition(".")
    try:
        d, b, v, f = int(dom, 16), int(bus, 16), int(dev, 16), int(fn or "0", 16)
    except ValueError:
        return s
    if d > 0xFFFFFFFF or b > 0xFF or v > 0x1F or f > 7:
        return s
    return f"{d:08X}:{b:02X}:{v:02X}.{f}"


@dataclass(frozen=True, slots=True)
class PodUse:
    """A pod seen using a GPU (dcgm-exporter's attribution labels), at ts."""

    ts: float
    node: str
    gpu: int | None
    uuid: str | None
    namespace: str
    pod: str
    container: str


def who_acts() -> str:
    """Who a write is recorded as when --by is not given: the login name (getpass: $LOGNAME, $USER, ..., then
    the password database, so a container or `kubectl exec` without $USER still names its uid's user)."""
    import getpass

    try:
        return getpass.getuser() or "unknown"
    except (KeyError, OSError):  # a uid with no passwd entry and no variable set
        return "unknown"
