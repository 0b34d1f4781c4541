#!/usr/bin/env python3
"""What issue 29's kernel-log work costs: (1) parsing a plain `dmesg` log now that every `[`-line is also
tried as a relative stamp (dmesg -H / delta), beside the same parse with that check switched off (the bare
baseline, same run); (2) storing a file's kernel events with the duplicate check (ingest.dedup.drop_stored)
beside storing them without it, into a store that already holds the same events from another file.

    python3 bench/bench_kmsg_relative.py [--lines 500000] [--events 20000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fleettool.formats.kmsg import MAX_LINE, KernelLogParser, KernelRecord  # noqa: E402
from fleettool.ingest.dedup import drop_stored  # noqa: E402
from fleettool.model import Event  # noqa: E402
from fleettool.store import Store  # noqa: E402

NOISE = [
    "mlx5_core 0000:ab:00.1: mlx5e_ethtool_set_link_ksettings:1099:(pid 4127): link up",
    "EXT4-fs (nvme0n1p2): re-mounted. Opts: (null). Quota mode: none.",
    "IPv6: ADDRCONF(NETDEV_CHANGE): ib0: link becomes ready",
]
XID = "NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def dmesg_lines(n: int) -> list[str]:
    rnd = random.Random(7)
    out = []
    for i in range(n):
        body = XID if rnd.random() < 0.02 else NOISE[rnd.randrange(len(NOISE))]
        out.append(f"[{1000 + i * 0.01:12.6f}] {body}")
    return out


class BareParser(KernelLogParser):
    """feed() as it was before issue 29 (no relative stamps): the baseline."""

    def feed(self, line: str) -> KernelRecord | None:
        self.lineno += 1
        if "NVRM" not in line and "SXid" not in line and "Linux version" not in line:
            return None
        line = line.rstrip("\r\n")
        if len(line) > MAX_LINE:
            line = line[:MAX_LINE]
        return self._line(line, None)


def parse(lines: list[str], relative: bool) -> float:
    best = float("inf")
    for _ in range(3):
        p = KernelLogParser(year=2026) if relative else BareParser(year=2026)
        t0 = time.perf_counter()
        for _rec in p.feed_all(lines):
            pass
        best = min(best, time.perf_counter() - t0)
    return len(lines) / best


def events(n: int, source: str) -> list[Event]:
    t0 = 1_796_000_000.0
    return [
        Event(
            t0 + i,
            "gpu-7",
            "xid",
            f"x {i}",
            code=79,
            raw=f"Dec  2 11:38:47 gpu-7 kernel: {XID} {i}",
            source=source,
        )
        for i in range(n)
    ]


def store_time(n: int, dedup: bool) -> float:
    best = float("inf")
    for _ in range(3):
        with Store(":memory:") as st:
            st.write_events(events(n, "kern.log"))
            evs = events(n, "journal.txt")
            t0 = time.perf_counter()
            if dedup:
                evs, _ = drop_stored(st, evs)
            st.write_events(evs)
            best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=500_000)
    ap.add_argument("--events", type=int, default=20_000)
    a = ap.parse_args()
    lines = dmesg_lines(a.lines)
    bare, new = parse(lines, False), parse(lines, True)
    print(
        f"parse plain dmesg, {a.lines} lines: bare {bare:,.0f} lines/s, with the relative check {new:,.0f} lines/s, "
        f"ratio {new / bare:.2f}"
    )
    b, d = store_time(a.events, False), store_time(a.events, True)
    print(
        f"store {a.events} kernel events already stored from another file: bare (stored twice) {b * 1e3:.0f} ms, "
        f"with the duplicate check (stored once) {d * 1e3:.0f} ms, ratio {d / b:.2f}"
    )


if __name__ == "__main__":
    main()
