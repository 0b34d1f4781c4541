"""Fleet statistics (t): availability, MTBF, incidents by category, the interruption timeline."""

from __future__ import annotations

import time

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header, Static

from fleettool.tui.messages import StatsLoaded
from fleettool.tui.screens.base import DataScreen
from fleettool.tui.tables import fill
from fleettool.tui.text import assemble
from fleettool.units import human_duration, percent

HEADERS = {
    "statnodes": ("node", "availability", "interruptions", "down", "MTBF"),
    "statcats": ("category", "pages"),
    "statdown": ("node", "down from (UTC)", "for"),
}


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
        for tid, headers in HEADERS.items():
            fill(self.query_one(f"#{tid}", DataTable), headers, [])
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
        mtbf = human_duration(f.get("mtbf_s"))  # the same units as `fleettool report`
        self.query_one("#stats", Static).update(
            assemble(
                ("fleet", "b"),
                f": {f.get('nodes', 0)} nodes, availability {percent(f.get('availability', 1))}, "
                f"{f.get('interruptions', 0)} interruptions, MTBF {mtbf}",
            )
            if rep.get("window") is not None
            else "nothing in the store to report on yet"
        )
        cats = sorted((f.get("incidents_by_category") or {}).items(), key=lambda kv: (-kv[1], kv[0]))
        fill(self.query_one("#statcats", DataTable), HEADERS["statcats"], [(c, str(n)) for c, n in cats])
        down = [
            (
                x["node"],
                time.strftime("%Y-%m-%d %H:%M", time.gmtime(x["from"])),
                human_duration(x["to"] - x["from"]),
            )
            for x in sorted(tl, key=lambda x: -x["from"])[:15]
        ]
        fill(self.query_one("#statdown", DataTable), HEADERS["statdown"], down)
        nodes = [
            (
                n["node"],
                percent(n["availability"]),
                str(n["interruptions"]),
                human_duration(n["down_s"]),
                human_duration(n["mtbf_s"]),
            )
            for n in sorted(rep.get("nodes", []), key=lambda n: (n["availability"], n["node"]))
        ]
        fill(self.query_one("#statnodes", DataTable), HEADERS["statnodes"], nodes)
