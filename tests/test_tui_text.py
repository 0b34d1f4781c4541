"""What the store holds is shown as text in the TUI, never read as markup: a PCI bus `ab` stays `0000:ab:00`
(Rich's emoji code `:ab:` drew it as `0000🆎00`), `[bold red]x[/]` and `[link=...]` stay as typed, and a
message with a closing tag and no opening one (`[/]`, a MarkupError) neither crashes nor vanishes. With
Textual's Pilot over a real store whose alert, events, GPU, acknowledgement, burn-in and lifecycle audit carry
such strings; what is checked is what the widgets draw."""

from __future__ import annotations

import ast
import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from tests.test_tui import _settle

pytest.importorskip("textual")

BUS = "0000:ab:00"
EMOJI = ":cd:"
STYLED = "[bold red]x[/]"
LINK = "[link=http://x]y[/]"
BROKEN = "[/] ["  # closes what was never opened, then opens nothing: MarkupError in Rich and Textual
EVERY = (BUS, EMOJI, STYLED, LINK, BROKEN)

NODE = "gpu-77"
ODD_NODE = "rack:ab:[b]9[/]"  # a node name from a recording is data too
RULE = f"GpuFell{EMOJI}{BROKEN}"
CATEGORY = f"bus{LINK}"
SUMMARY = f"XID 79 at {BUS} {EMOJI} {STYLED} {LINK} {BROKEN}"
EVENT = f"Xid (PCI:{BUS}): 79 {STYLED} {LINK} {BROKEN} {EMOJI}"
WHO = f"[bold]eve[/]{EMOJI}"
MODEL = f"H200 {STYLED} {EMOJI}"
REASON = f"swap {LINK} {BROKEN}"
METRIC = f"probe{EMOJI}[b]{BROKEN}"  # a series the alert's evidence names, plotted under its name


@pytest.fixture()
def db(tmp_path: Path) -> Path:
    from fleettool.engine.silences import acknowledge
    from fleettool.lifecycle import transition
    from fleettool.model import Event, GpuInfo, Sample
    from fleettool.store import Store
    from fleettool.store.alerts import AlertRecord, put_alert
    from fleettool.store.burnin import write_burnin_results

    p = tmp_path / "odd.duckdb"
    now = time.time()
    with Store(p) as st:
        put_alert(
            st,
            AlertRecord(
                alert_id="a1",
                rule=RULE,
                category=CATEGORY,
                severity="critical",
                node=NODE,
                gpu=3,
                uuid="GPU-1",
                action="reset-gpu",  # disruptive: the statistics count it under its category
                state="firing",
                first_seen=now - 600,
                last_seen=now - 60,
                summary=SUMMARY,
                runbook="runbooks/gpu-fell-off-the-bus.md",
                incident="i1",
                evidence={
                    "findings": [{"rule": RULE, "severity": "critical", "summary": SUMMARY}],
                    "series": [[METRIC, RULE]],
                },
            ),
        )
        put_alert(
            st,
            AlertRecord(
                alert_id="a2",
                rule="Quiet",
                category=CATEGORY,
                severity="warning",
                node=ODD_NODE,
                gpu=None,
                uuid=None,
                action="watch",
                state="firing",
                first_seen=now - 600,
                last_seen=now - 60,
                summary=f"odd node {STYLED}",
                runbook="runbooks/gpu-fell-off-the-bus.md",
                incident="i2",
            ),
        )
        acknowledge(st, "a1", now=now, until=now + 3600, who=WHO, reason=REASON)
        st.write_samples(
            [Sample(now - 600 + 30 * i, NODE, 3, "GPU-1", METRIC, float(i % 5)) for i in range(20)]
        )
        st.write_events([Event(now - 300, NODE, "xid", EVENT, gpu=3, pci_bus_id=BUS, code=79)])
        st.upsert_gpus([GpuInfo(NODE, 3, "GPU-1", BUS + ".0", MODEL, "550")], now - 300)
        burnin = {
            "node": NODE,
            "gpu": 3,
            "test": f"hbm{EMOJI}",
            "verdict": "FAIL",
            "figure": 1.5,
            "unit": STYLED,
        }
        write_burnin_results(st, "r1", now - 200, [burnin])
        transition(st, NODE, "suspect", who=WHO, reason=REASON, now=now - 100, run=False)
    return p


def table_text(table: Any) -> str:
    """Every row of a DataTable as it is drawn (the widget's own lines), one line each."""
    return "\n".join(table.render_line(y).text for y in range(table.size.height))


def shown(widget: Any) -> str:
    """A Static's content as drawn (its visual's plain text)."""
    return str(widget.render())


def _app(db: Path) -> Any:
    from fleettool.tui.app import FleetTui
    from fleettool.tui.source import Source

    return FleetTui(Source(db=db), refresh_s=60, clock=False, first="alerts")


SIZE = (260, 50)  # wide enough that no column is scrolled out of view


def test_alert_list_shows_data_as_typed(db: Path) -> None:
    """The finding: the list drew `0000:ab:00` as `0000🆎00` (rich.markup.escape leaves emoji codes alone)."""
    from textual.widgets import DataTable

    async def go() -> str:
        app = _app(db)
        async with app.run_test(size=SIZE) as pilot:
            table = app.query_one("#alerts", DataTable)
            await _settle(pilot, lambda: table.row_count == 2)
            await pilot.pause(0.2)
            return table_text(table)

    shown_list = asyncio.run(go())
    assert "🆎" not in shown_list and "💿" not in shown_list, shown_list
    for s in (CATEGORY, NODE, SUMMARY, ODD_NODE, f"ack:{WHO}"):  # the list has no rule column
        assert s in shown_list, (s, shown_list)


def test_confirm_prompt_names_rule_node_and_gpu_as_typed(db: Path) -> None:
    from textual.widgets import DataTable, Static

    from fleettool.tui.screens import ConfirmScreen

    async def go() -> str:
        app = _app(db)
        async with app.run_test(size=SIZE) as pilot:
            await _settle(pilot, lambda: app.query_one("#alerts", DataTable).row_count == 2)
            await pilot.press("a")
            await _settle(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            text = shown(app.screen.query_one("#confirm", Static))
            await pilot.press("n")
            await _settle(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
            assert app.is_running
            return text

    text = asyncio.run(go())
    assert f"{RULE} on {NODE} GPU 3 for 4 h?" in text and SUMMARY in text and "y yes" in text, text


def test_evidence_node_and_grid_show_data_as_typed(db: Path) -> None:
    from textual.widgets import DataTable, Markdown, Static
    from textual.widgets.markdown import MarkdownBlock
    from textual_plotext import PlotextPlot

    from fleettool.tui.screens import DetailScreen, FleetScreen, NodeScreen

    seen: dict[str, str] = {}

    async def go() -> None:
        app = _app(db)
        async with app.run_test(size=SIZE) as pilot:
            table = app.query_one("#alerts", DataTable)
            await _settle(pilot, lambda: table.row_count == 2)
            await pilot.press("enter")
            await _settle(pilot, lambda: isinstance(app.screen, DetailScreen))
            scr = app.screen
            await _settle(pilot, lambda: NODE in shown(scr.query_one("#summary", Static)))
            seen["head"] = shown(scr.query_one("#summary", Static))
            seen["events"] = shown(scr.query_one("#events", Static))
            await _settle(pilot, lambda: len(scr.query(PlotextPlot)) == 1)
            seen["plot"] = str(scr.query_one(PlotextPlot).render())
            md = scr.query_one("#runbook", Markdown)
            await _settle(pilot, lambda: NODE in "".join(str(b.render()) for b in md.query(MarkdownBlock)))
            seen["runbook"] = "\n".join(str(b.render()) for b in md.query(MarkdownBlock))
            await pilot.press("escape", "n")
            await _settle(pilot, lambda: isinstance(app.screen, NodeScreen))
            scr = app.screen
            gpus = scr.query_one("#nodegpus", DataTable)
            await _settle(pilot, lambda: gpus.row_count == 1 and EVENT in shown(scr.query_one("#nodeevents")))
            seen["nodehead"] = shown(scr.query_one("#nodehead", Static))
            seen["nodeevents"] = shown(scr.query_one("#nodeevents", Static))
            seen["nodegpus"] = table_text(gpus)
            await pilot.press("escape", "f")
            await _settle(pilot, lambda: isinstance(app.screen, FleetScreen))
            grid = app.screen.query_one("#grid", DataTable)
            await _settle(pilot, lambda: grid.row_count == 2 and MODEL in table_text(grid))
            seen["grid"] = table_text(grid)
            assert app.is_running

    asyncio.run(go())
    head = seen["head"]
    assert f"CRITICAL {CATEGORY}  {NODE} gpu 3" in head and SUMMARY in head, head
    assert "action: reset-gpu" in head and f"- {RULE} (critical): {SUMMARY}" in head, head
    assert f"{METRIC}  0 .. 4" in seen["plot"], seen["plot"]  # the plot's title (plotext, drawn from ANSI)
    assert f"This alert: {RULE} on {NODE}, GPU 3" in seen["runbook"] and SUMMARY in seen["runbook"]
    ev = seen["events"]
    assert EVENT in ev and f"hbm{EMOJI} gpu 3: FAIL 1.5 {STYLED}" in ev, ev
    assert f"{NODE}  lifecycle: suspect" in seen["nodehead"], seen["nodehead"]
    ev = seen["nodeevents"]
    assert EVENT in ev and f"hbm{EMOJI}: FAIL 1.5 {STYLED}" in ev and f"by {WHO}: {REASON}" in ev, ev
    assert "critical" in seen["nodegpus"]
    assert MODEL in seen["grid"] and ODD_NODE in seen["grid"] and CATEGORY in seen["grid"], seen["grid"]
    for text in seen.values():
        assert "🆎" not in text and "💿" not in text


def test_statistics_and_notices_show_data_as_typed(db: Path) -> None:
    from textual.widgets import DataTable
    from textual.widgets._toast import Toast

    from fleettool.tui.screens import StatsScreen

    seen: dict[str, str] = {}

    async def go() -> None:
        app = _app(db)
        async with app.run_test(size=SIZE, notifications=True) as pilot:  # toasts are drawn
            table = app.query_one("#alerts", DataTable)
            await _settle(pilot, lambda: table.row_count == 2)
            await pilot.press("a", "y")  # acknowledged: the notice names the rule, node and GPU
            await _settle(pilot, lambda: bool(app.screen.query(Toast)))
            seen["notice"] = " ".join(str(t.render()) for t in app.screen.query(Toast))
            await pilot.press("t")
            await _settle(pilot, lambda: isinstance(app.screen, StatsScreen))
            cats = app.screen.query_one("#statcats", DataTable)
            nodes = app.screen.query_one("#statnodes", DataTable)
            await _settle(pilot, lambda: cats.row_count == 1 and nodes.row_count == 2)
            seen["cats"], seen["nodes"] = table_text(cats), table_text(nodes)
            assert app.is_running

    asyncio.run(go())
    assert f"Acknowledge: {RULE} on {NODE} GPU 3 (alert a1)" in seen["notice"], seen["notice"]
    assert CATEGORY in seen["cats"], seen["cats"]
    assert ODD_NODE in seen["nodes"] and NODE in seen["nodes"], seen["nodes"]


def test_an_error_naming_data_is_shown_as_typed(db: Path) -> None:
    """The worker-error modal shows the exception's text (a path, a message from the store) as it is."""
    from textual.widgets import DataTable, Static

    from fleettool.tui.errors import ErrorScreen
    from fleettool.tui.source import Source

    class Failing(Source):
        broken = False

        def open(self):  # type: ignore[no-untyped-def]
            if self.broken:
                raise OSError(f"cannot read {BUS} {STYLED} {LINK} {BROKEN} {EMOJI}")
            return super().open()

    from fleettool.tui.app import FleetTui

    source = Failing(db=db)

    async def go() -> str:
        app = FleetTui(source, refresh_s=60, clock=False, first="alerts")
        async with app.run_test(size=SIZE) as pilot:
            await _settle(pilot, lambda: app.query_one("#alerts", DataTable).row_count == 2)
            source.broken = True
            await pilot.press("f5")
            await _settle(pilot, lambda: isinstance(app.screen, ErrorScreen))
            return shown(app.screen.query_one("#error", Static))

    text = asyncio.run(go())
    assert f"cannot read {BUS} {STYLED} {LINK} {BROKEN} {EMOJI}" in text, text


# -- the rule, held in the code: a string reaches a widget only as Text (fleettool.tui.text) or a constant ------

TUI = Path(__file__).resolve().parent.parent / "tui"
# take what they draw (markup, when a str) as first argument; ConfirmScreen and ErrorScreen draw theirs as text
SHOWS = {"update", "Static", "Label"}
SAFE_CALLS = {"plain", "assemble"}  # fleettool.tui.text: data as Text, never markup


def _name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _is_text(arg: ast.expr) -> bool:
    """A constant, or Text made by fleettool.tui.text (either branch of a conditional)."""
    if isinstance(arg, ast.IfExp):
        return _is_text(arg.body) and _is_text(arg.orelse)
    if isinstance(arg, ast.Constant):
        return isinstance(arg.value, str)
    return isinstance(arg, ast.Call) and _name(arg.func) in SAFE_CALLS


def _is_markdown(func: ast.expr) -> bool:
    """query_one(..., Markdown).update(...): Markdown's source is markdown, which is not Rich/Textual markup."""
    target = func.value if isinstance(func, ast.Attribute) else None
    return isinstance(target, ast.Call) and any(getattr(a, "id", "") == "Markdown" for a in target.args)


def _offences(source: str) -> list[str]:
    """Calls that would let a str with data reach a widget as markup (line: what)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = _name(node.func)
        if name in SHOWS and node.args and not _is_markdown(node.func):
            arg = node.args[0]
            if not _is_text(arg):
                out.append(f"{node.lineno}: {name}({ast.unparse(arg)[:40]})")
        if name == "call_from_thread" and node.args and _name(node.args[0]) == "notify":
            name = "notify"  # self.call_from_thread(self.notify, message, ...): the same call, from a worker
        if name == "notify":
            kw = {k.arg: k.value for k in node.keywords}
            markup = kw.get("markup")
            if not (isinstance(markup, ast.Constant) and markup.value is False):
                out.append(f"{node.lineno}: notify without markup=False")
        if name in {"add_row", "add_rows", "update_cell"}:
            out.append(f"{node.lineno}: {name} outside fleettool.tui.tables.fill")
        if name in {"escape", "from_markup"}:
            out.append(f"{node.lineno}: {name} (use fleettool.tui.text.plain)")
    return out


def test_no_widget_gets_data_as_markup() -> None:
    """Every Static/Label/update gets a constant or fleettool.tui.text's Text; every notify passes markup=False;
    rows go in only through tables.fill (which shows a str cell as text). A new f-string into a widget fails."""
    found = {}
    for path in sorted(TUI.rglob("*.py")):
        bad = [o for o in _offences(path.read_text()) if not (path.name == "tables.py" and "add_row" in o)]
        if bad:
            found[str(path.relative_to(TUI))] = bad
    assert not found, found


def test_the_scan_catches_what_it_is_for() -> None:
    """The scan above flags each way data used to reach a widget as markup (so it cannot pass by finding nothing)."""
    caught = _offences(
        "w.update(f'[b]{x}[/b]')\nStatic(head)\nself.notify(f'{r}')\nt.add_row(*cells)\nescape(s)\n"
        "self.call_from_thread(self.notify, str(e))\nw.update(plain(x) if x else y)\n"
        "w.update(plain(x))\nStatic('loading...')\nself.notify('read-only', markup=False)\n"
        "w.update(assemble(('a', 'b')) if x else 'none')\nself.query_one('#r', Markdown).update(md)\n"
    )
    assert [c.split(":")[0] for c in caught] == ["1", "2", "3", "4", "5", "6", "7"], caught
