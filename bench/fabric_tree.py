"""A sysfs root with 8 ConnectX-7 ports as the fabric benches watch them, built from the real H100 tree.

fixtures/infiniband/sysfs-h100 (gpud's capture of an H100 node) has the state files of all 9 devices but the
counters of only two of them (mlx5_1 and the BlueField bond). A real CX-7 port has the same counter files on
every port, so each `mlx5_N` port without them gets a copy of mlx5_1's `counters/` and `hw_counters/` (the same
file names and values; link_downed=255 and excessive_buffer_overrun_errors=15, saturated, included), and each
device an IPoIB netdev with a `carrier_changes` file under `device/net/` as the kernel lays it out. The bond
(`mlx5_bond_0`, the management NIC) is left as it is: the benches exclude it with --fabric-exclude.
"""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "fixtures" / "infiniband" / "sysfs-h100"
CX7 = [f"mlx5_{i}" for i in (0, 1, 4, 5, 6, 7, 8, 9)]


def build(dst: Path) -> Path:
    """Write the tree under `dst` (a fresh directory) and return it, the --sysfs-root to give."""
    shutil.copytree(SOURCE, dst)
    ib = dst / "class" / "infiniband"
    full = ib / "mlx5_1" / "ports" / "1"
    for i, dev in enumerate(CX7):
        port = ib / dev / "ports" / "1"
        for sub in ("counters", "hw_counters"):
            if not (port / sub).exists():
                shutil.copytree(full / sub, port / sub)
        net = ib / dev / "device" / "net" / f"ibp{0x18 + i * 0x10:x}s0"
        net.mkdir(parents=True)
        (net / "carrier_changes").write_text("1\n")
        for f in ("current_link_width", "max_link_width"):
            (ib / dev / "device" / f).write_text("16\n")
    return dst


def roce_gid_table(root: Path, dev: str = "mlx5_bond_0", entries: int = 255) -> Path:
    """The RoCE port of `dev` with a GID table as mlx5 lays it out (gid_tbl_len 255: every entry listed under
    `gids/`, most all zeros): the link-local GID and one IPv4 address's, each as RoCE v1 and v2 (entries 0-3);
    the saved tree has no table."""
    port = root / "class" / "infiniband" / dev / "ports" / "1"
    (port / "gids").mkdir(exist_ok=True)
    (port / "gid_attrs" / "types").mkdir(parents=True, exist_ok=True)
    set_ = [
        ("fe80:0000:0000:0000:a288:c2ff:fe3b:5a10", "IB/RoCE v1"),
        ("fe80:0000:0000:0000:a288:c2ff:fe3b:5a10", "RoCE v2"),
        ("0000:0000:0000:0000:0000:ffff:0a00:0001", "IB/RoCE v1"),
        ("0000:0000:0000:0000:0000:ffff:0a00:0001", "RoCE v2"),
    ]
    for i in range(entries):
        gid, kind = set_[i] if i < len(set_) else ("0000:0000:0000:0000:0000:0000:0000:0000", None)
        (port / "gids" / str(i)).write_text(gid + "\n")
        if kind:
            (port / "gid_attrs" / "types" / str(i)).write_text(kind + "\n")
    return port


def state_file(root: Path, dev: str) -> Path:
    return root / "class" / "infiniband" / dev / "ports" / "1" / "state"
