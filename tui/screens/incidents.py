"""The first screen: incidents, root first (fleettool.store.incidents' triage order). Enter opens one incident's
members grouped by node (IncidentScreen); l (or Esc) shows the alert list beneath, with its actions.

A store with no incidents (an older store, or one no fold has run on) says so here, and the alerts stay one key
away. The age is since the incident's first alert: by the wall clock, or, with the app's clock off
(reproducible screenshots of a replay), since the newest incident's last alert.
"""

from __future__ import annotations

import time
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header, Static

from fleettool.tui.messages import IncidentsLoaded
from fleettool.tui.screens.base import DataScreen
from fleettool.tui.screens.incident import IncidentScreen, root_cell
from fleettool.tui.tables import FitTable, fill, move_to_key
from fleettool.tui.text import plain
from fleettool.tui.theme import SEV_STYLE
from fleettool.units import human_duration

INCIDENT_COLUMNS = (
    "state",
    "severity",
    "page",
    "scope",
    "key",
    "root",
    "nodes",
    "GPUs",
    "alerts",
    "age",
    "summary",
)
# what a narrow terminal loses first: at 80 x 24 the list keeps severity, page, scope, root, alerts and 30+
# characters of summary
INCIDENT_DROP = ("key", "state", "GPUs", "nodes", "age")
NO_INCIDENTS = (
    "No incidents in this store: it predates incidents, or no fold has run on its alerts yet. "
    "Press l for the alert list"
)
NO_INCIDENTS_FLEET = (
    "No incidents at this fleet location: no alerts in its segments to fold. Press l for the alert list"
)


def incident_cells(r: dict[str, Any], now: float) -> tuple[str, ...]:
    """One incident's row, plain text (the severity is styled when added)."""
    return (
        r["state"],
        r["severity"],
        "PAGE" if r["page"] else "-",
        r["scope"],
        r["key"] or "-",
        root_cell(r),
        str(r["nodes"]),
        str(r["gpus"]),
        str(r["alerts"]),
        human_duration(max(0.0, now - r["first_seen"])) if r.get("first_seen") is not None else "-",
        r["summary"] or "",
    )


class IncidentsScreen(DataScreen):
    """Incidents, root first; Enter: the members by node; l: the alert list."""

    shows_alerts = False  # the alert list's keys (a, s, r, /, n) are off here: FleetTui.check_action
    BINDINGS = [
        Binding("l", "alerts", "alerts"),
        Binding("escape", "alerts", "alerts", show=False),
        Binding("f5", "refresh", "refresh"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, Any]] = []
        self.alert_count: int | None = None
        self.selected_id: str | None = None

    def compose(self) -> ComposeResult:
        yield Header(show_clock=bool(getattr(self.app, "clock", True)))
        yield Static("", id="noincidents")
        yield FitTable(id="incidents", cursor_type="row", zebra_stripes=True)
        yield Static("", id="incstatus")
        yield Footer()

    def on_mount(self) -> None:
        t = self.query_one("#incidents", DataTable)
        fill(t, INCIDENT_COLUMNS, [])
        self.query_one("#noincidents", Static).display = False
        t.focus()
        self.load()
        self.set_interval(float(getattr(self.app, "refresh_s", 10.0)), self.load)

    @work(thread=True, exclusive=True, exit_on_error=False, description="loading the incidents")
    def load(self) -> None:
        from fleettool.store.incidents import list_incidents

        with self.source.open() as store:
            rows = list_incidents(store)
            alerts = int(store.scalar("SELECT count(*) FROM alerts") or 0)
        self.post_message(IncidentsLoaded(rows, alerts))

    def on_incidents_loaded(self, msg: IncidentsLoaded) -> None:
        self.rows, self.alert_count = msg.rows, msg.alerts
        self.render_rows()

    def now(self) -> float:
        if getattr(self.app, "clock", True) or not self.rows:
            return time.time()
        return max(r["last_seen"] or r["first_seen"] or 0.0 for r in self.rows)

    def render_rows(self) -> None:
        t = self.query_one("#incidents", DataTable)
        keep_id, keep_row = self.selected_id, t.cursor_row
        now = self.now()
        rows = []
        for r in self.rows:
            c = incident_cells(r, now)
            rows.append((c[0], plain(c[1], SEV_STYLE.get(r["severity"], "")), *c[2:]))
        ids = [r["incident_id"] for r in self.rows]
        width = (t.size.width or self.app.size.width) - t.styles.scrollbar_size_vertical
        fill(t, INCIDENT_COLUMNS, rows, ids, width=width, drop=INCIDENT_DROP)
        move_to_key(t, ids, keep_id, keep_row or 0)
        self.selected_id = ids[t.cursor_row] if ids else None
        empty = self.query_one("#noincidents", Static)
        empty.display = not self.rows
        n_alerts = "" if self.alert_count is None else f" ({self.alert_count} alerts)"
        what = NO_INCIDENTS_FLEET if self.source.fleet else NO_INCIDENTS
        empty.update(plain(what + n_alerts + "."))
        self.query_one("#incstatus", Static).update(plain(self.status_line()))

    def status_line(self) -> str:
        n = len(self.rows)
        open_ = sum(1 for r in self.rows if r["state"] != "resolved")
        paged = sum(1 for r in self.rows if r["page"])
        alerts = "" if self.alert_count is None else f", {self.alert_count} alerts (l)"
        return f"{n} incident{'' if n == 1 else 's'}, {open_} open, {paged} paged{alerts}"

    def on_fit_table_resized(self) -> None:
        if self.rows:
            self.render_rows()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key is not None and event.row_key.value:
            self.selected_id = str(event.row_key.value)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value:
            self.app.push_screen(IncidentScreen(str(event.row_key.value)))

    def action_alerts(self) -> None:
        """The whole alert list (the app's own screen, beneath this one)."""
        show = getattr(self.app, "show_alerts", None)
        if show is not None:
            show(None)
        else:
            self.app.pop_screen()

    def action_refresh(self) -> None:
        self.load()
