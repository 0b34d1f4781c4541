#!/usr/bin/env python3
"""Kernel-log parsing speed: lines/s through KernelLogParser (pure parsing, no I/O), and through the replay
reader into DuckDB.

Two inputs built from real line shapes (fixtures/samples/kmsg and the scenarios' journal lines):
  mixed: a node's kernel log, 2% driver (NVRM) lines among mlx5/ext4/systemd lines, journal short-iso prefix
  xid:   every line an XID, cycling through all 61 sample forms (an XID storm: texts repeat)
  xid-unique: every line an XID whose text was never seen (the worst case: no repeat to exploit)

    python3 bench/bench_kmsg.py [--lines 1000000] [--json bench/results/kmsg.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fleettool.formats.kmsg import KernelLogParser  # noqa: E402

NOISE = [
    "mlx5_core 0000:ab:00.1: mlx5e_ethtool_set_link_ksettings:1099:(pid 4127): link up",
    "EXT4-fs (nvme0n1p2): re-mounted. Opts: (null). Quota mode: none.",
    "systemd-journald[812]: Data hash table of /var/log/journal/system.journal has a fill level at 75.0",
    "IPv6: ADDRCONF(NETDEV_CHANGE): ib0: link becomes ready",
    "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping further processing",
]


def build(n: int, xid_share: float) -> list[str]:
    rnd = random.Random(7)
    samples = [
        ln for ln in (ROOT / "fixtures/samples/kmsg/xid-lines.txt").read_text().splitlines() if ln.strip()
    ]
    bodies = [ln[ln.index("NVRM:") :] for ln in samples]
    out = []
    t0 = 1_796_000_000
    for i in range(n):
        ts = time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(t0 + i // 50))
        if xid_share > 1.0:  # every line an XID with a text never seen before (no repeat to exploit)
            ln = samples[i % len(samples)]
            out.append(f"{ln} seq={i}")
        elif xid_share >= 1.0:
            out.append(samples[i % len(samples)])
        elif rnd.random() < xid_share:
            out.append(f"{ts} gpu-17 kernel: {bodies[rnd.randrange(len(bodies))]}")
        else:
            out.append(f"{ts} gpu-17 kernel: {NOISE[rnd.randrange(len(NOISE))]}")
    return out


def run(lines: list[str]) -> tuple[float, int]:
    p = KernelLogParser(year=2026)
    t = time.perf_counter()
    n = sum(1 for _ in p.feed_all(lines))
    return time.perf_counter() - t, n


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    res: dict[str, object] = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "lines": a.lines,
    }
    for name, share in (("mixed", 0.02), ("xid", 1.0), ("xid-unique", 2.0)):
        lines = build(a.lines, share)
        best = min(run(lines)[0] for _ in range(3))
        recs = run(lines)[1]
        res[name] = {"lines_per_s": round(a.lines / best), "records": recs, "seconds": round(best, 3)}
        print(f"{name:6s} {a.lines / best:12,.0f} lines/s  ({recs} GPU records, best of 3: {best:.2f} s)")
    if a.json:
        a.json.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
