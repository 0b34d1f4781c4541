"""SVG snapshots of every TUI screen over one replayed store (goldens in tests/__snapshots__/test_tui_snapshots,
rewritten only with `pytest --snapshot-update`; look at the SVGs before committing them). Each snapshot is
taken once the screen's data has arrived: its tables are sized before their rows go in (fleettool.tui.tables),
so no frame is half-measured, and nothing on these screens reads the clock."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SCENARIOS, run_cli

pytest.importorskip("textual")

SIZE = (140, 40)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("snaps") / "s.duckdb"
    for sc in ("dbe-remap-pending", "thermal-throttle", "gpu-fell-off-bus"):
        assert run_cli("replay", str(SCENARIOS / sc), "--db", str(p), "-q").returncode == 0
    return p


def _alert_id(db: Path, where: str) -> str:
    from fleettool.store import Store

    with Store(db, read_only=True) as st:
        aid = st.scalar(f"SELECT alert_id FROM alerts WHERE {where} ORDER BY first_seen, rule LIMIT 1")
    assert aid, where
    return str(aid)


async def _until(pilot: Any, cond: Callable[[], bool], tries: int = 200) -> None:
    for _ in range(tries):
        await pilot.pause(0.05)
        if cond():
            await pilot.wait_for_scheduled_animations()
            await pilot.pause(0.3)  # let the last message's repaint land
            return
    raise AssertionError("the screen did not reach the expected state")


def _app(db: Path) -> Any:
    from fleettool.tui.app import FleetTui
    from fleettool.tui.source import Source

    return FleetTui(Source(db=db), refresh_s=600, clock=False, first="alerts")


def _list_loaded(pilot: Any) -> Awaitable[None]:
    return _until(pilot, lambda: pilot.app.query_one("#alerts").row_count >= 3)


def test_detail_screen(db: Path, snap_compare: Any) -> None:
    from textual.widgets import Markdown
    from textual_plotext import PlotextPlot

    from fleettool.tui.screens import DetailScreen

    aid = _alert_id(db, "node = 'gpu-07' AND category = 'thermal'")

    async def run_before(pilot: Any) -> None:
        await _list_loaded(pilot)
        await pilot.app.push_screen(DetailScreen(aid))
        scr = pilot.app.screen
        await _until(
            pilot,
            lambda: (
                bool(scr.plotted)
                and len(scr.query(PlotextPlot)) == len(scr.plotted)
                and "thermal" in scr.query_one("#runbook", Markdown).source.lower()
            ),
        )

    assert snap_compare(_app(db), terminal_size=SIZE, run_before=run_before)


def test_node_screen_marks_the_gpu_that_fell_off_stale(db: Path, snap_compare: Any) -> None:
    from fleettool.tui.screens import NodeScreen

    async def run_before(pilot: Any) -> None:
        await _list_loaded(pilot)
        await pilot.app.push_screen(NodeScreen("gpu-21"))
        scr = pilot.app.screen
        await _until(pilot, lambda: scr.query_one("#nodegpus").row_count == 8)
        rows = [scr.query_one("#nodegpus").get_row_at(i) for i in range(8)]
        assert sum("STALE" in str(r[-1]) for r in rows) == 1  # the evidence the snapshot shows

    assert snap_compare(_app(db), terminal_size=SIZE, run_before=run_before)


def test_fleet_screen(db: Path, snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await _list_loaded(pilot)
        await pilot.press("f")
        await _until(
            pilot,
            lambda: pilot.app.screen.query("#grid") and pilot.app.screen.query_one("#grid").row_count == 3,
        )

    assert snap_compare(_app(db), terminal_size=SIZE, run_before=run_before)


def test_stats_screen(db: Path, snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await _list_loaded(pilot)
        await pilot.press("t")
        await _until(
            pilot,
            lambda: (
                pilot.app.screen.query("#statnodes")
                and pilot.app.screen.query_one("#statnodes").row_count == 3
            ),
        )

    assert snap_compare(_app(db), terminal_size=SIZE, run_before=run_before)


def test_help_screen(db: Path, snap_compare: Any) -> None:
    from fleettool.tui.screens import HelpScreen

    async def run_before(pilot: Any) -> None:
        await _list_loaded(pilot)
        await pilot.press("question_mark")
        await _until(pilot, lambda: isinstance(pilot.app.screen, HelpScreen))

    assert snap_compare(_app(db), terminal_size=SIZE, run_before=run_before)


def test_confirm_screen_names_the_alert_and_the_duration(db: Path, snap_compare: Any) -> None:
    from textual.widgets import Static

    from fleettool.tui.screens import ConfirmScreen

    async def run_before(pilot: Any) -> None:
        await _list_loaded(pilot)
        await pilot.press("a")
        await _until(pilot, lambda: isinstance(pilot.app.screen, ConfirmScreen))
        q = str(pilot.app.screen.query_one("#confirm", Static).render())
        assert "GpuDoubleBitError on gpu-12 GPU 4 for 4 h" in q, q

    assert snap_compare(_app(db), terminal_size=SIZE, run_before=run_before)
