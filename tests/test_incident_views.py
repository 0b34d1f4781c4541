"""The views of incidents (issue 30 item 4): the TUI opens on the incidents, root first, Enter shows one incident's
members grouped by node with counts, l the alert list (only that incident's alerts; Esc: all of them) with its
actions; a store with no incidents says so on the first screen; `alerts --json` names each alert's incident and
role; /metrics of a real agent process counts the store's incidents by scope, severity and state.

The store: a job crash written as kernel lines of 4 nodes x 8 GPUs (a dcgm-exporter scrape gives the GPU
indices), replayed for real: one XID 79 on gpu-41 GPU 0, then XID 45 on every other GPU. Its incidents are
written with the store's own replace_incidents: the job incident (root: the XID 79; members: the XID 45s of
gpu-41..gpu-43), a rootless teardown storm of gpu-44's GPUs 0-6, and gpu-44 GPU 7's alert in none.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import run_cli

pytest.importorskip("textual")

T0 = 1795996800  # 2026-11-30T00:00:00Z
PCIS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")
NODES = ("gpu-41", "gpu-42", "gpu-43", "gpu-44")
JOB, STORM = "inc-job-4711", "inc-storm-gpu-44"


def write_recording(rec: Path) -> None:
    rec.mkdir(parents=True)
    om = ["# TYPE DCGM_FI_DEV_GPU_TEMP gauge"]
    for n, node in enumerate(NODES):
        kern = []
        for g, p in enumerate(PCIS):
            uuid = f"GPU-{n:02d}{g:02d}0000-0000-0000-0000-000000000000"
            lab = (
                f'gpu="{g}",UUID="{uuid}",pci_bus_id="00000000:{p}:00.0",device="nvidia{g}",'
                f'modelName="NVIDIA H100 80GB HBM3",Hostname="{node}"'
            )
            om += [f"DCGM_FI_DEV_GPU_TEMP{{{lab}}} 40 {T0 + t}.000" for t in (0, 60)]
            kern.append(
                f"2026-11-30T00:00:0{g}+0000 {node} kernel: NVRM: GPU at PCI:0000:{p.lower()}:00: {uuid}"
            )
        if node == "gpu-41":
            kern.append(
                "2026-11-30T00:30:00+0000 gpu-41 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=86045, "
                "name=python3, GPU has fallen off the bus."
            )
        for g, p in enumerate(PCIS):
            if (node, g) != ("gpu-41", 0):
                kern.append(
                    f"2026-11-30T00:30:{10 + g:02d}+0000 {node} kernel: NVRM: Xid (PCI:0000:{p.lower()}:00): "
                    "45, pid=86045, name=python3, Ch 00000008"
                )
        (rec / f"kern-{node}.log").write_text("\n".join(kern) + "\n")
    (rec / "dcgm-exporter.om").write_text("\n".join([*om, "# EOF"]) + "\n")


def alerts_by(db: Path) -> dict[tuple[str, int | None], dict[str, Any]]:
    from fleettool.store import Store
    from fleettool.store.alerts import list_alerts

    with Store(db, read_only=True) as st:
        return {(a["node"], a["gpu"]): a for a in list_alerts(st)}


def write_incidents(db: Path) -> None:
    from fleettool.store import Store
    from fleettool.store.incidents import IncidentRecord, replace_incidents

    al = alerts_by(db)
    assert len(al) == 32, sorted(al)
    root = al[("gpu-41", 0)]
    job = {
        a["alert_id"]: ("member", "XID 45 on job 4711's nodes within 2 min after the root")
        for (node, _g), a in al.items()
        if node != "gpu-44" and a is not root
    }
    storm = {al[("gpu-44", g)]["alert_id"]: ("member", "XID 45 burst on gpu-44") for g in range(7)}
    records = [
        IncidentRecord(  # written second, listed second: the store orders, not the writer
            STORM, "node", "gpu-44", "firing", "info", False, "none", None, None, None, None,
            T0 + 1810, T0 + 1816, 1, 7, 7, "teardown storm: XID 45 on 7 GPUs of gpu-44",
            ["7 GPUs of gpu-44 with XID 45 within 10 s, no hardware root"], storm,
        ),
        IncidentRecord(
            JOB, "job", "4711", "firing", "critical", True, "reboot-node", root["alert_id"], "gpu-41", 0, 79,
            T0 + 1800, T0 + 1817, 3, 24, 24, "GPU 0 on gpu-41 fell off the bus; job 4711's 23 XID 45s follow",
            ["job 4711: 3 nodes within 2 min after the root", "XID 45 is a teardown XID"],
            {root["alert_id"]: ("root", "the fault"), **job},
        ),
    ]  # fmt: skip
    with Store(db) as st:
        assert replace_incidents(st, records) == 2


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("incviews")
    write_recording(base / "rec")
    p = base / "s.duckdb"
    r = run_cli("replay", str(base / "rec"), "--db", str(p), "-q")
    assert r.returncode == 0, r.stderr
    write_incidents(p)
    return p


async def _until(pilot: Any, cond: Callable[[], bool], tries: int = 200) -> None:
    for _ in range(tries):
        await pilot.pause(0.05)
        if cond():
            return
    raise AssertionError("the screen did not reach the expected state")


def _app(db: Path, **kw: Any) -> Any:
    from fleettool.tui.app import FleetTui
    from fleettool.tui.source import Source

    return FleetTui(Source(db=db), refresh_s=600, **kw)


def _row(table: Any, i: int) -> list[str]:
    return [str(c) for c in table.get_row_at(i)]


def test_tui_opens_on_incidents_root_first_and_fits_80_by_24(db: Path) -> None:
    from textual.widgets import DataTable, Static

    from fleettool.tui.screens import IncidentsScreen

    async def go() -> None:
        app = _app(db)
        async with app.run_test(size=(80, 24)) as pilot:
            await _until(pilot, lambda: isinstance(app.screen, IncidentsScreen))
            scr = app.screen
            t = scr.query_one("#incidents", DataTable)
            await _until(pilot, lambda: t.row_count == 2)
            await pilot.pause(0.1)
            assert [str(k.value) for k in t.rows] == [JOB, STORM]  # the root's incident first
            heads = [str(c.label) for c in t.columns.values()]
            assert heads == ["severity", "page", "scope", "root", "alerts", "summary"], heads
            widths = [c.get_render_width(t) for c in t.columns.values()]
            assert sum(widths) <= 80 - t.styles.scrollbar_size_vertical
            assert widths[-1] - 2 * t.cell_padding >= 30
            row = _row(t, 0)
            assert row[:5] == ["critical", "PAGE", "job", "gpu-41/0/79", "24"], row
            assert row[5].startswith("GPU 0 on gpu-41 fell off the b") and row[5].endswith("\u2026")
            assert _row(t, 1)[:5] == ["info", "-", "node", "-", "7"]
            assert not scr.query_one("#noincidents", Static).display
            status = str(scr.query_one("#incstatus", Static).render())
            assert status == "2 incidents, 2 open, 1 paged, 32 alerts (l)", status
            # the alert list's keys do nothing here: no alert is shown to act on
            for key in ("a", "s", "r", "n", "slash", "i"):
                await pilot.press(key)
                await pilot.pause(0.2)
                assert app.screen is scr and len(app.screen_stack) == 2, key
            await pilot.resize_terminal(200, 40)
            await _until(pilot, lambda: len(t.columns) == 11)
            assert _row(t, 0)[4] == "4711" and _row(t, 0)[6:9] == ["3", "24", "24"]

    asyncio.run(go())


def test_enter_shows_members_by_node_and_l_the_incidents_alerts_with_their_actions(db: Path) -> None:
    from textual.widgets import DataTable, Static

    from fleettool.tui.screens import IncidentScreen, IncidentsScreen, NodeScreen

    async def go() -> None:
        app = _app(db)
        async with app.run_test(size=(160, 40)) as pilot:
            await _until(pilot, lambda: isinstance(app.screen, IncidentsScreen))
            t = app.screen.query_one("#incidents", DataTable)
            await _until(pilot, lambda: t.row_count == 2)
            await pilot.press("enter")
            await _until(pilot, lambda: isinstance(app.screen, IncidentScreen))
            scr = app.screen
            m = scr.query_one("#members", DataTable)
            await _until(pilot, lambda: m.row_count == 3)
            assert [str(c.label) for c in m.columns.values()] == [
                "node",
                "root",
                "alerts",
                "GPUs",
                "rules",
                "why",
            ]
            rows = [_row(m, i) for i in range(3)]
            assert [r[:4] for r in rows] == [
                ["gpu-41", "GPU 0", "8", "0-7"],  # the root's node first: the root and its 7 members
                ["gpu-42", "", "8", "0-7"],
                ["gpu-43", "", "8", "0-7"],
            ]
            assert rows[0][4] == "GpuXid×8" and rows[1][5].startswith("XID 45 on job 4711's nodes")
            head = str(scr.query_one("#inchead", Static).render())
            assert "root: gpu-41 GPU 0 XID 79" in head and "PAGED" in head and "job 4711" in head, head
            assert "because job 4711: 3 nodes within 2 min after the root" in head
            assert str(scr.query_one("#memstatus", Static).render()).startswith(
                "3 nodes, 24 alerts (1 root, 23 members)"
            )
            await pilot.press("down", "enter")  # a node's row opens the node
            await _until(pilot, lambda: isinstance(app.screen, NodeScreen))
            assert app.screen.node == "gpu-42"  # type: ignore[attr-defined]
            await pilot.press("escape")
            await _until(pilot, lambda: isinstance(app.screen, IncidentScreen))
            await pilot.press("l")  # this incident's alerts, in the alert list itself
            alerts = app.query_one("#alerts", DataTable)
            await _until(pilot, lambda: alerts.row_count == 24)
            summaries = [str(alerts.get_row_at(i)[-1]) for i in range(24)]  # the root first (worst first)
            assert not summaries[0].startswith("↳") and all(s.startswith("↳ GPU ") for s in summaries[1:])
            assert app.rows and {r["node"] for r in app.visible_rows()} == {"gpu-41", "gpu-42", "gpu-43"}
            status = str(app.query_one("#status", Static).render())
            assert status.startswith(f"24 alerts of incident {JOB} (Esc: all 32), 24 firing"), status
            await pilot.press("a", "y")  # the list's actions act on the alert shown: the root, worst first
            await _until(pilot, lambda: any(r["acknowledged"] for r in app.rows))
            acked = [r for r in app.rows if r["acknowledged"]]
            assert [(r["node"], r["gpu"]) for r in acked] == [("gpu-41", 0)]
            await pilot.press("escape")
            await _until(pilot, lambda: alerts.row_count == 32)
            await pilot.press("i")  # the incidents again
            await _until(pilot, lambda: isinstance(app.screen, IncidentsScreen))

    asyncio.run(go())


def test_a_store_without_incidents_says_so_and_the_alerts_are_one_key_away(tmp_path: Path) -> None:
    from textual.widgets import DataTable, Static

    from fleettool.store import Store
    from fleettool.store.incidents import replace_incidents
    from fleettool.tui.screens import IncidentsScreen

    write_recording(tmp_path / "rec")
    p = tmp_path / "none.duckdb"
    assert run_cli("replay", str(tmp_path / "rec"), "--db", str(p), "-q").returncode == 0
    with Store(p) as st:
        replace_incidents(st, [])  # nothing folded

    async def go() -> None:
        app = _app(p)
        async with app.run_test(size=(80, 24)) as pilot:
            await _until(pilot, lambda: isinstance(app.screen, IncidentsScreen))
            note = app.screen.query_one("#noincidents", Static)
            await _until(pilot, lambda: bool(note.display) and "32 alerts" in str(note.render()))
            assert str(note.render()).startswith("No incidents in this store")
            assert "Press l for the alert list" in str(note.render())
            await pilot.press("l")
            await _until(pilot, lambda: app.query_one("#alerts", DataTable).row_count == 32)

    asyncio.run(go())


def test_a_fleet_location_shows_its_alerts_folded_into_incidents(db: Path, tmp_path: Path) -> None:
    """`tui --fleet`: the exported segments hold alerts; the fleet source folds them at each load, so the first
    screen lists the fleet's incidents (as many as the fold gives over the same alerts) and l the 32 alerts."""
    from textual.widgets import DataTable, Static

    from fleettool.incidents.fold import fold_incidents
    from fleettool.incidents.inputs import load
    from fleettool.store import Store
    from fleettool.tui.app import FleetTui
    from fleettool.tui.screens import IncidentsScreen
    from fleettool.tui.source import Source

    fleet = tmp_path / "fleet"
    assert run_cli("export", "--db", str(db), "--to", str(fleet)).returncode == 0
    with Store(db, read_only=True) as st:
        folded = len(fold_incidents(*load(st)))
    assert folded >= 1

    async def go() -> None:
        app = FleetTui(Source(fleet=str(fleet)), refresh_s=600)
        async with app.run_test(size=(80, 24)) as pilot:
            await _until(pilot, lambda: isinstance(app.screen, IncidentsScreen))
            table = app.screen.query_one("#incidents", DataTable)
            await _until(pilot, lambda: table.row_count == folded)
            assert not app.screen.query_one("#noincidents", Static).display
            await pilot.press("l")
            await _until(pilot, lambda: app.query_one("#alerts", DataTable).row_count == 32)

    asyncio.run(go())


def test_alerts_json_names_each_alerts_incident_and_role_and_the_table_marks_members(db: Path) -> None:
    r = run_cli("alerts", "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr
    got = {(a["node"], a["gpu"]): (a["incident"], a["incident_role"]) for a in json.loads(r.stdout)}
    assert got[("gpu-41", 0)] == (JOB, "root")
    assert got[("gpu-43", 5)] == (JOB, "member")
    assert got[("gpu-44", 3)] == (STORM, "member")
    assert got[("gpu-44", 7)] == (None, None)  # in no incident: null, the key still there
    assert sum(1 for v in got.values() if v[1] == "member") == 30

    table = run_cli("alerts", "--db", str(db), env={"COLUMNS": "80"}).stdout.splitlines()
    assert all(len(ln) <= 80 for ln in table)
    assert table[0].split() == ["ALERT_ID", "RULE", "SEVERITY", "NODE", "GPU", "SUMMARY"]  # none new at 80
    by_gpu = {" ".join(ln.split()[3:5]): ln for ln in table[1:]}  # node and GPU
    assert "↳" not in by_gpu["gpu-41 0"] and "↳ GPU 5 on gpu-43" in by_gpu["gpu-43 5"]
    assert "↳" not in by_gpu["gpu-44 7"]


def _incident_series(text: str) -> dict[tuple[str, str, str], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "fleettool_incidents":
                out[(s.labels["scope"], s.labels["severity"], s.labels["state"])] = s.value
                assert s.labels["Hostname"] == "inc-agent"
    return out


def test_metrics_of_a_real_agent_count_the_stores_incidents(db: Path, tmp_path: Path) -> None:
    import shutil

    from fleettool.store import Store
    from fleettool.store.incidents import incident_counts
    from tests.test_agent import AgentProcess

    store = tmp_path / "agent.duckdb"
    shutil.copy(db, store)
    args = ("--db", str(store), "--node", "inc-agent", "--source", "fake", "--kmsg", "off")
    with AgentProcess(*args, "--dcgm-exporter", "off", "--interval", "1s", "--flush", "1s") as ag:
        body = ag.wait_metrics("fleettool_incidents{")
        code, err, _ = ag.stop()
    assert code == 0, err
    scraped = _incident_series(body)
    with Store(store, read_only=True) as st:
        stored = incident_counts(st)
    assert scraped == {k: float(v) for k, v in stored.items()} and scraped, (scraped, stored)


def test_the_replayed_job_crash_is_one_incident_root_first_with_its_symptoms_counted(tmp_path: Path) -> None:
    """The same recording with its Slurm job (sacct --parsable2: job 4711 on gpu-[41-44]) replayed, folded by
    fleettool's own fold: the first screen has one incident, the job's, its root the XID 79, its 31 symptoms
    counted under it by node; alerts --json puts every alert in it."""
    from textual.widgets import DataTable

    from fleettool.tui.screens import IncidentScreen, IncidentsScreen

    write_recording(tmp_path / "rec")
    (tmp_path / "rec" / "sacct.txt").write_text(
        "JobID|JobName|NodeList|Start|End|State\n"
        "4711|llama-pretrain|gpu-[41-44]|2026-11-30T00:05:00|2026-11-30T00:30:20|NODE_FAIL\n"
    )
    p = tmp_path / "job.duckdb"
    r = run_cli("replay", str(tmp_path / "rec"), "--db", str(p), "-q")
    assert r.returncode == 0, r.stderr

    async def go() -> None:
        app = _app(p)
        async with app.run_test(size=(80, 24)) as pilot:
            await _until(pilot, lambda: isinstance(app.screen, IncidentsScreen))
            t = app.screen.query_one("#incidents", DataTable)
            await _until(pilot, lambda: t.row_count == 1)
            assert _row(t, 0)[:5] == ["critical", "PAGE", "job", "gpu-41/0/79", "32"], _row(t, 0)
            await pilot.press("enter")
            await _until(pilot, lambda: isinstance(app.screen, IncidentScreen))
            m = app.screen.query_one("#members", DataTable)
            await _until(pilot, lambda: m.row_count == 4)
            rows = [_row(m, i)[:3] for i in range(4)]
            assert rows == [
                ["gpu-41", "GPU 0", "8"],
                ["gpu-42", "", "8"],
                ["gpu-43", "", "8"],
                ["gpu-44", "", "8"],
            ]

    asyncio.run(go())
    got = json.loads(run_cli("alerts", "--db", str(p), "--json").stdout)
    roles = sorted((a["incident_role"], a["node"], a["gpu"]) for a in got if a["incident_role"] == "root")
    assert roles == [("root", "gpu-41", 0)] and len({a["incident"] for a in got}) == 1
    assert sum(1 for a in got if a["incident_role"] == "member") == 31


def test_the_noise_benchs_64_node_job_crash_is_one_row_with_511_symptoms_under_its_root(
    tmp_path: Path,
) -> None:
    """Issue 30's "done when": bench/noise's job-crash-64 fixture (one XID 79, 511 teardown XIDs on 64 nodes)
    replayed; the TUI opens on one incident, root first, and Enter counts the 511 symptoms under it by node."""
    from textual.widgets import DataTable, Static

    from fleettool.tui.screens import IncidentScreen, IncidentsScreen

    fixture = Path(__file__).resolve().parent.parent / "bench" / "noise" / "fixtures" / "job-crash-64"
    p = tmp_path / "jc.duckdb"
    r = run_cli("replay", str(fixture), "--db", str(p), "-q")
    assert r.returncode == 0, r.stderr

    async def go() -> None:
        app = _app(p)
        async with app.run_test(size=(80, 24)) as pilot:
            await _until(pilot, lambda: isinstance(app.screen, IncidentsScreen))
            t = app.screen.query_one("#incidents", DataTable)
            await _until(pilot, lambda: t.row_count >= 1)
            assert _row(t, 0)[:5] == ["critical", "PAGE", "job", "gpu-017/-/79", "512"], _row(t, 0)
            await pilot.press("enter")
            await _until(pilot, lambda: isinstance(app.screen, IncidentScreen))
            m = app.screen.query_one("#members", DataTable)
            await _until(pilot, lambda: m.row_count == 64)
            assert _row(m, 0)[:4] == [
                "gpu-017",
                "root",
                "8",
                "-",
            ]  # the root's node first (no GPU indices here)
            status = str(app.screen.query_one("#memstatus", Static).render())
            assert status.startswith("64 nodes, 512 alerts (1 root, 511 members)"), status

    asyncio.run(go())


def test_snapshot_incidents_at_80_by_24(db: Path, snap_compare: Any) -> None:
    """The first screen as an on-call engineer sees it at 80 x 24 (golden in tests/__snapshots__)."""

    async def run_before(pilot: Any) -> None:
        from fleettool.tui.screens import IncidentsScreen

        await _until(pilot, lambda: isinstance(pilot.app.screen, IncidentsScreen))
        await _until(pilot, lambda: pilot.app.screen.query_one("#incidents").row_count == 2)
        await pilot.wait_for_scheduled_animations()
        await pilot.pause(0.3)

    assert snap_compare(_app(db, clock=False), terminal_size=(80, 24), run_before=run_before)


def test_snapshot_incident_members_at_80_by_24(db: Path, snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        from fleettool.tui.screens import IncidentScreen, IncidentsScreen

        await _until(pilot, lambda: isinstance(pilot.app.screen, IncidentsScreen))
        await _until(pilot, lambda: pilot.app.screen.query_one("#incidents").row_count == 2)
        await pilot.press("enter")
        await _until(pilot, lambda: isinstance(pilot.app.screen, IncidentScreen))
        await _until(pilot, lambda: pilot.app.screen.query_one("#members").row_count == 3)
        await pilot.wait_for_scheduled_animations()
        await pilot.pause(0.3)

    assert snap_compare(_app(db, clock=False), terminal_size=(80, 24), run_before=run_before)
