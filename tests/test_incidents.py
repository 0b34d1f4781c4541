"""Incidents above alerts (fleettool/incidents/): each fault once, causes first, judged the same whole and as the
agent judges. Recordings are written here in the kernel log's own format (the XID lines as the driver prints them,
copied in shape from real lines: `NVRM: Xid (PCI:0000:44:00): 79, pid='<unknown>', name=<unknown>, GPU has
fallen off the bus.`), with the cluster's own files beside them (sacct --parsable2, Slurm topology.conf)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fleettool.agent.as_agent import judge
from fleettool.cli import app
from fleettool.engine.evaluate import evaluate, write_alerts
from fleettool.engine.rules import load_rules
from fleettool.ingest.report import IngestOptions
from fleettool.ingest.run import ingest
from fleettool.store import Store
from fleettool.store.incidents import incident_members, list_incidents

RULES = load_rules()
T0 = dt.datetime(2026, 12, 1, 3, 0, 0)
PCIS = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]
MSG = {
    79: "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    48: "pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the "
    "framebuffer at partition 6, subpartition 0.",
    45: "pid={pid}, name=python3, Ch 00000010",
    13: "pid={pid}, name=python3, Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0): Out Of Range Address",
    149: "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000 0x00000000 0x00000000 0x00000000 "
    "0x00000000)",
    145: "RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)",
}


def line(t: float, node: str, gpu: int, code: int, suffix: str = "") -> str:
    ts = (T0 + dt.timedelta(seconds=t)).strftime("%Y-%m-%dT%H:%M:%S")
    msg = MSG[code].format(pid=40000 + gpu)
    return f"{ts}+0000 {node} kernel: NVRM: Xid (PCI:0000:{PCIS[gpu]}:00): {code}, {msg}{suffix}\n"


def write(rec: Path, lines: dict[str, list[str]], files: dict[str, str] | None = None) -> Path:
    rec.mkdir(parents=True, exist_ok=True)
    for node, ls in lines.items():
        (rec / f"kern-{node}.log").write_text("".join(ls))
    for name, text in (files or {}).items():
        (rec / name).write_text(text)
    return rec


def sacct(*jobs: tuple[str, ...]) -> str:
    return "JobID|JobName|NodeList|Start|End|State\n" + "".join("|".join(j) + "\n" for j in jobs)


def job_crash(rec: Path, nodes: int = 8) -> Path:
    """One XID 79 on gpu-01 GPU 0, then XID 45 on every other GPU of the job's nodes within a minute."""
    lines: dict[str, list[str]] = {}
    for n in range(1, nodes + 1):
        node = f"gpu-{n:02d}"
        lines[node] = [
            line(0, node, g, 79) if (n, g) == (1, 0) else line(20 + n + g, node, g, 45) for g in range(8)
        ]
    job = (
        "4711",
        "train",
        f"gpu-[01-{nodes:02d}]",
        "2026-12-01T02:00:00",
        "2026-12-01T03:01:00",
        "NODE_FAIL",
    )
    return write(rec, lines, {"sacct.txt": sacct(job)})


def replayed(rec: Path, tmp: Path, *, as_agent: bool = False) -> Store:
    store = Store(str(tmp / ("agent.duckdb" if as_agent else "whole.duckdb")))
    ingest(store, rec, IngestOptions(quiet=True))
    if as_agent:
        judge(store, RULES)
    else:
        write_alerts(store, evaluate(store, RULES))
    return store


def cli(*args: str) -> Any:
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout) if "--json" in args else res.stdout


def test_a_job_crash_is_one_incident_rooted_at_its_hardware_xid(tmp_path: Path) -> None:
    rec = job_crash(tmp_path / "rec")
    store = replayed(rec, tmp_path)
    n_alerts = store.scalar("SELECT count(*) FROM alerts")
    store.close()
    assert n_alerts == 64
    got = cli("incidents", "--db", str(tmp_path / "whole.duckdb"), "--json")
    assert len(got) == 1, got
    inc = got[0]
    assert inc["page"] is True and inc["severity"] == "critical"
    assert inc["scope"] == "job" and inc["key"] == "4711"
    assert inc["root"]["node"] == "gpu-01" and inc["root"]["code"] == 79
    assert inc["root"]["pci_bus_id"] == "00000000:18:00.0"
    assert (inc["nodes"], inc["gpus"], inc["alerts"]) == (8, 64, 64)
    assert any(b.startswith("job 4711: XID 45 on") for b in inc["because"]), inc["because"]
    # every member is in the store with its role and why; the alert list names each alert's incident
    with Store(str(tmp_path / "whole.duckdb"), read_only=True) as s:
        members = incident_members(s, inc["id"])
    assert [m["role"] for m in members].count("root") == 1 and members[0]["role"] == "root"
    assert len(members) == 64 and all(m["reason"] for m in members)


def test_the_agent_and_a_whole_replay_fold_the_same_incidents(tmp_path: Path) -> None:
    rec = job_crash(tmp_path / "rec", nodes=4)

    def shape(store: Store) -> list[tuple[Any, ...]]:
        rows = list_incidents(store)
        return [(r["scope"], r["key"], r["root_node"], r["root_code"], r["alerts"], r["page"]) for r in rows]

    whole = replayed(rec, tmp_path)
    agent = replayed(rec, tmp_path, as_agent=True)
    assert shape(whole) == shape(agent) == [("job", "4711", "gpu-01", 79, 32, True)]


def test_a_teardown_storm_without_a_hardware_root_is_one_quiet_incident(tmp_path: Path) -> None:
    lines = {
        f"gpu-{n:02d}": [line(10 * k + g, f"gpu-{n:02d}", g, 45) for k in range(5) for g in range(8)]
        for n in range(1, 4)
    }
    job = ("5000", "llm", "gpu-[01-03]", "2026-12-01T01:00:00", "2026-12-01T03:00:30", "CANCELLED by 1000")
    store = replayed(write(tmp_path / "rec", lines, {"sacct.txt": sacct(job)}), tmp_path)
    got = list_incidents(store)
    assert len(got) == 1
    assert (got[0]["scope"], got[0]["key"], got[0]["severity"], got[0]["page"]) == (
        "job",
        "5000",
        "info",
        False,
    )
    assert got[0]["root_alert"] is None and got[0]["action"] == "none" and got[0]["alerts"] == 24


def test_two_independent_hardware_faults_keep_their_own_roots(tmp_path: Path) -> None:
    lines = {"gpu-01": [line(0, "gpu-01", 0, 48)], "gpu-02": [line(3600, "gpu-02", 5, 79)]}
    job = ("6000", "llm", "gpu-[01-02]", "2026-12-01T01:00:00", "2026-12-01T05:00:00", "RUNNING")
    store = replayed(write(tmp_path / "rec", lines, {"sacct.txt": sacct(job)}), tmp_path)
    got = list_incidents(store)
    assert sorted((r["root_node"], r["root_code"], r["page"]) for r in got) == [
        ("gpu-01", 48, True),
        ("gpu-02", 79, True),
    ]


def test_the_drivers_caused_by_previous_xid_folds_across_gpus_of_a_node(tmp_path: Path) -> None:
    ls = [line(0, "gpu-01", 2, 149)] + [
        line(5 + g, "gpu-01", g, 45, " caused by previous Xid 149") for g in range(8) if g != 2
    ]
    store = replayed(write(tmp_path / "rec", {"gpu-01": ls}), tmp_path)
    got = list_incidents(store)
    assert len(got) == 1 and got[0]["root_code"] == 149 and got[0]["alerts"] == 8, got
    assert any("caused by previous Xid 149" in b for b in got[0]["because"]), got[0]["because"]


def test_xid_145_across_an_nvlink_domain_folds_under_the_149_before_it(tmp_path: Path) -> None:
    nodes = [f"r06-{i:02d}" for i in range(1, 17)]
    lines = {nodes[0]: [line(0, nodes[0], 0, 149)]}
    for i, node in enumerate(nodes):
        lines.setdefault(node, []).extend(
            line(30 + i * 4 + g, node, g, 145) for g in range(4) if (i, g) != (0, 0)
        )
    lines["r07-01"] = [line(40, "r07-01", 0, 145)]  # another domain: not a symptom of r06's fault
    topo = "BlockName=r06 Nodes=r06-[01-16]\nBlockName=r07 Nodes=r07-[01-16]\nBlockSizes=16\n"
    store = replayed(write(tmp_path / "rec", lines, {"topology.conf": topo}), tmp_path)
    got = list_incidents(store)
    rooted = [r for r in got if r["root_code"] == 149]
    assert len(rooted) == 1, got
    r = rooted[0]
    assert (r["scope"], r["key"], r["nodes"], r["alerts"]) == ("nvlink-domain", "r06", 16, 64)
    assert not any(r["root_node"] == "r07-01" and r["root_code"] == 149 for r in got)
    assert any(r["root_node"] == "r07-01" and r["root_code"] == 145 for r in got)


def test_planned_work_never_pages(tmp_path: Path) -> None:
    rec = write(tmp_path / "rec", {"gpu-01": [line(0, "gpu-01", 0, 79)]})
    store = Store(str(tmp_path / "p.duckdb"))
    store.execute(
        "INSERT INTO node_audit (ts, node, from_state, to_state, who, reason) "
        "VALUES (TIMESTAMP '2026-12-01 02:00:00', 'gpu-01', 'healthy', 'cordoned', 'alice', 'firmware update')"
    )
    ingest(store, rec, IngestOptions(quiet=True))
    write_alerts(store, evaluate(store, RULES))
    got = list_incidents(store)
    assert len(got) == 1 and got[0]["severity"] == "critical" and got[0]["page"] is False
    assert any(b.startswith("planned:") for b in got[0]["because"])


@pytest.mark.parametrize("state", ["firing", "resolved"])
def test_incidents_state_filter_and_show(tmp_path: Path, state: str) -> None:
    job_crash(tmp_path / "rec", nodes=2)
    replayed(tmp_path / "rec", tmp_path).close()
    db = str(tmp_path / "whole.duckdb")
    got = cli("incidents", "--db", db, "--state", state, "--json")
    assert len(got) == (1 if state == "firing" else 0)
    if got:
        out = cli("incidents", "show", got[0]["id"][:6], "--db", db)
        assert "gpu-01 (root): 8 alerts" in out and "gpu-02: 8 alerts" in out


def test_a_maintenance_window_given_as_a_silence_with_a_reason_never_pages(tmp_path: Path) -> None:
    rec = write(
        tmp_path / "rec", {"gpu-01": [line(0, "gpu-01", 0, 79)], "gpu-02": [line(7200, "gpu-02", 0, 79)]}
    )
    db = str(tmp_path / "m.duckdb")
    Store(db).close()
    # a window over gpu-01 from 02:30 for an hour, given (as a person would) before the replay
    sid = CliRunner().invoke(
        app,
        [
            "silence",
            "add",
            "--db",
            db,
            "--node",
            "gpu-01",
            "--start",
            "2026-12-01T02:30:00Z",
            "--for",
            "1h",
            "-m",
            "rack rk07 firmware",
        ],
    )
    assert sid.exit_code == 0, sid.output
    with Store(db) as store:
        ingest(store, rec, IngestOptions(quiet=True))
        write_alerts(store, evaluate(store, RULES))
        got = {r["root_node"]: r for r in list_incidents(store)}
    assert got["gpu-01"]["page"] is False and any(b.startswith("planned:") for b in got["gpu-01"]["because"])
    assert got["gpu-02"]["page"] is True  # after the window, on another node: pages
    bad = CliRunner().invoke(app, ["silence", "add", "--db", db, "--node", "x", "--start", "yesterday"])
    assert bad.exit_code == 2 and "--start" in bad.output


def test_sacct_in_the_clusters_time_zone_links_the_job_with_tz(tmp_path: Path) -> None:
    """sacct prints the cluster's local time: at -0800 read as UTC the job misses its teardown; --tz fixes it."""
    lines = {
        n: [line(0, n, 0, 79)] if n == "gpu-01" else [line(20 + g, n, g, 45) for g in range(4)]
        for n in ("gpu-01", "gpu-02")
    }
    # the job as a Los Angeles cluster's sacct prints it (03:00Z is 19:00 the day before there)
    job = ("7000", "llm", "gpu-[01-02]", "2026-11-30T18:00:00", "2026-11-30T19:01:00", "NODE_FAIL")
    rec = write(tmp_path / "rec", lines, {"sacct.txt": sacct(job)})
    for tz, want in ((None, 2), ("America/Los_Angeles", 1)):
        db = str(tmp_path / f"{tz is None}.duckdb")
        args = ["replay", str(rec), "--db", db, "-q"] + (["--tz", tz] if tz else [])
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, res.output
        got = cli("incidents", "--db", db, "--json")
        assert len(got) == want, got
    assert got[0]["scope"] == "job" and got[0]["key"] == "7000" and got[0]["alerts"] == 5
    bad = CliRunner().invoke(
        app, ["replay", str(rec), "--db", str(tmp_path / "x.duckdb"), "--tz", "Mars/Olympus"]
    )
    assert bad.exit_code == 2 and "--tz" in bad.output


def test_silence_list_shows_a_window_given_ahead(tmp_path: Path) -> None:
    db = str(tmp_path / "s.duckdb")
    Store(db).close()
    res = CliRunner().invoke(
        app,
        ["silence", "add", "--db", db, "--node", "gpu-01", "--start", "2099-01-01T00:00:00Z", "-m", "later"],
    )
    assert res.exit_code == 0, res.output
    rows = cli("silence", "list", "--db", db, "--json")
    assert [(r["node"], r["starts"]) for r in rows] == [("gpu-01", "2099-01-01T00:00:00Z")]
