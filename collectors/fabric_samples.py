"""IB / RoCE port readings -> samples: the one mapping the fabric collector, replay of saved trees and pasted
`ibstat` text share, so a port reads the same live and in replay.

A port's series carry `gpu=None` and `sub="port=<device>/<port>"`: state, phys_state, rate and width (the `4` of
`4X NDR`), link layer (1 InfiniBand, 2 Ethernet), and every counter of metrics.IB_COUNTER_METRICS that could be
read. A counter that could not be read (`N/A (no PMA)`, EINVAL, permission) or that is stuck at its width's
maximum (saturated: it stopped counting) is not a sample: it is unknown, never 0, and `unknown_counters` says
which and why. Counter resets are the rules' business (a drop is a reset, as Prometheus' increase() reads it).

`DevicePresence` turns successive readings into `ib_device_present{sub=device=<dev>}`: 1 for each device seen,
0 for a device seen earlier that is gone from this reading (a NIC that fell off the bus).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fleettool.formats.ib_sysfs import IbPort, IbSysfs
from fleettool.metrics import IB_COUNTER_METRICS
from fleettool.model import Sample

_WIDTH = re.compile(r"\((\d+)X\b")
LINK_LAYERS = {"infiniband": 1.0, "ethernet": 2.0}
ACTIVE = 4  # IB PortState ACTIVE (ib_port_state); 5 ACTIVE_DEFER also carries traffic


def port_sub(device: str, port: int) -> str:
    return f"port={device}/{port}"


def device_sub(device: str) -> str:
    return f"device={device}"


def parse_width(rate_text: str | None) -> int | None:
    """`400 Gb/sec (4X NDR)` -> 4; `100 Gb/sec (2X HDR)` -> 2; no `(NX` -> None."""
    if not rate_text:
        return None
    m = _WIDTH.search(rate_text)
    return int(m.group(1)) if m else None


def state_samples(port: IbPort, node: str, ts: float) -> list[Sample]:
    """The 1 s tier: state, phys_state, rate, width and link layer, each only where it was read."""
    sub = port_sub(port.device, port.port)
    width = parse_width(port.rate_text)
    layer = None if port.link_layer is None else LINK_LAYERS.get(port.link_layer.strip().lower(), 0.0)
    values = {
        "ib_port_state": port.state,
        "ib_port_phys_state": port.phys_state,
        "ib_port_rate_gbps": port.rate_gbps,
        "ib_port_width_lanes": width,
        "ib_port_link_layer": layer,
    }
    return [Sample(ts, node, None, None, m, float(v), sub) for m, v in values.items() if v is not None]


def counter_samples(port: IbPort, node: str, ts: float) -> list[Sample]:
    """The 10 s tier: each known counter that was read and is not saturated."""
    sub = port_sub(port.device, port.port)
    out: list[Sample] = []
    for d, counters in (("counters", port.counters), ("hw_counters", port.hw_counters)):
        for name, c in counters.items():
            metric = IB_COUNTER_METRICS.get(f"{d}/{name}")
            if metric is None or c.value is None or c.saturated:
                continue
            out.append(Sample(ts, node, None, None, metric, float(c.value), sub))
    return out


def unknown_counters(port: IbPort) -> dict[str, str]:
    """Known counters of this port that are no sample, and why: `counters/link_downed` -> `saturated at 255`."""
    out: dict[str, str] = {}
    for d, counters in (("counters", port.counters), ("hw_counters", port.hw_counters)):
        for name, c in counters.items():
            key = f"{d}/{name}"
            if key not in IB_COUNTER_METRICS:
                continue
            if c.value is None:
                out[key] = f"unreadable: {c.reason}"
            elif c.saturated:
                out[key] = f"saturated at {c.value} (the counter stopped counting)"
    return out


def reading_samples(reading: IbSysfs, node: str, ts: float, *, counters: bool = True) -> list[Sample]:
    """Every port's state samples, and its counter samples when `counters`."""
    out: list[Sample] = []
    for port in reading.ports:
        out.extend(state_samples(port, node, ts))
        if counters:
            out.extend(counter_samples(port, node, ts))
    return out


@dataclass
class DevicePresence:
    """Which RDMA devices this node has shown; a device seen once and missing now reads 0."""

    seen: set[str] = field(default_factory=set)

    def samples(self, reading: IbSysfs, node: str, ts: float) -> list[Sample]:
        now = {p.device for p in reading.ports}
        self.seen |= now
        return [
            Sample(ts, node, None, None, "ib_device_present", 1.0 if d in now else 0.0, device_sub(d))
            for d in sorted(self.seen)
        ]
