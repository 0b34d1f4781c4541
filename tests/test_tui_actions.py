"""The TUI acts on the alert shown, by id: the selection stays on its alert across refreshes, a filter and a
return from the evidence screen; every action asks first, naming the alert and how long; a cancelled action
writes nothing. With Textual's Pilot over a store with three alerts on three nodes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.conftest import SCENARIOS, run_cli
from tests.test_tui import _settle

pytest.importorskip("textual")


@pytest.fixture()
def db(tmp_path: Path) -> Path:
    p = tmp_path / "t.duckdb"
    for sc in ("dbe-remap-pending", "thermal-throttle", "gpu-fell-off-bus"):
        assert run_cli("replay", str(SCENARIOS / sc), "--db", str(p), "-q").returncode == 0
    return p


def _acks(db: Path) -> list[tuple[str, str]]:
    from fleettool.store import Store

    with Store(db, read_only=True) as st:
        return st.rows("SELECT alert_id, kind FROM alert_acks ORDER BY ALL")


def _alert_id(db: Path, node: str) -> str:
    from fleettool.store import Store

    with Store(db, read_only=True) as st:
        return str(st.scalar("SELECT alert_id FROM alerts WHERE node = ?", [node]))


def test_ack_after_a_refresh_acts_on_the_alert_selected(db: Path) -> None:
    from textual.widgets import DataTable

    from fleettool.tui.app import FleetTui
    from fleettool.tui.screens import ConfirmScreen
    from fleettool.tui.source import Source

    thermal = _alert_id(db, "gpu-07")
    seen: dict[str, str] = {}

    async def go() -> None:
        app = FleetTui(
            Source(db=db), refresh_s=0.3, first="alerts"
        )  # a refresh every 0.3 s: several happen below
        async with app.run_test(size=(160, 48)) as pilot:
            table = app.query_one("#alerts", DataTable)
            await _settle(pilot, lambda: table.row_count == 3)
            ids = [r["alert_id"] for r in app.visible_rows()]
            assert ids[0] != thermal  # the thermal warning is not the first row: the bug acked row 0
            await pilot.press(*["down"] * ids.index(thermal))
            assert app.selected_id == thermal
            await pilot.pause(1.0)  # past three refreshes (each clears and refills the table)
            assert app.selected_id == thermal and app.selected() is not None
            await pilot.press("a")
            await _settle(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            seen["question"] = app.screen.question  # type: ignore[attr-defined]
            await pilot.pause(0.7)  # refreshes while the question is open change nothing either
            await pilot.press("y")
            # the write waits its turn for the file between the 0.3 s refreshes' reads: give it time under load
            await _settle(pilot, lambda: any(r["acknowledged"] for r in app.rows), tries=400)

    asyncio.run(go())
    assert _acks(db) == [(thermal, "ack")]  # the alert shown, and only it
    assert "gpu-07" in seen["question"] and "GPU 2" in seen["question"] and "for 4 h" in seen["question"]


def test_keys_typed_in_a_burst_act_on_the_row_they_reach(db: Path) -> None:
    """tmux send-keys Down Down a: the three keys are queued at once, so the table moves its cursor before the
    app sees the moves' RowHighlighted messages. The confirmation and the ack are the reached row's."""
    from textual import events
    from textual.widgets import DataTable

    from fleettool.tui.app import FleetTui
    from fleettool.tui.screens import ConfirmScreen
    from fleettool.tui.source import Source

    seen: dict[str, str] = {}

    async def go() -> None:
        app = FleetTui(Source(db=db), refresh_s=60, first="alerts")
        async with app.run_test(size=(160, 48)) as pilot:
            table = app.query_one("#alerts", DataTable)
            await _settle(pilot, lambda: table.row_count == 3)
            seen["third"] = app.visible_rows()[2]["alert_id"]
            for key in ("down", "down", "a"):  # posted together, as a terminal delivers a burst
                app.post_message(events.Key(key, None))
            await _settle(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            seen["question"] = app.screen.question  # type: ignore[attr-defined]
            await pilot.press("y")
            await _settle(pilot, lambda: any(r["acknowledged"] for r in app.rows), tries=400)

    asyncio.run(go())
    assert _acks(db) == [(seen["third"], "ack")]


def test_a_cancelled_action_writes_nothing_and_esc_from_evidence_keeps_the_selection(db: Path) -> None:
    from textual.widgets import DataTable

    from fleettool.tui.app import FleetTui
    from fleettool.tui.screens import ConfirmScreen, DetailScreen
    from fleettool.tui.source import Source

    lost = _alert_id(db, "gpu-21")

    async def go() -> None:
        app = FleetTui(Source(db=db), refresh_s=0.3, first="alerts")
        async with app.run_test(size=(160, 48)) as pilot:
            table = app.query_one("#alerts", DataTable)
            await _settle(pilot, lambda: table.row_count == 3)
            # one key at a time until the selection is on it: a refresh (every 0.3 s) that lands between a key
            # and its cursor event puts the selection back where it was (a loaded CI box lost a key so)
            for _ in range(12):
                if app.selected_id == lost:
                    break
                await pilot.press("down")
                await pilot.pause(0.1)
            assert app.selected_id == lost
            for key in ("s", "r", "a"):
                await pilot.press(key)
                await _settle(pilot, lambda: isinstance(app.screen, ConfirmScreen))
                await pilot.press("n" if key != "a" else "escape")
                await _settle(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
            await pilot.press("enter")
            await _settle(pilot, lambda: isinstance(app.screen, DetailScreen))
            assert app.screen.alert_id == lost  # type: ignore[attr-defined]
            await pilot.pause(0.7)
            await pilot.press("escape")
            await _settle(pilot, lambda: not isinstance(app.screen, DetailScreen))
            await pilot.pause(0.7)
            assert app.selected_id == lost and table.cursor_row == [
                r["alert_id"] for r in app.visible_rows()
            ].index(lost)
            # a filter that keeps it: the cursor stays on it
            await pilot.press("slash", *"gpu-", "enter")
            await _settle(pilot, lambda: app.selected_id == lost)

    asyncio.run(go())
    from fleettool.store import Store

    assert _acks(db) == []
    with Store(db, read_only=True) as st:
        assert st.scalar("SELECT count(*) FROM silences") == 0


def test_a_write_waits_for_a_read_in_progress(db: Path) -> None:
    """DuckDB refuses a read-write connection in a process that has the file open read-only (at once, nothing
    to wait on); the app's workers take turns, so an ack pressed during a refresh's read is written after it."""
    import threading
    import time

    from fleettool.tui.source import Source

    src = Source(db=db)
    reading = threading.Event()
    done: list[str] = []

    def read() -> None:
        with src.open() as st:
            reading.set()
            time.sleep(0.5)
            done.append(str(st.scalar("SELECT count(*) FROM alerts")))

    t = threading.Thread(target=read)
    t.start()
    assert reading.wait(5)
    with src.open_rw() as st:  # waits for the read, then writes
        st.execute("INSERT INTO alert_acks VALUES ('x', 'ack', now()::TIMESTAMP, NULL, 't', 'r')")
        assert done == ["3"]
    t.join(5)
    assert _acks(db) == [("x", "ack")]
