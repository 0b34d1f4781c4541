"""One node (n in the alert list, Enter in the fleet grid): GPUs with key gauges, events, burn-in history,
lifecycle state and audit; c/b/h move it through the lifecycle."""

from __future__ import annotations

import time
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header, Static

from fleettool.model import who_acts
from fleettool.tui.messages import NodeLoaded
from fleettool.tui.screens.base import DataScreen
from fleettool.tui.tables import fill
from fleettool.tui.text import assemble, plain

GPU_COLUMNS = ("gpu", "temp C", "power W", "SM MHz", "util %", "reasons", "alert", "readings")


class NodeScreen(DataScreen):
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
        fill(self.query_one("#nodegpus", DataTable), GPU_COLUMNS, [])
        self.load()

    @work(thread=True, exclusive=True, exit_on_error=False, description="loading the node")
    def load(self) -> None:
        from fleettool.views import node_view

        with self.source.open() as store:
            v = node_view(store, self.node)
        self.post_message(NodeLoaded(v))

    def on_node_loaded(self, msg: NodeLoaded) -> None:
        v = msg.view
        self.query_one("#nodehead", Static).update(
            assemble(
                (v["node"], "b"),
                "  lifecycle: ",
                (v["state"], "b"),
                f" since {v['since']}" if v["since"] else "",
                "   (c cordon, b burn-in, h healthy)",
            )
        )
        rows = []
        for g in v["gpus"]:

            def f(k: str, fmt: str = "{:.0f}", g: dict[str, Any] = g) -> str:
                return fmt.format(g[k]) if g.get(k) is not None else ""

            rows.append(
                (
                    str(g["gpu"]),
                    f("gpu_temp_c"),
                    f("power_w"),
                    f("sm_clock_mhz"),
                    f("gpu_util_pct"),
                    hex(int(g["clock_event_reasons"])) if g.get("clock_event_reasons") is not None else "",
                    g.get("alert") or "",
                    # the last values of a GPU that stopped answering are not its state now: say so
                    assemble(("STALE", "b"), f": none for {g['stale_s'] / 60:.0f} min")
                    if g.get("stale_s") is not None
                    else "current",
                )
            )
        fill(self.query_one("#nodegpus", DataTable), GPU_COLUMNS, rows)
        lines = [
            f"{e['ts']} gpu {'-' if e['gpu'] is None else e['gpu']} {e['kind']} {e['code'] or ''} {e['message'][:90]}"
            for e in v["events"]
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
            plain("\n".join(lines) or "no events, burn-ins or lifecycle changes")
        )

    def action_move(self, to: str) -> None:
        if self.source.fleet:
            self.notify("a fleet location is read-only", severity="warning", markup=False)
            return
        from fleettool.tui.screens.confirm import ConfirmScreen

        def answered(yes: bool | None) -> None:
            if yes:
                self.move(to)

        self.app.push_screen(ConfirmScreen(f"Move node {self.node} to {to}?"), answered)

    @work(thread=True, exclusive=True, exit_on_error=False, group="write", description="moving the node")
    def move(self, to: str) -> None:
        from fleettool.lifecycle import TransitionError, transition

        try:
            with self.source.open_rw() as store:
                transition(
                    store,
                    self.node,
                    to,
                    who=who_acts(),
                    reason="from the TUI",
                    now=time.time(),
                    run=False,
                )
        except TransitionError as e:  # a refused move is an answer, not a failure: say why and stay
            self.app.call_from_thread(self.notify, str(e), severity="error", markup=False)
            return
        self.load()
