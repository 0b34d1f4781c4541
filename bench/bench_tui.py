#!/usr/bin/env python3
"""The TUI on a synthetic fleet of 10,000 GPUs (1,250 nodes) and its alerts, headless (Textual's Pilot):
time to first paint with data, a keypress to redraw on the alert list, and opening the fleet grid.

    python3 bench/bench_tui.py [--gpus 10000] [--alerts 400] [--json bench/results/tui.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fleettool.store import Store  # noqa: E402


def build(db: Path, gpus: int, alerts: int) -> None:
    rnd = random.Random(3)
    with Store(db) as st:
        st.con.execute(
            f"INSERT INTO gpus SELECT 'node-' || lpad((i // 8)::VARCHAR, 5, '0'), (i % 8)::SMALLINT, "
            f"'GPU-' || i, NULL, 'NVIDIA H100 80GB HBM3', '550.54.15', NULL, now()::TIMESTAMP, "
            f"now()::TIMESTAMP FROM range({gpus}) r(i)"
        )
        cats = [
            ("thermal", "GpuThermalSlowdown", "inspect-hardware"),
            ("ecc", "GpuDoubleBitError", "reset-gpu"),
            ("xid", "GpuXid", "check-workload"),
            ("pcie", "PcieLinkWidthDegraded", "inspect-hardware"),
        ]
        for k in range(alerts):
            i = rnd.randrange(gpus)
            cat, rule, act = rnd.choice(cats)
            sev = rnd.choice(["critical", "warning", "warning", "info"])
            st.con.execute(
                "INSERT INTO alerts VALUES (?, ?, ?, ?, ?, ?, NULL, ?, ?, now()::TIMESTAMP - INTERVAL 1 HOUR, "
                "now()::TIMESTAMP, ?, ?, '{}')",
                [
                    f"a{k:05d}",
                    rule,
                    cat,
                    sev,
                    f"node-{i // 8:05d}",
                    i % 8,
                    act,
                    rnd.choice(["firing", "resolved"]),
                    f"{rule} on node-{i // 8:05d} gpu {i % 8}",
                    "runbooks/gpu-xid.md",
                ],
            )


async def measure(db: Path, alerts: int) -> dict[str, float]:
    from textual.widgets import DataTable

    from fleettool.tui.app import FleetTui
    from fleettool.tui.screens import FleetScreen
    from fleettool.tui.source import Source

    app = FleetTui(Source(db=db), refresh_s=600, first="alerts")
    t0 = time.perf_counter()
    async with app.run_test(size=(180, 50)) as pilot:
        table = app.query_one("#alerts", DataTable)
        while table.row_count < alerts:
            await pilot.pause(0.005)
        first_paint = time.perf_counter() - t0
        lat, idle = [], []
        for _ in range(60):
            t = time.perf_counter()
            await pilot.press("down")
            await pilot.pause()
            lat.append(time.perf_counter() - t)
            t = time.perf_counter()
            await pilot.press("x")  # bound to nothing: the Pilot's own cost of a keypress and a repaint wait
            await pilot.pause()
            idle.append(time.perf_counter() - t)
        t = time.perf_counter()
        await pilot.press("f")
        while not isinstance(app.screen, FleetScreen):
            await pilot.pause(0.005)
        grid = app.screen.query_one("#grid", DataTable)
        while grid.row_count == 0:
            await pilot.pause(0.005)
        fleet_s = time.perf_counter() - t
        nodes = grid.row_count
    base = statistics.median(idle)
    return {
        "first_paint_s": round(first_paint, 3),
        "keypress_p50_ms": round(statistics.median(lat) * 1000, 1),
        "pilot_noop_key_p50_ms": round(base * 1000, 1),
        "keypress_minus_noop_p50_ms": round((statistics.median(lat) - base) * 1000, 1),
        "keypress_max_ms": round(max(lat) * 1000, 1),
        "fleet_grid_s": round(fleet_s, 3),
        "fleet_rows": nodes,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=10_000)
    ap.add_argument("--alerts", type=int, default=400)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "tui.duckdb"
        build(db, a.gpus, a.alerts)
        res = {"gpus": a.gpus, "alerts": a.alerts, **asyncio.run(measure(db, a.alerts))}
    print(json.dumps(res, indent=1))
    if a.json:
        a.json.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
