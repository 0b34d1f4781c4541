#!/usr/bin/env python3
"""Peak memory of `fleettool replay` over a 2-day XID storm on one rack (issue 28, item 7), with the rules on
beside the same replay with the event rules off, measured in the same run.

The recording: one kernel log per node (journalctl -o short-iso, as the scenarios' kernel-*.log.gz), a rack of
`--nodes` nodes x 8 GPUs; each GPU announces itself (`NVRM: GPU at PCI:...: GPU-<uuid>`) and then logs XID 45
lines (the driver's line shape, `Ch 000000xx` as in fixtures/samples/kmsg/xid-lines.txt's XID 43) in storms: a
few hours of one line every ~2 min (random gaps), then a quiet few hours, over 2 days, `--lines` in all.

Each replay is its own process (`fleettool replay DIR --db NEW -q`); its peak RSS is the kernel's account of that
child (`os.wait4`'s ru_maxrss), its wall from spawn to exit. "rules on": the built-in rule set; "event rules off":
a copy of the built-in rules directory without the `kind: event` rules (`--rules DIR`). The alerts of the rules-on
replay are counted from the store, so a run that judged nothing shows.

    python bench/xid_storm_memory.py [--lines 170000 --nodes 16] [--json bench/results/xid-storm-memory.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

PCI = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]  # an HGX board's eight GPU bus numbers
T0 = dt.datetime(2026, 11, 30, tzinfo=dt.timezone.utc)
DAYS = 2


def gpu_lines(rng: random.Random, per_gpu: int) -> list[float]:
    """Seconds from T0 of one GPU's XID lines: storms of one line every ~2 min (exponential gaps, mean set so the
    lines fill the storms), 3-5 h long, quiet 2-4 h between."""
    storms: list[tuple[float, float]] = []
    t = rng.uniform(0, 3600)
    while t < DAYS * 86400:
        length = rng.uniform(3, 5) * 3600
        storms.append((t, min(t + length, DAYS * 86400)))
        t += length + rng.uniform(2, 4) * 3600
    total = sum(b - a for a, b in storms)
    out: list[float] = []
    for a, b in storms:
        n = round(per_gpu * (b - a) / total)
        out.extend(sorted(rng.uniform(a, b) for _ in range(n)))
    return out


def write_recording(out: Path, lines: int, nodes: int, seed: int = 28) -> int:
    rng = random.Random(seed)
    per_gpu = lines // (nodes * 8)
    n = 0
    for k in range(nodes):
        node = f"rack7-{k:02d}"
        rows: list[tuple[float, str]] = []
        for i, bus in enumerate(PCI):
            uuid = f"GPU-{k:08x}-{i:04x}-4000-8000-{rng.getrandbits(48):012x}"
            rows.append((i * 0.01, f"NVRM: GPU at PCI:0000:{bus}:00: {uuid}"))
            for s in gpu_lines(rng, per_gpu):
                pid = rng.randrange(1000, 4_000_000)
                rows.append(
                    (60 + s, f"NVRM: Xid (PCI:0000:{bus}:00): 45, pid={pid}, name=python3, Ch {0x10 + i:08x}")
                )
        rows.sort()
        n += sum(1 for _, m in rows if "Xid" in m)
        with gzip.open(out / f"kernel-{node}.log.gz", "wt", compresslevel=1) as f:
            for s, msg in rows:
                ts = (T0 + dt.timedelta(seconds=s)).strftime("%Y-%m-%dT%H:%M:%S+0000")
                f.write(f"{ts} {node} kernel: {msg}\n")
    return n


def rules_without_events(src: Path, out: Path) -> int:
    """A copy of the rules directory without its event rules; how many were left out."""
    out.mkdir()
    dropped = 0
    for f in sorted(src.glob("*.yaml")):
        doc = yaml.safe_load(f.read_text())
        for g in doc.get("groups", []):
            keep = [r for r in g["rules"] if r.get("kind") != "event"]
            dropped += len(g["rules"]) - len(keep)
            g["rules"] = keep
        doc["groups"] = [g for g in doc.get("groups", []) if g["rules"]]
        if doc["groups"]:
            (out / f.name).write_text(yaml.safe_dump(doc, sort_keys=False))
    return dropped


def replay(rec: Path, db: Path, rules: Path | None) -> dict[str, float]:
    cmd = [sys.executable, "-m", "fleettool", "replay", str(rec), "--db", str(db), "-q"]
    if rules is not None:
        cmd += ["--rules", str(rules), "--no-builtin-rules"]  # the built-in set less its event rules
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    err = p.stderr.read().decode() if p.stderr else ""
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        raise SystemExit(f"replay exited {rc}: {err.strip()[-400:]}")
    return {"peak_rss_mib": round(ru.ru_maxrss / 1024, 1), "wall_s": round(wall, 2)}


def count(db: Path, sql: str) -> int:
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        got = con.execute(sql).fetchone()
        return int(got[0]) if got else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=170_000)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--runs", type=int, default=1, help="replays of each case; the lowest peak is kept")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    from importlib import resources

    builtin = Path(str(resources.files("fleettool.rules")))  # the built-in rule set (package data)
    with tempfile.TemporaryDirectory() as tmp:
        rec, norules = Path(tmp) / "storm", Path(tmp) / "rules-no-events"
        rec.mkdir()
        t = time.perf_counter()
        xids = write_recording(rec, a.lines, a.nodes)
        gen_s = time.perf_counter() - t
        dropped = rules_without_events(builtin, norules)
        out: dict[str, object] = {
            "xid_lines": xids,
            "nodes": a.nodes,
            "gpus": a.nodes * 8,
            "generate_s": gen_s,
        }
        for name, rules in (("event rules off", norules), ("rules on", None)):
            best: dict[str, float] | None = None
            counts: dict[str, float] = {}
            for i in range(a.runs):
                db = Path(tmp) / f"{name.replace(' ', '-')}-{i}.duckdb"
                got = replay(rec, db, rules)
                if best is None or got["peak_rss_mib"] < best["peak_rss_mib"]:
                    best = got
                if i == 0:
                    counts["events"] = count(db, "SELECT count(*) FROM events WHERE kind = 'xid'")
                    counts["alerts"] = count(db, "SELECT count(*) FROM alerts WHERE rule = 'GpuXid'")
                db.unlink()
            assert best is not None
            best.update(counts)
            out[name] = best
            print(f"{name:16} {best}", flush=True)
        out["event_rules_dropped"] = dropped
        on, off = out["rules on"], out["event rules off"]
        assert isinstance(on, dict) and isinstance(off, dict)
        out["ratio_on_off"] = round(on["peak_rss_mib"] / off["peak_rss_mib"], 2)
        print(
            f"{xids} XID lines on {a.nodes * 8} GPUs; peak RSS rules on / event rules off = {out['ratio_on_off']}"
        )
        if a.json:
            a.json.write_text(json.dumps(out, indent=1) + "\n")
        shutil.rmtree(rec)


if __name__ == "__main__":
    main()
