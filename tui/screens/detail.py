"""One alert (Enter in the alert list): its findings, plots of the series that made it and of its category's
(textual-plotext, chosen by measuring against textual-plot: bench/tui_plots.py), events, NCCL runs and burn-ins
beside its runbook. The x axis is minutes from the alert's first sighting; a dashed line marks it."""

from __future__ import annotations

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Footer, Header, Markdown, Static
from textual_plotext import PlotextPlot

from fleettool.store.values import epoch
from fleettool.tui.messages import DetailLoaded
from fleettool.tui.screens.base import DataScreen
from fleettool.tui.text import Part, assemble, plain
from fleettool.tui.theme import SEV_STYLE


class DetailScreen(DataScreen):
    BINDINGS = [Binding("escape", "app.pop_screen", "back")]

    def __init__(self, alert_id: str) -> None:
        super().__init__()
        self.alert_id = alert_id
        self.plotted: list[str] = []  # the series drawn, in order

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

    @work(thread=True, exclusive=True, exit_on_error=False, description="loading the alert's evidence")
    def load(self) -> None:
        from fleettool.views import alert_detail

        with self.source.open() as store:
            d = alert_detail(store, self.alert_id)
        self.post_message(DetailLoaded(d))

    def on_detail_loaded(self, msg: DetailLoaded) -> None:
        d = msg.detail
        if d is None:
            self.query_one("#summary", Static).update("alert not found")
            return
        gpu = "-" if d["gpu"] is None else d["gpu"]
        style = SEV_STYLE.get(d["severity"], "")
        head: list[Part] = [
            (d["severity"].upper(), style),
            f" {d['category']}  {d['node']} gpu {gpu}\n",
            (d["summary"], "b"),
            "\naction: ",
            (d["action"], "b"),
            f"   state: {d['state']}   since {d['first_seen']}   last {d['last_seen']}\n",
        ]
        findings = d["evidence"].get("findings", [])
        head.append("\n".join(f"  - {f['rule']} ({f['severity']}): {f['summary']}" for f in findings))
        self.query_one("#summary", Static).update(assemble(*head))
        sparks = self.query_one("#sparks", VerticalScroll)
        first = epoch(d["first_seen"])
        self.plotted = [m for m, v in d["series"].items() if v]
        for metric, values in d["series"].items():
            if not values:
                continue
            ts = d.get("series_ts", {}).get(metric) or list(range(len(values)))
            plot = PlotextPlot(classes="evidence-plot")
            sparks.mount(plot)
            p = plot.plt
            xs = [(t - first) / 60.0 for t in ts] if first is not None else list(range(len(values)))
            p.plot(xs, values, marker="braille")
            if first is not None:
                p.vline(0.0)
            stale = d.get("series_stale", {}).get(metric)
            # a series that stopped while its node went on: its last value is not the GPU's state now
            mark = f"  STALE: no reading for the last {stale / 60:.0f} min" if stale is not None else ""
            p.title(f"{metric}  {min(values):.4g} .. {max(values):.4g}{mark}")
            p.xlabel("minutes from the alert")
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
            plain("\n".join(lines) or "no events, runs or burn-ins in the window")
        )
        self.query_one("#runbook", Markdown).update(d["runbook_text"])
