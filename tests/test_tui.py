"""The TUI with Textual's Pilot: the alert list from a replayed scenario, Enter opens evidence and runbook,
keys acknowledge and silence (written to the store), the fleet grid, the filter, the help screen."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest

from tests.conftest import SCENARIOS, run_cli

pytest.importorskip("textual")


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("tui") / "t.duckdb"
    for sc in ("dbe-remap-pending", "thermal-throttle", "healthy-power-capped"):
        assert run_cli("replay", str(SCENARIOS / sc), "--db", str(p), "-q").returncode == 0
    return p


async def _settle(pilot, cond, tries: int = 100) -> None:  # type: ignore[no-untyped-def]
    for _ in range(tries):
        await pilot.pause(0.05)
        if cond():
            return
    raise AssertionError("the screen did not reach the expected state")


def test_alerts_detail_and_runbook(db: Path) -> None:
    from textual.widgets import DataTable, Markdown, Static
    from textual_plotext import PlotextPlot

    from fleettool.tui.app import FleetTui
    from fleettool.tui.screens import DetailScreen
    from fleettool.tui.source import Source

    async def go() -> None:
        app = FleetTui(Source(db=db), refresh_s=60, first="alerts")
        async with app.run_test(size=(160, 48)) as pilot:
            table = app.query_one("#alerts", DataTable)
            await _settle(pilot, lambda: table.row_count == 2)
            first = app.rows[0]
            assert first["severity"] == "critical" and first["node"] == "gpu-12"  # worst first
            await pilot.press("enter")
            await _settle(pilot, lambda: isinstance(app.screen, DetailScreen))
            screen = app.screen
            await _settle(pilot, lambda: "gpu-12" in str(screen.query_one("#summary", Static).render()))
            text = str(screen.query_one("#summary", Static).render())
            assert "GpuDoubleBitError" in text and "reset-gpu" in text
            md = screen.query_one("#runbook", Markdown)
            await _settle(pilot, lambda: "Uncorrectable" in md.source)
            assert "## Mitigation" in md.source
            await _settle(pilot, lambda: len(screen.query(PlotextPlot)) >= 2)
            plotted = screen.plotted  # type: ignore[attr-defined]
            assert "ecc_dbe_volatile" in plotted and len(screen.query(PlotextPlot)) == len(plotted)
            await pilot.press("escape")
            await _settle(pilot, lambda: not isinstance(app.screen, DetailScreen))

    asyncio.run(go())


def test_keys_ack_and_silence_write_to_the_store(db: Path) -> None:
    from textual.widgets import DataTable

    from fleettool.tui.app import FleetTui
    from fleettool.tui.source import Source

    async def go() -> None:
        app = FleetTui(Source(db=db), refresh_s=60, first="alerts")
        async with app.run_test(size=(160, 48)) as pilot:
            table = app.query_one("#alerts", DataTable)
            await _settle(pilot, lambda: table.row_count == 2)
            await pilot.press("a", "y")
            await _settle(pilot, lambda: bool(app.rows) and app.rows[0]["acknowledged"])
            await pilot.press("down", "s", "y")
            await _settle(pilot, lambda: any(r["silenced"] for r in app.rows))

    asyncio.run(go())
    from fleettool.store import Store

    with Store(db, read_only=True) as st:
        assert st.scalar("SELECT count(*) FROM alert_acks WHERE kind = 'ack'") >= 1
        assert st.scalar("SELECT count(*) FROM silences WHERE node = 'gpu-07'") == 1


def test_fleet_grid_filter_and_help(db: Path) -> None:
    from textual.widgets import DataTable

    from fleettool.tui.app import FleetTui
    from fleettool.tui.screens import FleetScreen, HelpScreen
    from fleettool.tui.source import Source

    async def go() -> None:
        app = FleetTui(Source(db=db), refresh_s=60, first="alerts")
        async with app.run_test(size=(160, 48)) as pilot:
            table = app.query_one("#alerts", DataTable)
            await _settle(pilot, lambda: table.row_count == 2)
            await pilot.press("slash")
            await pilot.press(*"thermal")
            await pilot.press("enter")
            await _settle(pilot, lambda: table.row_count == 1)
            await pilot.press("question_mark")
            await _settle(pilot, lambda: isinstance(app.screen, HelpScreen))
            await pilot.press("escape")
            await pilot.press("f")
            await _settle(pilot, lambda: isinstance(app.screen, FleetScreen))
            grid = app.screen.query_one("#grid", DataTable)
            await _settle(pilot, lambda: grid.row_count == 3)
            first = [str(c) for c in grid.get_row_at(0)]  # cells are Text (data, not markup)
            assert first[0] == "gpu-12" and first[3] == "critical"

    asyncio.run(go())


def test_core_does_not_import_textual() -> None:
    import subprocess
    import sys

    code = (
        "import sys, fleettool.views, fleettool.engine.evaluate, fleettool.cli; "
        "print('textual' in sys.modules)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "False", r.stderr


def test_node_screen_and_lifecycle_keys(db: Path) -> None:
    from textual.widgets import DataTable, Static

    from fleettool.tui.app import FleetTui
    from fleettool.tui.screens import NodeScreen
    from fleettool.tui.source import Source

    async def go() -> None:
        app = FleetTui(Source(db=db), refresh_s=60, first="alerts")
        async with app.run_test(size=(160, 48)) as pilot:
            table = app.query_one("#alerts", DataTable)
            await _settle(pilot, lambda: table.row_count == 2)
            await pilot.press("n")
            await _settle(pilot, lambda: isinstance(app.screen, NodeScreen))
            scr = app.screen
            node = scr.node  # type: ignore[attr-defined]
            gpus = scr.query_one("#nodegpus", DataTable)
            await _settle(pilot, lambda: gpus.row_count == 8)
            await pilot.press("b", "n")  # asked, and declined: nothing moves
            await pilot.press("c", "y")
            await _settle(pilot, lambda: "cordoned" in str(scr.query_one("#nodehead", Static).render()))
            from fleettool.store import Store
            from fleettool.store.burnin import write_burnin_results

            with Store(db) as st:  # the proof a return needs: a PASS burn-in since the cordon
                write_burnin_results(
                    st, "tui-proof", time.time() + 1, [{"node": node, "test": "hbm", "verdict": "PASS"}]
                )
            await pilot.press("h", "y")
            await _settle(
                pilot, lambda: "lifecycle: healthy" in str(scr.query_one("#nodehead", Static).render())
            )

    asyncio.run(go())
    from fleettool.store import Store

    with Store(db, read_only=True) as st:
        assert [r[0] for r in st.con.execute("SELECT to_state FROM node_audit ORDER BY ts").fetchall()] == [
            "cordoned",
            "healthy",
        ]


def test_screenshot(tmp_path: Path, snap_compare) -> None:  # type: ignore[no-untyped-def]
    """SVG snapshot of the alert list (goldens in tests/__snapshots__, rewritten only with --snapshot-update)."""
    from fleettool.tui.app import FleetTui
    from fleettool.tui.source import Source

    db = tmp_path / "snap.duckdb"  # its own store: the other tests acknowledge and silence in theirs
    for sc in ("dbe-remap-pending", "thermal-throttle"):
        assert run_cli("replay", str(SCENARIOS / sc), "--db", str(db), "-q").returncode == 0

    def widths_follow_rows(table) -> bool:  # type: ignore[no-untyped-def]
        """DataTable measures new rows on its next idle; under load that can come after a fixed pause."""
        if table.row_count != 2:
            return False
        cols = list(table.columns.values())
        return all(
            col.content_width >= max(len(str(table.get_row_at(r)[i])) for r in range(2))
            for i, col in enumerate(cols)
            if i in (2, 3, 4, 5)  # node, gpu, action, state: plain text, no markup
        )

    async def settle(pilot) -> None:  # type: ignore[no-untyped-def]
        await _settle(pilot, lambda: widths_follow_rows(pilot.app.query_one("#alerts")))
        await pilot.wait_for_scheduled_animations()
        await pilot.pause(0.2)

    assert snap_compare(
        FleetTui(Source(db=db), refresh_s=600, clock=False, first="alerts"),
        terminal_size=(140, 20),
        run_before=settle,
    )


def test_real_terminal_under_tmux(db: Path, tmp_path: Path) -> None:
    import shutil
    import subprocess
    import time

    tmux = shutil.which("tmux")
    if tmux is None:
        pytest.skip("tmux not installed (CI installs it)")
    exe = shutil.which("fleettool")
    assert exe
    sock = str(tmp_path / "tmux.sock")
    subprocess.run(
        [tmux, "-S", sock, "new-session", "-d", "-x", "160", "-y", "40", exe, "tui", "--db", str(db)],
        check=True,
    )

    def capture(until: str) -> str:
        screen = ""
        for _ in range(100):
            time.sleep(0.2)
            screen = subprocess.run(
                [tmux, "-S", sock, "capture-pane", "-p"], capture_output=True, text=True
            ).stdout
            if re.search(until, screen):
                break
        return screen

    try:
        # it opens on the incidents (the list, or the note that the store has none), the alerts one key away
        screen = capture(r"\d+ incidents?, \d+ open|No incidents in this store")
        assert re.search(r"\d+ incidents?, \d+ open|No incidents in this store", screen), screen
        subprocess.run([tmux, "-S", sock, "send-keys", "l"], check=True)
        screen = capture("gpu-12(.|\n)*thermal")
        assert "gpu-12" in screen and "critical" in screen and "thermal" in screen, screen
        subprocess.run([tmux, "-S", sock, "send-keys", "q"], check=True)
    finally:
        subprocess.run([tmux, "-S", sock, "kill-server"], capture_output=True)


def test_stats_screen_and_fleet_filter(tmp_path: Path) -> None:
    from textual.widgets import DataTable, Static

    from fleettool.tui.app import FleetTui
    from fleettool.tui.screens import FleetScreen, StatsScreen
    from fleettool.tui.source import Source

    db = tmp_path / "s.duckdb"
    for sc in ("gpu-fell-off-bus", "thermal-throttle", "healthy-power-capped"):
        assert run_cli("replay", str(SCENARIOS / sc), "--db", str(db), "-q").returncode == 0
    cli = run_cli("report", "--db", str(db)).stdout.splitlines()

    async def go() -> None:
        app = FleetTui(Source(db=db), refresh_s=60, first="alerts")
        async with app.run_test(size=(160, 48)) as pilot:
            await _settle(pilot, lambda: app.query_one("#alerts", DataTable).row_count == 2)
            await pilot.press("t")
            await _settle(pilot, lambda: isinstance(app.screen, StatsScreen))
            scr = app.screen
            await _settle(pilot, lambda: "fleet" in str(scr.query_one("#stats", Static).render()))
            text = str(scr.query_one("#stats", Static).render())
            assert "3 nodes" in text and "1 interruptions" in text and "{" not in text  # words, not a dict
            # the same units as `fleettool report`: availability in percent, MTBF as a person's duration
            assert "availability 83.33%" in text and "MTBF 3.0h" in text, text
            assert "availability 83.33%, 1 interruptions, MTBF 3.0h" in cli[0], cli
            cats, down = scr.query_one("#statcats", DataTable), scr.query_one("#statdown", DataTable)
            await _settle(pilot, lambda: cats.row_count == 1 and down.row_count == 1)
            assert (
                list(map(str, cats.get_row_at(0))) == ["gpu-lost", "1"]
                and str(down.get_row_at(0)[0]) == "gpu-21"
            )
            nodes = scr.query_one("#statnodes", DataTable)
            await _settle(pilot, lambda: nodes.row_count == 3)
            assert str(nodes.get_row_at(0)[0]) == "gpu-21"  # least available first
            row = [str(c) for c in nodes.get_row_at(0)]
            assert row == ["gpu-21", "50.00%", "1", "30m", "1.0h"]
            assert [ln.split() for ln in cli if ln.startswith("gpu-21")] == [row]
            await pilot.press("escape", "f")
            await _settle(pilot, lambda: isinstance(app.screen, FleetScreen))
            grid = app.screen.query_one("#grid", DataTable)
            await _settle(pilot, lambda: grid.row_count == 3)
            await pilot.press("slash", *"lost", "enter")  # by the category (gpu-lost) of a firing alert
            await _settle(pilot, lambda: grid.row_count == 1)
            assert str(grid.get_row_at(0)[0]) == "gpu-21"

    asyncio.run(go())


def test_resolve_key_and_grid_sort(tmp_path: Path) -> None:
    from textual.widgets import DataTable

    from fleettool.tui.app import FleetTui
    from fleettool.tui.screens import FleetScreen
    from fleettool.tui.source import Source

    db = tmp_path / "r.duckdb"
    for sc in ("gpu-fell-off-bus", "healthy-power-capped"):
        assert run_cli("replay", str(SCENARIOS / sc), "--db", str(db), "-q").returncode == 0

    async def go() -> None:
        app = FleetTui(Source(db=db), refresh_s=60, first="alerts")
        async with app.run_test(size=(160, 48)) as pilot:
            await _settle(pilot, lambda: app.query_one("#alerts", DataTable).row_count == 1)
            await pilot.press("r", "y")
            await _settle(pilot, lambda: bool(app.rows) and app.rows[0]["state"] == "resolved")
            await pilot.press("f")
            await _settle(pilot, lambda: isinstance(app.screen, FleetScreen))
            grid = app.screen.query_one("#grid", DataTable)
            await _settle(pilot, lambda: grid.row_count == 2)
            await pilot.press("o")  # by name
            await _settle(pilot, lambda: str(grid.get_row_at(0)[0]) == "gpu-03")

    asyncio.run(go())


def test_a_failing_worker_shows_its_error_and_the_app_stays_up(db: Path) -> None:
    """A worker whose source raises ends in the error modal naming what failed, not in the app exiting."""
    from textual.widgets import DataTable, Static

    from fleettool.tui.app import FleetTui
    from fleettool.tui.errors import ErrorScreen
    from fleettool.tui.screens import StatsScreen
    from fleettool.tui.source import Source

    class Flaky(Source):
        broken = False

        def open(self):  # type: ignore[no-untyped-def]
            if self.broken:
                raise OSError("[Errno 5] the store went away")
            return super().open()

    source = Flaky(db=db)

    async def go() -> None:
        app = FleetTui(source, refresh_s=60, first="alerts")
        async with app.run_test(size=(160, 48)) as pilot:
            table = app.query_one("#alerts", DataTable)
            await _settle(pilot, lambda: table.row_count == 2)
            source.broken = True
            await pilot.press("t")  # the statistics screen's worker raises
            await _settle(pilot, lambda: isinstance(app.screen, ErrorScreen))
            text = str(app.screen.query_one("#error", Static).render())
            assert "loading the fleet statistics failed" in text and "[Errno 5] the store went away" in text
            assert app.is_running
            await pilot.press("escape")
            await _settle(pilot, lambda: isinstance(app.screen, StatsScreen))
            await pilot.press("escape", "f5")  # the alert list's own refresh fails the same way
            await _settle(pilot, lambda: isinstance(app.screen, ErrorScreen))
            assert "loading the alerts failed" in str(app.screen.query_one("#error", Static).render())
            await pilot.press("escape")
            await _settle(pilot, lambda: not isinstance(app.screen, ErrorScreen))
            assert app.is_running and table.row_count == 2  # the last good list stays on screen

    asyncio.run(go())


def test_every_worker_reports_its_errors_to_the_one_handler() -> None:
    """Each @work in the TUI runs with exit_on_error=False and a description (what the error modal names), in a
    class that inherits the one Worker.StateChanged handler."""
    import ast

    tui = Path(__file__).resolve().parent.parent / "tui"
    workers = 0
    for path in sorted(tui.rglob("*.py")):
        for cls in ast.walk(ast.parse(path.read_text())):
            if not isinstance(cls, ast.ClassDef):
                continue
            for fn in cls.body:
                for dec in getattr(fn, "decorator_list", []):
                    if isinstance(dec, ast.Call) and getattr(dec.func, "id", None) == "work":
                        workers += 1
                        kw = {k.arg: k.value for k in dec.keywords}
                        where = f"{path.name}:{cls.name}.{getattr(fn, 'name', '?')}"
                        assert isinstance(kw.get("exit_on_error"), ast.Constant), where
                        assert kw["exit_on_error"].value is False, where  # type: ignore[attr-defined]
                        assert isinstance(kw.get("description"), ast.Constant), where
                        bases = {getattr(b, "id", None) for b in cls.bases}
                        assert bases & {"DataScreen", "ShowsWorkerErrors"}, where
    assert workers >= 7


def test_every_registered_screen_has_its_key() -> None:
    from fleettool.tui.app import FleetTui
    from fleettool.tui.screens import SCREENS

    actions = {b.key: b.action for b in FleetTui.BINDINGS}
    for name, nav in SCREENS.items():
        assert actions[nav.key] == f"open_screen('{name}')", name


def test_at_80_by_24_the_alert_list_leaves_the_summary_readable(db: Path) -> None:
    """At 80 x 24 the list drops its least important columns (k9s's way) so the summary keeps 30 characters
    on screen, ending in an ellipsis (it had about 6, the rest scrolled off); wider again, every column is back."""
    from textual.coordinate import Coordinate
    from textual.widgets import DataTable

    from fleettool.tui.app import ALERT_COLUMNS, FleetTui
    from fleettool.tui.source import Source

    async def go() -> None:
        app = FleetTui(Source(db=db), refresh_s=60, first="alerts")
        async with app.run_test(size=(80, 24)) as pilot:
            table = app.query_one("#alerts", DataTable)
            await _settle(pilot, lambda: table.row_count == 2)
            await pilot.pause(0.1)
            cols = list(table.columns.values())
            assert [str(c.label) for c in cols] == ["severity", "node", "gpu", "state", "summary"]
            widths = [c.get_render_width(table) for c in cols]
            assert sum(widths) <= 80 - table.styles.scrollbar_size_vertical  # nothing scrolls off
            assert widths[-1] - 2 * table.cell_padding >= 30
            summary = str(table.get_cell_at(Coordinate(0, len(cols) - 1)))
            assert summary.startswith("GPU 4 on gpu-12") and summary.endswith("\u2026")
            await pilot.resize_terminal(200, 40)
            await _settle(pilot, lambda: len(table.columns) == len(ALERT_COLUMNS))
            assert [str(c.label) for c in table.columns.values()] == list(ALERT_COLUMNS)

    asyncio.run(go())
