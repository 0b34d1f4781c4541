"""The fleet grid (f): every node and GPU by worst alert; / filters, o sorts, Enter opens the node."""

from __future__ import annotations

from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header, Input

from fleettool.tui.messages import FleetLoaded
from fleettool.tui.screens.base import DataScreen
from fleettool.tui.screens.node import NodeScreen


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
        t.add_columns("node", "model", "state", "worst", "categories", "GPUs (. ok, W warning, C critical)")
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
        t = self.query_one("#grid", DataTable)
        t.clear()
        mark = {"critical": "[bold red]C[/]", "warning": "[yellow]W[/]", "info": "[cyan]i[/]", None: "."}
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
        for n in rows:
            cells = " ".join(
                mark[n["gpus"][g]] for g in sorted(n["gpus"], key=lambda x: -1 if x is None else x)
            )
            t.add_row(
                n["node"],
                n["model"] or "",
                n["state"],
                n["worst"] or "ok",
                ",".join(n["categories"]),
                cells,
                key=n["node"],
            )
