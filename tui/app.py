"""`fleettool tui`: alerts -> evidence -> runbook -> action, keyboard first.

FleetTui is the alert list and its actions (acknowledge, silence, resolve, filter); the other screens live in
fleettool.tui.screens, and their keys come from its SCREENS registry. All database work runs in thread workers
that post past-tense messages (fleettool.tui.messages); the UI thread only renders, and a worker that raises
is shown by the one handler in fleettool.tui.errors. The store is opened read-only for each load, so the agent
keeps writing; a fleet location is read through the same views. Layout lives in app.tcss.
"""

from __future__ import annotations

import os
import time
from typing import Any

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header, Input, Static

from fleettool.tui.errors import ShowsWorkerErrors
from fleettool.tui.messages import AlertsLoaded
from fleettool.tui.screens import SCREENS, DetailScreen, HelpScreen
from fleettool.tui.source import Source
from fleettool.tui.theme import SEV_STYLE

# the help's rows for the alert list's own keys; the screens' rows come from SCREENS, in between
HELP_BEFORE_SCREENS = [
    ("Enter", "open the alert: evidence and runbook"),
    ("a", "acknowledge the alert for 4 h"),
    ("s", "silence the alert's node for 2 h"),
    ("r", "resolve the alert by hand"),
]
HELP_AFTER_SCREENS = [
    ("/", "filter by text (node, rule, category, severity); in the fleet grid also SKU and state; o sorts"),
    ("F5", "refresh now (also every 10 s)"),
    ("Esc", "back"),
    ("q", "quit"),
]


class FleetTui(ShowsWorkerErrors, App[None]):
    TITLE = "fleettool"
    CSS_PATH = "app.tcss"
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("question_mark", "help", "help"),
        *(Binding(nav.key, f"open_screen('{name}')", nav.label) for name, nav in SCREENS.items()),
        Binding("a", "ack", "ack"),
        Binding("s", "silence", "silence node"),
        Binding("r", "resolve", "resolve"),
        Binding("slash", "filter", "filter"),
        Binding("f5", "refresh", "refresh"),
    ]

    def __init__(self, source: Source, refresh_s: float = 10.0, clock: bool = True) -> None:
        super().__init__()
        self.source = source
        self.refresh_s = refresh_s
        self.clock = clock  # False for reproducible screenshots
        self.rows: list[dict[str, Any]] = []
        self.filter_text = ""

    def compose(self) -> ComposeResult:
        yield Header(show_clock=self.clock)
        yield Input(placeholder="filter: node, rule, category, severity", id="filter")
        yield DataTable(id="alerts", cursor_type="row", zebra_stripes=True)
        yield Static("", id="status")
        yield Footer()

    def on_mount(self) -> None:
        t = self.query_one("#alerts", DataTable)
        t.add_columns("severity", "category", "node", "gpu", "action", "state", "note", "summary")
        self.query_one("#filter", Input).display = False
        self.load_alerts()
        self.set_interval(self.refresh_s, self.load_alerts)
        t.focus()

    @work(thread=True, exclusive=True, exit_on_error=False, group="alerts", description="loading the alerts")
    def load_alerts(self) -> None:
        from fleettool.views import alerts

        with self.source.open() as store:
            rows = alerts(store)
        self.post_message(AlertsLoaded(rows))

    def on_alerts_loaded(self, msg: AlertsLoaded) -> None:
        self.rows = msg.rows
        self.render_rows()

    def visible_rows(self) -> list[dict[str, Any]]:
        f = self.filter_text.lower()
        if not f:
            return self.rows
        return [
            r
            for r in self.rows
            if f
            in " ".join(
                str(r.get(k, "")) for k in ("node", "rule", "category", "severity", "summary")
            ).lower()
        ]

    def render_rows(self) -> None:
        t = self.query_one("#alerts", DataTable)
        t.clear()
        for r in self.visible_rows():
            note = ("silenced " if r["silenced"] else "") + (
                f"ack:{r['ack_by']}" if r["acknowledged"] else ""
            )
            sev = f"[{SEV_STYLE.get(r['severity'], '')}]{r['severity']}[/]"
            t.add_row(
                sev,
                r["category"],
                r["node"],
                "-" if r["gpu"] is None else str(r["gpu"]),
                r["action"],
                r["state"],
                note,
                r["summary"][:120],
                key=r["alert_id"],
            )
        self.query_one("#status", Static).update(
            f"{len(self.visible_rows())} alerts ({sum(1 for r in self.rows if r['state'] == 'firing')} firing)  "
            f"source: {self.source.fleet or (self.source.db.name if self.source.db else '')}"
            + (f"  updated {time.strftime('%H:%M:%S')}" if self.clock else "")
        )

    def selected(self) -> dict[str, Any] | None:
        t = self.query_one("#alerts", DataTable)
        vis = self.visible_rows()
        if not vis or t.cursor_row is None or t.cursor_row >= len(vis):
            return None
        return vis[t.cursor_row]

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "alerts" and event.row_key.value:
            self.push_screen(DetailScreen(str(event.row_key.value)))

    def action_help(self) -> None:
        rows = [(nav.key, nav.help) for nav in SCREENS.values()]
        self.push_screen(HelpScreen([*HELP_BEFORE_SCREENS, *rows, *HELP_AFTER_SCREENS]))

    def action_open_screen(self, name: str) -> None:
        """A SCREENS key: push its screen, built from the selected alert's field when it names one."""
        nav = SCREENS[name]
        if nav.of_alert is None:
            self.push_screen(nav.screen())
            return
        r = self.selected()
        if r is not None:
            self.push_screen(nav.screen(r[nav.of_alert]))

    def action_refresh(self) -> None:
        self.load_alerts()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = True
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.filter_text = event.value.strip()
        event.input.display = bool(self.filter_text)
        self.render_rows()
        self.query_one("#alerts", DataTable).focus()

    def _write(self, what: str) -> None:
        r = self.selected()
        if r is None:
            return
        if self.source.fleet:
            self.notify("a fleet location is read-only: act on the node's own database", severity="warning")
            return
        self.act(what, r)

    @work(thread=True, exclusive=True, exit_on_error=False, group="write", description="acting on the alert")
    def act(self, what: str, r: dict[str, Any]) -> None:
        from fleettool.engine.silences import acknowledge, add_silence

        who = os.environ.get("USER") or "tui"
        now = time.time()
        with self.source.open_rw() as store:
            if what == "ack":
                acknowledge(
                    store, r["alert_id"], now=now, until=now + 4 * 3600, who=who, reason="from the TUI"
                )
            elif what == "resolve":
                acknowledge(
                    store,
                    r["alert_id"],
                    now=now,
                    until=now + 3650 * 86400,
                    who=who,
                    reason="resolved in the TUI",
                    kind="resolve",
                )
            else:
                add_silence(
                    store, now=now, until=now + 2 * 3600, who=who, reason="from the TUI", node=r["node"]
                )
        self.call_from_thread(self.notify, f"{what}: {r['node']} {r['rule']}")
        self.load_alerts()

    def action_ack(self) -> None:
        self._write("ack")

    def action_resolve(self) -> None:
        self._write("resolve")

    def action_silence(self) -> None:
        self._write("silence")
