"""This boot, as the kernel log reader needs it: its id, its wall time fixed once, and where the store left off.

/dev/kmsg stamps each record with microseconds since boot on the kernel's printk clock (local_clock(): it
counts like CLOCK_MONOTONIC, and like it stops while the machine is suspended). A record's wall time is the
boot's wall time plus that stamp. The boot's wall time is taken ONCE per boot: CLOCK_REALTIME minus
CLOCK_MONOTONIC at the first start of the agent in that boot, then kept in the store (the ts of the boot's
`boot` event) and reused by every later start of the same boot (same /proc/sys/kernel/random/boot_id). So a
clock step after that (the first NTP sync, a manual date) moves no kernel record: records keep the spacing the
kernel gave them, and the same record has the same wall time after any restart. The cost: when the first start
ran before the clock was right, this boot's kernel times carry that error. /proc/stat's btime is not used for
this (the kernel recomputes it from the current wall clock, so it moves with every step); it is kept in the
boot event's detail for reference.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from fleettool.model import canonical_pci_bus_id

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
DEDUP_WINDOW_S = 10.0  # one XID from NVML and from the kernel log: reports this close are the same XID
STAT_PATH = "/proc/stat"


@dataclass
class KmsgResume:
    """Where the store left off in one boot's kernel log (fleettool.store.kmsg_cursor.resume_point).

    last_seq: the highest /dev/kmsg sequence number of this boot the store holds (None: none).
    boot_time: this boot's wall time as fixed at its first start (the ts of its `boot` event; None: no boot
    event yet, so none was recorded). other_xids: XIDs of this boot the store got from another source (NVML's
    event API) as (code, GPU key, uptime): a kernel line of the same XID in the backlog is the same XID."""

    boot_id: str
    last_seq: int | None = None
    boot_time: float | None = None
    other_xids: list[tuple[int, str, float]] = field(default_factory=list)


def read_boot_id(path: str = BOOT_ID_PATH) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            text = f.read(128).strip()
    except OSError:
        return None
    return text or None


def read_btime(path: str = STAT_PATH) -> float | None:
    """/proc/stat's btime (whole seconds, recomputed from the current wall clock by the kernel), or None."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def monotonic_now() -> float:
    """The clock /dev/kmsg's stamps count on (seconds since boot)."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def boot_wall_time(realtime: float | None = None, monotonic: float | None = None) -> float:
    """The boot's wall time by the wall clock now: CLOCK_REALTIME - CLOCK_MONOTONIC."""
    rt = time.time() if realtime is None else realtime
    mono = monotonic_now() if monotonic is None else monotonic
    return rt - mono


def xid_gpu_key(pci_bus_id: str | None, gpu: int | None) -> str | None:
    """An XID's GPU as the de-duplication keys it: the PCI id (in one form: the kernel's line and the store's
    row of one XID key alike), else the index."""
    if pci_bus_id:
        return canonical_pci_bus_id(pci_bus_id)
    return None if gpu is None else f"index={gpu}"
