"""`fleettool tui`: alerts -> evidence -> runbook -> action, keyboard first.

All database work runs in thread workers that post past-tense messages (AlertsLoaded, DetailLoaded,
FleetLoaded); the UI thread only renders. The store is opened read-only for each load, so the agent keeps
writing; a fleet location is read through the same views. Layout lives in app.tcss.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Header, Input, Markdown, Sparkline, Static

SEV_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


class Source:
    """Where the screens read from: an agent's database (read-only per load) or a fleet location."""

    def __init__(self, db: Path | None = None, fleet: str | None = None) -> None:
        self.db = db
        self.fleet = fleet

    def open(self):  # type: ignore[no-untyped-def]
        if self.fleet:
            from fleettool.fleet.read import open_fleet

            return open_fleet(self.fleet)
        from fleettool.store import Store

        return Store(self.db or Path("fleettool.duckdb"), read_only=True, wait_s=2.0)

    def open_rw(self):  # type: ignore[no-untyped-def]
        from fleettool.store import Store

        return Store(self.db or Path("fleettool.duckdb"), read_only=False, wait_s=5.0)


class AlertsLoaded(Message):
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        super().__init__()
        self.rows = rows


class DetailLoaded(Message):
    def __init__(self, detail: dict[str, Any] | None) -> None:
        super().__init__()
        self.detail = detail


class FleetLoaded(Message):
    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        super().__init__()
        self.nodes = nodes


class ErrorScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,enter,q", "dismiss", "close")]

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def compose(self) -> ComposeResult:
        yield Static(f"[b]Error[/b]\n\n{self.message}\n\n(press Esc)", id="error")


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "close")]

    def compose(self) -> ComposeResult:
        yield Markdown(
            "# fleettool tui\n\n"
            "| key | |\n|---|---|\n"
            "| Enter | open the alert: evidence and runbook |\n"
            "| a | acknowledge the alert for 4 h |\n"
            "| s | silence the alert's node for 2 h |\n"
            "| r | resolve the alert by hand |\n"
            "| f | fleet grid: every node and GPU by worst alert (Enter: the node) |\n"
            "| n | the selected alert's node: GPUs, events, burn-ins, lifecycle (c/b/h move it) |\n"
            "| t | fleet statistics: availability, MTBF, incidents by category, interruptions |\n"
            "| / | filter by text (node, rule, category, severity); in the fleet grid also SKU and state; o sorts |\n"
            "| F5 | refresh now (also every 10 s) |\n"
            "| Esc | back |\n"
            "| q | quit |\n",
            id="help",
        )


class DetailScreen(Screen[None]):
    BINDINGS = [Binding("escape", "app.pop_screen", "back")]

    def __init__(self, alert_id: str) -> None:
        super().__init__()
        self.alert_id = alert_id

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal():
            with VerticalScroll(id="evidence"):
                yield Static("loading...", id="summary")
                yield VerticalScroll(id="sparks")
                yield Static("", id="events")
            yield Markdown("", id="runbook")
        yield Footer()

    def on_mount(self) -> None:
        self.load()

    @work(thread=True, exclusive=True)
    def load(self) -> None:
        from fleettool.views import alert_detail

        app: FleetTui = self.app  # type: ignore[assignment]
        with app.source.open() as store:
            d = alert_detail(store, self.alert_id)
        self.post_message(DetailLoaded(d))

    def on_detail_loaded(self, msg: DetailLoaded) -> None:
        d = msg.detail
        if d is None:
            self.query_one("#summary", Static).update("alert not found")
            return
        gpu = "-" if d["gpu"] is None else d["gpu"]
        style = SEV_STYLE.get(d["severity"], "")
        head = (
            f"[{style}]{d['severity'].upper()}[/] {d['category']}  {d['node']} gpu {gpu}\n"
            f"[b]{d['summary']}[/b]\naction: [b]{d['action']}[/b]   state: {d['state']}   "
            f"since {d['first_seen']}   last {d['last_seen']}\n"
        )
        findings = d["evidence"].get("findings", [])
        head += "\n".join(f"  - {f['rule']} ({f['severity']}): {f['summary']}" for f in findings)
        self.query_one("#summary", Static).update(head)
        sparks = self.query_one("#sparks", VerticalScroll)
        for metric, values in d["series"].items():
            if values:
                sparks.mount(Static(f"{metric}: {min(values):.4g} .. {max(values):.4g}"))
                sparks.mount(Sparkline(values, summary_function=max))
        lines = [f"{e['ts']} {e['kind']} {e['code'] or ''} {e['message'][:100]}" for e in d["events"][:30]]
        lines += [
            f"nccl {r['op']} {r['ranks']} ranks {r['nodes']}: peak {r['peak_busbw_gbps']} GB/s"
            for r in d["runs"]
        ]
        lines += [
            f"burn-in {b['test']} gpu {b['gpu']}: {b['verdict']} {b['figure']} {b['unit']}"
            for b in d["burnins"]
        ]
        self.query_one("#events", Static).update(
            "\n".join(lines) or "no events, runs or burn-ins in the window"
        )
        self.query_one("#runbook", Markdown).update(d["runbook_text"])


class NodeLoaded(Message):
    def __init__(self, view: dict[str, Any]) -> None:
        super().__init__()
        self.view = view


class NodeScreen(Screen[None]):
    """One node: GPUs with key gauges, events, burn-in history, lifecycle state and audit; c/b/h move it."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "back"),
        Binding("c", "move('cordoned')", "cordon"),
        Binding("b", "move('burn-in')", "burn-in"),
        Binding("h", "move('healthy')", "healthy"),
    ]

    def __init__(self, node: str) -> None:
        super().__init__()
        self.node = node

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="nodehead")
        yield DataTable(id="nodegpus", zebra_stripes=True)
        yield Static("", id="nodeevents")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#nodegpus", DataTable).add_columns(
            "gpu", "temp C", "power W", "SM MHz", "util %", "reasons", "alert"
        )
        self.load()

    @work(thread=True, exclusive=True)
    def load(self) -> None:
        from fleettool.views import node_view

        app: FleetTui = self.app  # type: ignore[assignment]
        with app.source.open() as store:
            v = node_view(store, self.node)
        self.post_message(NodeLoaded(v))

    def on_node_loaded(self, msg: NodeLoaded) -> None:
        v = msg.view
        self.query_one("#nodehead", Static).update(
            f"[b]{v['node']}[/b]  lifecycle: [b]{v['state']}[/b]"
            + (f" since {v['since']}" if v["since"] else "")
            + "   (c cordon, b burn-in, h healthy)"
        )
        t = self.query_one("#nodegpus", DataTable)
        t.clear()
        for g in v["gpus"]:

            def f(k: str, fmt: str = "{:.0f}", g: dict[str, Any] = g) -> str:
                return fmt.format(g[k]) if g.get(k) is not None else ""

            t.add_row(
                str(g["gpu"]),
                f("gpu_temp_c"),
                f("power_w"),
                f("sm_clock_mhz"),
                f("gpu_util_pct"),
                hex(int(g["clock_event_reasons"])) if g.get("clock_event_reasons") is not None else "",
                g.get("alert") or "",
            )
        lines = [
            f"{e['ts']} gpu {e['gpu']} {e['kind']} {e['code'] or ''} {e['message'][:90]}" for e in v["events"]
        ]
        lines += [
            f"burn-in {b['ts']} gpu {b['gpu']} {b['test']}: {b['verdict']} {b['figure']} {b['unit']}"
            for b in v["burnins"]
        ]
        lines += [
            f"audit {r['ts']} {r['from_state']} -> {r['to_state']} by {r['who']}: {r['reason']}"
            for r in v["audit"]
        ]
        self.query_one("#nodeevents", Static).update(
            "\n".join(lines) or "no events, burn-ins or lifecycle changes"
        )

    def action_move(self, to: str) -> None:
        app: FleetTui = self.app  # type: ignore[assignment]
        if app.source.fleet:
            self.notify("a fleet location is read-only", severity="warning")
            return
        self.move(to)

    @work(thread=True, exclusive=True, group="write")
    def move(self, to: str) -> None:
        from fleettool.lifecycle import TransitionError, transition

        app: FleetTui = self.app  # type: ignore[assignment]
        try:
            with app.source.open_rw() as store:
                transition(
                    store,
                    self.node,
                    to,
                    who=os.environ.get("USER") or "tui",
                    reason="from the TUI",
                    now=time.time(),
                    run=False,
                )
        except TransitionError as e:
            self.app.call_from_thread(self.notify, str(e), severity="error")
            return
        self.load()


class StatsLoaded(Message):
    def __init__(self, rep: dict[str, Any]) -> None:
        super().__init__()
        self.rep = rep


class StatsScreen(Screen[None]):
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

    @work(thread=True, exclusive=True)
    def load(self) -> None:
        from fleettool.stats import report

        app: FleetTui = self.app  # type: ignore[assignment]
        with app.source.open() as store:
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


class FleetScreen(Screen[None]):
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

    @work(thread=True, exclusive=True)
    def load(self) -> None:
        from fleettool.views import fleet_grid

        app: FleetTui = self.app  # type: ignore[assignment]
        with app.source.open() as store:
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


class FleetTui(App[None]):
    TITLE = "fleettool"
    CSS_PATH = "app.tcss"
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("question_mark", "help", "help"),
        Binding("f", "fleet", "fleet"),
        Binding("n", "node", "node"),
        Binding("t", "stats", "statistics"),
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

    @work(thread=True, exclusive=True, group="alerts")
    def load_alerts(self) -> None:
        from fleettool.views import alerts

        try:
            with self.source.open() as store:
                rows = alerts(store)
        except Exception as e:  # one handler turns worker errors into a modal
            self.call_from_thread(self.push_screen, ErrorScreen(str(e)))
            return
        self.post_message(AlertsLoaded(rows))

    def on_alerts_loaded(self, msg: AlertsLoaded) -> None:
        self.rows = msg.rows
        self.render_rows()

    def visible(self) -> list[dict[str, Any]]:
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
        for r in self.visible():
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
            f"{len(self.visible())} alerts ({sum(1 for r in self.rows if r['state'] == 'firing')} firing)  "
            f"source: {self.source.fleet or (self.source.db.name if self.source.db else '')}"
            + (f"  updated {time.strftime('%H:%M:%S')}" if self.clock else "")
        )

    def selected(self) -> dict[str, Any] | None:
        t = self.query_one("#alerts", DataTable)
        vis = self.visible()
        if not vis or t.cursor_row is None or t.cursor_row >= len(vis):
            return None
        return vis[t.cursor_row]

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "alerts" and event.row_key.value:
            self.push_screen(DetailScreen(str(event.row_key.value)))

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_fleet(self) -> None:
        self.push_screen(FleetScreen())

    def action_stats(self) -> None:
        self.push_screen(StatsScreen())

    def action_node(self) -> None:
        r = self.selected()
        if r is not None:
            self.push_screen(NodeScreen(r["node"]))

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

    @work(thread=True, exclusive=True, group="write")
    def act(self, what: str, r: dict[str, Any]) -> None:
        from fleettool.engine.silences import acknowledge, add_silence

        who = os.environ.get("USER") or "tui"
        now = time.time()
        try:
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
        except Exception as e:
            self.call_from_thread(self.push_screen, ErrorScreen(str(e)))
            return
        self.call_from_thread(self.notify, f"{what}: {r['node']} {r['rule']}")
        self.load_alerts()

    def action_ack(self) -> None:
        self._write("ack")

    def action_resolve(self) -> None:
        self._write("resolve")

    def action_silence(self) -> None:
        self._write("silence")
