"""A RoCE port's GID table: `ib_port_roce_v2_gids` (sub=port=<dev>/<n>, gpu None), the entries of
ROOT/class/infiniband/<dev>/ports/<n>/gids/<i> that are set (not all zeros) and whose gid_attrs/types/<i> reads
`RoCE v2`, link-local ones (fe80::/10) left out: the routable GIDs (IPv4-mapped, or global IPv6) that RoCE
across subnets and NCCL's default GID choice use. The kernel fills the table from the IP addresses of the port's netdev (an IPv4-mapped GID per
address, one entry per RoCE type); an address lost at runtime (DHCP, a bond failover, NetworkManager) empties
the entries NCCL_IB_GID_INDEX points at, and RoCE traffic stops while the port reads ACTIVE: InfiniteHBD's
"RNIC GID error". InfiniBand ports are skipped (their GIDs come from the subnet prefix, not from addresses).

Cost: one read per table entry (255 a port on mlx5; an empty entry's type is not read, it fails with EINVAL),
each one open/read/close: about 1 ms a port (bench/README.md's fabric section), in the fabric collector's 10 s
tier. A table that cannot be listed is no sample (unknown, never 0).
"""

from __future__ import annotations

import os
from pathlib import Path

from fleettool.collectors.fabric_samples import port_sub
from fleettool.formats.ib_sysfs import IbPort
from fleettool.model import Sample

ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def read_text(path: str) -> str | None:
    """A small sysfs file's stripped text, None when it cannot be read: one open/read/close (a pathlib
    read_text costs 3x as much, and a RoCE port's table is read 255 files at a time)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 256).decode("utf-8", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)


def roce_v2_gids(port_dir: Path) -> int | None:
    """The set RoCE v2 entries of a port's GID table; None when the table cannot be read."""
    try:
        entries = [(e.name, e.path) for e in os.scandir(port_dir / "gids")]
    except OSError:
        return None
    types = f"{port_dir}/gid_attrs/types"
    n = 0
    for name, path in entries:
        gid = read_text(path)
        if not gid or gid == ZERO_GID or gid.lower().startswith("fe8"):
            continue
        kind = read_text(f"{types}/{name}")
        n += kind is not None and kind.lower() == "roce v2"
    return n


def gid_samples(root: str | Path, ports: list[IbPort], node: str, ts: float) -> list[Sample]:
    """The GID table sample of each RoCE (Ethernet link layer) port read."""
    base = Path(root) / "class" / "infiniband"
    out: list[Sample] = []
    for p in ports:
        if (p.link_layer or "").strip().lower() != "ethernet":
            continue
        n = roce_v2_gids(base / p.device / "ports" / str(p.port))
        if n is not None:
            out.append(
                Sample(ts, node, None, None, "ib_port_roce_v2_gids", float(n), port_sub(p.device, p.port))
            )
    return out
