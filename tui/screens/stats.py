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
        yield DataTable(id="statcats", zebra_stripes=True)
        yield DataTable(id="statdown", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#statnodes", DataTable).add_columns(
            "node", "availability", "interruptions", "down", "MTBF"
        )
        self.query_one("#statcats", DataTable).add_columns("category", "pages")
        self.query_one("#statdown", DataTable).add_columns("node", "down from (UTC)", "for")
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
        mtbf = "-" if f.get("mtbf_s") is None else f"{f['mtbf_s'] / 3600:.1f} h"
        self.query_one("#stats", Static).update(
            f"[b]fleet[/b]: {f.get('nodes', 0)} nodes, availability {f.get('availability', 1):.4%}, "
            f"{f.get('interruptions', 0)} interruptions, MTBF {mtbf}"
            if rep.get("window") is not None
            else "nothing in the store to report on yet"
        )
        cats = self.query_one("#statcats", DataTable)
        cats.clear()
        for cat, n in sorted((f.get("incidents_by_category") or {}).items(), key=lambda kv: (-kv[1], kv[0])):
            cats.add_row(cat, str(n))
        down = self.query_one("#statdown", DataTable)
        down.clear()
        for x in sorted(tl, key=lambda x: -x["from"])[:15]:
            a = time.strftime("%Y-%m-%d %H:%M", time.gmtime(x["from"]))
            down.add_row(x["node"], a, f"{(x['to'] - x['from']) / 60:.0f} min")
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
