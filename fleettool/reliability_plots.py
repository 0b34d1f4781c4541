"""The reliability report's charts: in the terminal with plotext (faults per week, repair times, repeat
offenders), and as a self-contained HTML page with the same charts as inline SVG (no script, no network)."""

from __future__ import annotations

import html
import re
from typing import Any

from fleettool.units import days, percent

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _label(b: dict[str, Any]) -> str:
    lo, hi = b["from_days"], b["to_days"]
    return f"{lo:g}-{hi:g}d" if hi is not None else f">{lo:g}d"


def _short(name: str) -> str:
    """A server name for a chart's axis: a UUID by its first group (unique enough among ten), else whole."""
    return name.split("-")[0] if len(name) == 36 and name.count("-") == 4 else name[:24]


def charts(rep: dict[str, Any]) -> list[tuple[str, list[str], list[float]]]:
    """(title, labels, values) of each chart."""
    weeks = rep.get("faults_per_week") or []
    top = rep["repeat_offenders"]["top"]
    return [
        ("faults per week", [str(i + 1) for i in range(len(weeks))], [float(v) for v in weeks]),
        (
            "repair time (days down per fault)",
            [_label(b) for b in rep.get("repair_hist") or []],
            [float(b["count"]) for b in rep.get("repair_hist") or []],
        ),
        (
            "days between one server's faults",
            [_label(b) for b in rep.get("mtbi_hist") or []],
            [float(b["count"]) for b in rep.get("mtbi_hist") or []],
        ),
        (
            "repeat offenders (faults per server, top 10)",
            [_short(str(t["server"])) for t in top],
            [float(t["faults"]) for t in top],
        ),
    ]


def terminal(rep: dict[str, Any], width: int = 100, color: bool = False) -> str:
    """The charts as text (plotext); plain characters unless `color`."""
    import plotext as plt

    out = []
    for title, labels, values in charts(rep):
        if not values:
            continue
        plt.clear_figure()
        plt.theme("clear")
        if title.startswith("faults per week"):
            plt.bar(list(range(1, len(values) + 1)), values, width=1 / 2)
            plt.xlabel("week")
        else:  # plotext draws the first bar at the bottom: reversed, the chart reads top-down as the HTML does
            named = [f"{lab} ({v:g})" for lab, v in zip(labels, values, strict=True)]
            plt.bar(named[::-1], values[::-1], orientation="horizontal", width=1 / 2)
        plt.title(title)
        plt.plotsize(width, max(8, min(20, len(values) + 4)) if not title.startswith("faults") else 14)
        text = plt.build()
        out.append(text if color else ANSI.sub("", text))
    return "\n".join(out)


def _svg_bars(labels: list[str], values: list[float], width: int = 720) -> str:
    if not values:
        return "<p>no data</p>"
    top = max(values) or 1.0
    if len(values) > 15:  # many bars (weeks): vertical
        h, bw = 180, width / len(values)
        bars = "".join(
            f'<rect x="{i * bw:.1f}" y="{h - v / top * h:.1f}" width="{max(bw - 1, 1):.1f}" '
            f'height="{v / top * h:.1f}"><title>{html.escape(lab)}: {v:g}</title></rect>'
            for i, (lab, v) in enumerate(zip(labels, values, strict=True))
        )
        return f'<svg width="{width}" height="{h + 2}" role="img">{bars}</svg>'
    row, pad = 22, 130
    bars = "".join(
        f'<text x="0" y="{i * row + 15}">{html.escape(lab)}</text>'
        f'<rect x="{pad}" y="{i * row + 3}" width="{v / top * (width - pad - 60):.1f}" height="{row - 6}"/>'
        f'<text x="{pad + v / top * (width - pad - 60) + 4:.1f}" y="{i * row + 15}">{v:g}</text>'
        for i, (lab, v) in enumerate(zip(labels, values, strict=True))
    )
    return f'<svg width="{width}" height="{len(values) * row}" role="img">{bars}</svg>'


def page(rep: dict[str, Any], title: str) -> str:
    """A self-contained HTML page: the figures, the class counts and the charts."""
    ro, rd = rep["repeat_offenders"], rep["repair_days"]
    facts = [
        ("faults", rep["faults"]),
        ("servers (affected)", f"{rep['servers']} ({rep['servers_affected']})"),
        ("span", days(rep["span_days"])),
        ("MTBF (server time per fault)", days(rep["mtbf_days"])),
        ("availability", percent(rep["availability"])),
        (
            "repair time (median / mean / p90)",
            f"{days(rd['median'])} / {days(rd['mean'])} / {days(rd['p90'])}",
        ),
        (
            "top 10 % of affected servers hold",
            f"{ro['top_10pct_share']:.1%} of faults" if ro["top_10pct_share"] is not None else "-",
        ),
        ("servers with 5+ faults", ro["servers_5plus"]),
    ]
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in facts)
    classes = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{v}</td></tr>" for k, v in (rep.get("by_class") or {}).items()
    )
    figs = "".join(f"<h2>{html.escape(t)}</h2>{_svg_bars(lab, val)}" for t, lab, val in charts(rep))
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>body{{font:14px sans-serif;margin:2em}}"
        "th{text-align:left;padding-right:1em}rect{fill:#3b7dd8}svg text{font:12px sans-serif}</style></head>"
        f"<body><h1>{html.escape(title)}</h1><table>{rows}</table><h2>faults by class</h2>"
        f"<table>{classes}</table>{figs}</body></html>\n"
    )
