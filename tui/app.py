"""`fleettool tui`: incidents -> alerts -> evidence -> runbook -> action, keyboard first.

FleetTui is the alert list and its actions (acknowledge, silence, resolve, filter); it opens with the incidents
(root first) on top of it, l there shows the list, i here the incidents again. The other screens live in
fleettool.tui.screens, and their keys come from its SCREENS registry. All database work runs in thread workers
that post past-tense messages (fleettool.tui.messages); the UI thread only renders, and a worker that raises
is shown by the one handler in fleettool.tui.errors. The store is opened read-only for each load, so the agent
keeps writing; a fleet location is read through the same views. Layout lives in app.tcss.
"""

from __future__ import annotations

import time
from typing import Any

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header, Input, Static

from fleettool.model import who_acts
from fleettool.tui.errors import ShowsWorkerErrors
from fleettool.tui.messages import AlertsLoaded
from fleettool.tui.screens import SCREENS, ConfirmScreen, DetailScreen, HelpScreen
from fleettool.tui.source import Source
from fleettool.tui.tables import FitTable, fill, move_to_key
from fleettool.tui.text import plain
from fleettool.tui.theme import SEV_STYLE

# the help's rows for the alert list's own keys; the screens' rows come from SCREENS, in between
HELP_BEFORE_SCREENS = [
    ("Enter", "open the alert: evidence and runbook"),
    ("a", "acknowledge the alert for 4 h (asks first)"),
    ("s", "silence the alert's node for 2 h (asks first)"),
    ("r", "resolve the alert by hand (asks first)"),
]
ALERT_COLUMNS = ("severity", "category", "node", "gpu", "action", "state", "note", "summary")
# what a narrow terminal loses first, as k9s drops its wide columns: the summary keeps 30 characters at 80 x 24
ALERT_DROP = ("note", "category", "action", "state")
# what each action does, for the confirmation and the notice after it
ACTIONS = {
    "ack": ("Acknowledge", 4 * 3600.0),
    "resolve": ("Resolve by hand", None),
    "silence": ("Silence every alert of node", 2 * 3600.0),
}
HELP_AFTER_SCREENS = [
    ("/", "filter by text (node, rule, category, severity); in the fleet grid also SKU and state; o sorts"),
    ("F5", "refresh now (also every 10 s)"),
    ("Esc", "back (in the alert list: every alert again)"),
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
        Binding("escape", "show_all", "all alerts", show=False),
    ]

    def __init__(
        self, source: Source, refresh_s: float = 10.0, clock: bool = True, first: str = "incidents"
    ) -> None:
        super().__init__()
        self.source = source
        self.refresh_s = refresh_s
        self.clock = clock  # False for reproducible screenshots
        self.first = first  # "incidents": the incidents screen opens on top of the alert list; "alerts": not
        self.rows: list[dict[str, Any]] = []
        self.filter_text = ""
        # l on an incident: the list shows only its alerts (ids), named by `only_label`; Esc shows them all
        self.only_ids: frozenset[str] | None = None
        self.only_label = ""
        # the alert the cursor is on, by id: a refresh, a filter or a return from another screen puts the
        # cursor back on it (or, when it is gone, on the row where it was), never on row 0 by default
        self.selected_id: str | None = None

    def compose(self) -> ComposeResult:
        yield Header(show_clock=self.clock)
        yield Input(placeholder="filter: node, rule, category, severity", id="filter")
        yield FitTable(id="alerts", cursor_type="row", zebra_stripes=True)
        yield Static("", id="status")
        yield Footer()

    def on_mount(self) -> None:
        t = self.query_one("#alerts", DataTable)
        fill(t, ALERT_COLUMNS, [])
        self.query_one("#filter", Input).display = False
        self.load_alerts()
        self.set_interval(self.refresh_s, self.load_alerts)
        t.focus()
        if self.first == "incidents":
            self.push_screen(SCREENS["incidents"].screen())

    @work(thread=True, exclusive=True, exit_on_error=False, group="alerts", description="loading the alerts")
    def load_alerts(self) -> None:
        from fleettool.store.incidents import incident_of_alerts
        from fleettool.views import alerts

        with self.source.open() as store:
            rows = alerts(store)
            of = incident_of_alerts(store)
        for r in rows:  # as `alerts --json` names them
            r["incident"], r["incident_role"] = of.get(r["alert_id"], (None, None))
        self.post_message(AlertsLoaded(rows))

    def on_alerts_loaded(self, msg: AlertsLoaded) -> None:
        self.rows = msg.rows
        self.render_rows()

    def visible_rows(self) -> list[dict[str, Any]]:
        f = self.filter_text.lower()
        rows = (
            self.rows if self.only_ids is None else [r for r in self.rows if r["alert_id"] in self.only_ids]
        )
        if not f:
            return rows
        return [
            r
            for r in rows
            if f
            in " ".join(
                str(r.get(k, "")) for k in ("node", "rule", "category", "severity", "summary")
            ).lower()
        ]

    def _cells(self, r: dict[str, Any]) -> tuple[str, ...]:
        """One alert's row, plain text (the severity is styled when added)."""
        note = ("silenced " if r["silenced"] else "") + (f"ack:{r['ack_by']}" if r["acknowledged"] else "")
        gpu = "-" if r["gpu"] is None else str(r["gpu"])
        return (
            r["severity"],
            r["category"],
            r["node"],
            gpu,
            r["action"],
            r["state"],
            note,
            # a symptom counted under its incident's root is marked, as in the `alerts` table
            ("↳ " if r.get("incident_role") == "member" else "") + r["summary"],
        )

    def render_rows(self) -> None:
        t = self.query_one("#alerts", DataTable)
        keep_id, keep_row = self.selected_id, t.cursor_row
        vis = self.visible_rows()
        rows = []
        for r in vis:
            c = self._cells(r)
            rows.append((plain(c[0], SEV_STYLE.get(r["severity"], "")), *c[1:]))  # fill shows str as text
        ids = [r["alert_id"] for r in vis]
        fill(t, ALERT_COLUMNS, rows, ids, width=self.table_width(t), drop=ALERT_DROP)
        move_to_key(t, ids, keep_id, keep_row or 0)  # gone (resolved away, filtered out): where it was
        self.selected_id = ids[t.cursor_row] if ids else None
        self.query_one("#status", Static).update(plain(self.status_line(vis)))

    def table_width(self, t: DataTable[Any]) -> int:
        """The cells the alert list may take: its width (the screen's before it is laid out) less the scrollbar."""
        return (t.size.width or self.size.width) - t.styles.scrollbar_size_vertical

    def on_fit_table_resized(self) -> None:
        if self.rows:
            self.render_rows()  # the columns fit the new width

    def status_line(self, vis: list[dict[str, Any]]) -> str:
        """How many alerts the list shows, of how many, and how many of those shown are firing."""
        firing = sum(1 for r in vis if r["state"] == "firing")
        n = len(vis)
        shown = f"{n} alert{'' if n == 1 else 's'}"
        if self.only_ids is not None:
            shown += f" of {self.only_label} (Esc: all {len(self.rows)})"
        if self.filter_text:
            shown += f" of {len(self.rows)} match {self.filter_text!r}"
        src = self.source.fleet or (self.source.db.name if self.source.db else "")
        return f"{shown}, {firing} firing   source: {src}" + (
            f"  updated {time.strftime('%H:%M:%S')}" if self.clock else ""
        )

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "alerts" and event.row_key is not None and event.row_key.value:
            self.selected_id = str(event.row_key.value)

    def selected(self) -> dict[str, Any] | None:
        """The alert the cursor is on now, found by its id (not by its position in a list that may have moved).
        Read from the table's cursor itself: keys typed in a burst ("Down Down a") move the cursor before the
        RowHighlighted messages of those moves reach the app, so selected_id alone would still name the old row."""
        t = self.query_one("#alerts", DataTable)
        if t.row_count:
            key = t.coordinate_to_cell_key(t.cursor_coordinate).row_key
            if key.value:
                self.selected_id = str(key.value)
        if self.selected_id is None:
            return None
        return next((r for r in self.rows if r["alert_id"] == self.selected_id), None)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "alerts" and event.row_key.value:
            self.push_screen(DetailScreen(str(event.row_key.value)))

    def action_help(self) -> None:
        rows = [(nav.key, nav.help) for nav in SCREENS.values()]
        self.push_screen(HelpScreen([*HELP_BEFORE_SCREENS, *rows, *HELP_AFTER_SCREENS]))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """On a screen that shows no alert (the incidents, one incident: `shows_alerts = False`), the list's keys
        that act on the selected alert, filter it or open a screen of it are off, and so is `i` itself: a key
        must never act on an alert the screen does not show."""
        if getattr(self.screen, "shows_alerts", True):
            return True
        if action in ("ack", "silence", "resolve", "filter"):
            return False
        if action == "open_screen" and parameters:
            nav = SCREENS.get(str(parameters[0]))
            return nav is not None and nav.of_alert is None and parameters[0] != "incidents"
        return True

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

    def show_alerts(self, ids: set[str] | None, label: str = "") -> None:
        """Back to the alert list (every screen above it closed): only the alerts `ids` (named `label` in the
        status line), or, with None, every alert."""
        while len(self.screen_stack) > 1:
            self.pop_screen()
        self.only_ids = None if ids is None else frozenset(ids)
        self.only_label = label
        self.render_rows()
        self.query_one("#alerts", DataTable).focus()

    def action_show_all(self) -> None:
        """Esc in the alert list: drop the incident restriction and the text filter."""
        if self.only_ids is None and not self.filter_text:
            return
        self.filter_text = ""
        self.query_one("#filter", Input).display = False
        self.show_alerts(None)

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
            self.notify(
                "a fleet location is read-only: act on the node's own database",
                severity="warning",
                markup=False,
            )
            return
        verb, for_s = ACTIONS[what]
        gpu = "" if r["gpu"] is None else f" GPU {r['gpu']}"
        target = r["node"] if what == "silence" else f"{r['rule']} on {r['node']}{gpu}"
        how_long = "" if for_s is None else f" for {for_s / 3600:g} h"
        question = f"{verb} {target}{how_long}?\n{r['severity']} {r['state']}: {r['summary'][:100]}"
        alert = dict(r)  # as shown now: the answer acts on this alert, whatever a refresh does meanwhile

        def answered(yes: bool | None) -> None:
            if yes:
                self.act(what, alert)

        self.push_screen(ConfirmScreen(question), answered)

    @work(thread=True, exclusive=True, exit_on_error=False, group="write", description="acting on the alert")
    def act(self, what: str, r: dict[str, Any]) -> None:
        from fleettool.engine.silences import acknowledge, add_silence

        who = who_acts()
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
        gpu = "" if r["gpu"] is None else f" GPU {r['gpu']}"
        self.call_from_thread(
            self.notify,
            f"{ACTIONS[what][0]}: {r['rule']} on {r['node']}{gpu} (alert {r['alert_id']})",
            markup=False,  # the rule and node are data
        )
        self.load_alerts()

    def action_ack(self) -> None:
        self._write("ack")

    def action_resolve(self) -> None:
        self._write("resolve")

    def action_silence(self) -> None:
        self._write("silence")
