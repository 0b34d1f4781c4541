"""The PCIe link of each RDMA device: `nic_pcie_width_lanes` and `nic_pcie_width_max_lanes` (sub=device=<dev>,
gpu None), read from the PCI function behind ROOT/class/infiniband/<dev>/device (the kernel's
current_link_width and max_link_width, e.g. `16`). A HCA that trained narrower than it can (x8 of x16: a riser,
a slot or a reseat) halves what its ports can move, while the IB link itself reads full rate; InfiniteHBD's
"NIC PCIe width low". Two small reads per device: the fabric collector's 10 s tier can afford them.

A width that cannot be read (no `device` link in a saved tree, EINVAL, `0` or garbage on a link that is down)
is no sample: unknown, never 0.
"""

from __future__ import annotations

from pathlib import Path

from fleettool.collectors.fabric_gids import read_text
from fleettool.collectors.fabric_samples import device_sub
from fleettool.model import Sample

FILES = (("nic_pcie_width_lanes", "current_link_width"), ("nic_pcie_width_max_lanes", "max_link_width"))


def read_width(path: Path) -> int | None:
    """A link width file (`16`, or `x16` on some kernels) -> lanes; None when unreadable or not a width."""
    text = read_text(str(path))
    if text is None:
        return None
    text = text.lower().removeprefix("x")
    return int(text) if text.isdigit() and 0 < int(text) <= 32 else None


def pcie_samples(root: str | Path, devices: list[str], node: str, ts: float) -> list[Sample]:
    """The PCIe width samples of the given RDMA devices (the physical functions the collector reads)."""
    base = Path(root) / "class" / "infiniband"
    out: list[Sample] = []
    for dev in devices:
        for metric, name in FILES:
            lanes = read_width(base / dev / "device" / name)
            if lanes is not None:
                out.append(Sample(ts, node, None, None, metric, float(lanes), device_sub(dev)))
    return out
