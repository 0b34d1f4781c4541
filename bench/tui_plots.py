"""Which plot widget the TUI's evidence view uses, by measuring: textual-plotext (PlotextPlot) against
textual-plot (PlotWidget), each in a fresh process, headless under Textual's Pilot at 160x48.

Per library: the import time of the widget's module; the time from app start to four line plots of 60 points
each painted (the evidence view's series: temperature, SM clock, power, clock-event reasons), as the Pilot sees
it; then the time of 20 redraws with new data (a refresh of the evidence) and the peak RSS of the process.

  pip install textual-plot   # the peer: not a fleettool dependency
  python bench/tui_plots.py --json bench/results/tui-plots.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import asyncio, json, math, resource, sys, time
lib = sys.argv[1]
t0 = time.perf_counter()
if lib == "plotext":
    from textual_plotext import PlotextPlot as W
else:
    from textual_plot import PlotWidget as W
imp = time.perf_counter() - t0
from textual.app import App
from textual.containers import Vertical

SERIES = [[60 + 25 * math.sin(i / 7 + k) for i in range(60)] for k in range(4)]

def draw(w, ys):
    if lib == "plotext":
        w.plt.clear_data()
        w.plt.plot(list(range(len(ys))), ys)
        w.refresh()
    else:
        w.clear()
        w.plot(list(range(len(ys))), ys)

class A(App):
    def compose(self):
        with Vertical():
            for _ in range(4):
                yield W()
    def on_mount(self):
        for w, ys in zip(self.query(W), SERIES):
            draw(w, ys)

async def main():
    app = A()
    t = time.perf_counter()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        first = time.perf_counter() - t
        t = time.perf_counter()
        for n in range(20):
            for w, ys in zip(app.query(W), SERIES):
                draw(w, [y + n for y in ys])
            await pilot.pause()
        redraw = (time.perf_counter() - t) / 20
    print(json.dumps({"lib": lib, "import_s": round(imp, 4), "first_paint_s": round(first, 4),
                      "redraw_s": round(redraw, 4),
                      "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))

asyncio.run(main())
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    out: dict[str, list[dict[str, float]]] = {}
    for _ in range(a.runs):  # interleaved, so load drifts hit both alike
        for lib in ("plotext", "plot"):
            r = subprocess.run(
                [sys.executable, "-c", CHILD, lib], capture_output=True, text=True, timeout=120
            )
            if r.returncode != 0:
                raise SystemExit(f"{lib}: {r.stderr[-800:]}")
            out.setdefault(lib, []).append(json.loads(r.stdout.strip().splitlines()[-1]))
    best = {lib: {k: min(x[k] for x in runs) for k in runs[0] if k != "lib"} for lib, runs in out.items()}
    print(json.dumps(best, indent=1))
    if a.json:
        a.json.write_text(json.dumps({"runs": out, "best": best}, indent=1))


if __name__ == "__main__":
    main()
