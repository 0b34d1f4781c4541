"""Fleet statistics (t): availability, MTBF, incidents by category, the interruption timeline."""

from __future__ import annotations

import time

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header, Static

from fleettool.tui.messages import StatsLoaded
from fleettool.tui.screens.base import DataScreen


class StatsScreen(DataScreen):
    """Fleet statistics: availability, MTBF, incidents by category, the interruption timeline."""

    BINDINGS = [Binding("escape", "app.pop_screen", "back")]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("loading...", id="stats")
        yield DataTable(id="statnodes", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#statnodes", DataTable).add_columns(
            "node", "availability", "interruptions", "down", "MTBF"
        )
        self.load()

    @work(thread=True, exclusive=True, exit_on_error=False, description="loading the fleet statistics")
    def load(self) -> None:
        from fleettool.stats import report

        with self.source.open() as store:
            rep = report(store)
        self.post_message(StatsLoaded(rep))

    def on_stats_loaded(self, msg: StatsLoaded) -> None:
        rep = msg.rep
        f = rep.get("fleet") or {}
        tl = rep.get("timeline") or []
        lines = [
            f"[b]fleet[/b]: {f.get('nodes', 0)} nodes, availability {f.get('availability', 1):.4%}, "
            f"{f.get('interruptions', 0)} interruptions, MTBF {f.get('mtbf_s') or '-'} s",
            f"incidents by category: {f.get('incidents_by_category') or {}}",
            "interruptions (newest first):",
        ]
        for x in sorted(tl, key=lambda x: -x["from"])[:15]:
            a = time.strftime("%Y-%m-%d %H:%M", time.gmtime(x["from"]))
            lines.append(f"  {x['node']:16s} {a}Z  {(x['to'] - x['from']) / 60:.0f} min")
        self.query_one("#stats", Static).update("\n".join(lines))
        t = self.query_one("#statnodes", DataTable)
        t.clear()
        for n in sorted(rep.get("nodes", []), key=lambda n: n["availability"]):
            t.add_row(
                n["node"],
                f"{n['availability']:.4%}",
                str(n["interruptions"]),
                f"{n['down_s'] / 60:.0f} min",
                "-" if n["mtbf_s"] is None else f"{n['mtbf_s'] / 3600:.1f} h",
            )
