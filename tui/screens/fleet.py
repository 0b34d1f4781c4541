"""The fleet grid (f): every node and GPU by worst alert; / filters, o sorts, Enter opens the node."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header, Input

from fleettool.tui.messages import FleetLoaded
from fleettool.tui.screens.base import DataScreen
from fleettool.tui.screens.node import NodeScreen
from fleettool.tui.tables import fill, move_to_key
from fleettool.tui.text import plain

GRID_COLUMNS = ("node", "model", "state", "worst", "categories", "GPUs (. ok, W warning, C critical)")
MARK = {
    "critical": plain("C", "bold red"),
    "warning": plain("W", "yellow"),
    "info": plain("i", "cyan"),
    None: plain("."),
}


def _marks(gpus: dict[int | None, str | None]) -> Text:
    """One mark per GPU, in index order (a node-level entry first), space-separated."""
    return plain(" ").join(MARK[gpus[g]] for g in sorted(gpus, key=lambda g: -1 if g is None else g))


class FleetScreen(DataScreen):
    BINDINGS = [
        Binding("escape", "app.pop_screen", "back"),
        Binding("slash", "filter", "filter"),
        Binding("o", "sort", "sort: worst / name"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.nodes: list[dict[str, Any]] = []
        self.filter_text = ""
        self.by_name = False

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(placeholder="filter: node, SKU, severity, category, state", id="gridfilter")
        yield DataTable(id="grid", zebra_stripes=True, cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        t = self.query_one("#grid", DataTable)
        fill(t, GRID_COLUMNS, [])
        self.query_one("#gridfilter", Input).display = False
        t.focus()  # keys go to the grid until / opens the filter
        self.load()

    def action_filter(self) -> None:
        box = self.query_one("#gridfilter", Input)
        box.display = True
        box.focus()

    def action_sort(self) -> None:
        self.by_name = not self.by_name
        self.render_grid()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.filter_text = event.value.strip().lower()
        event.input.display = bool(self.filter_text)
        self.render_grid()
        self.query_one("#grid", DataTable).focus()

    @work(thread=True, exclusive=True, exit_on_error=False, description="loading the fleet grid")
    def load(self) -> None:
        from fleettool.views import fleet_grid

        with self.source.open() as store:
            nodes = fleet_grid(store)
        self.post_message(FleetLoaded(nodes))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value:
            self.app.push_screen(NodeScreen(str(event.row_key.value)))

    def on_fleet_loaded(self, msg: FleetLoaded) -> None:
        self.nodes = msg.nodes
        self.render_grid()

    def render_grid(self) -> None:
        """The grid, filtered and sorted; the cursor stays on the node it was on (by name)."""
        t = self.query_one("#grid", DataTable)
        keys = [str(k.value) for k in t.rows]
        row = t.cursor_row
        keep = keys[row] if 0 <= row < len(keys) else None
        rows = self.nodes
        if self.filter_text:
            f = self.filter_text
            rows = [
                n
                for n in rows
                if f
                in " ".join(
                    [n["node"], n["model"] or "", n["worst"] or "ok", n["state"], *n["categories"]]
                ).lower()
            ]
        if self.by_name:
            rows = sorted(rows, key=lambda n: n["node"])
        cells = [
            (
                n["node"],
                n["model"] or "",
                n["state"],
                n["worst"] or "ok",
                ",".join(n["categories"]),
                _marks(n["gpus"]),
            )
            for n in rows
        ]
        names = [n["node"] for n in rows]
        fill(t, GRID_COLUMNS, cells, names)
        move_to_key(t, names, keep, row)
