"""Incidents across the fleet (`fleettool fleet incidents`): each agent judges its own node and exports its store to
S3 (moto's server mode); the fleet's fold of every node's alerts, with the topology, jobs and silences the agents
export beside them, gives the incidents a replay of the whole recording into one store gives. Incremental: a
second run reads only the segments exported since. Recordings come from tests/test_incidents.py's generator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
from typer.testing import CliRunner

from fleettool.agent.as_agent import judge
from fleettool.cli import app
from fleettool.engine.evaluate import evaluate, write_alerts
from fleettool.fleet import segments
from fleettool.fleet.location import open_location
from fleettool.ingest.report import IngestOptions
from fleettool.ingest.run import ingest
from fleettool.store import Store
from tests.test_fleet import s3  # noqa: F401  (the moto server fixture)
from tests.test_incidents import RULES, job_crash, line, write

NOW = 1_900_000_000.0  # after the recordings: every hour is whole
URL = "s3://gpu-fleet/segments"


def _bucket(endpoint: str) -> None:
    admin = pafs.S3FileSystem(
        endpoint_override=endpoint.split("//")[1],
        scheme="http",
        access_key="test",
        secret_key="test",
        region="us-east-1",
        allow_bucket_creation=True,
    )
    admin.create_dir("gpu-fleet")


def _split(rec: Path, out: Path) -> dict[str, Path]:
    """One recording directory per node: its own kernel log, and the cluster's files (sacct, topology.conf) that
    every agent reads."""
    shared = [p for p in rec.iterdir() if not p.name.startswith("kern-")]
    dirs = {}
    for log in sorted(rec.glob("kern-*.log")):
        node = log.name[len("kern-") : -len(".log")]
        d = out / node
        d.mkdir(parents=True)
        (d / log.name).write_text(log.read_text())
        for f in shared:
            (d / f.name).write_text(f.read_text())
        dirs[node] = d
    return dirs


def _agent(d: Path, db: Path, silence: str | None = None) -> Store:
    store = Store(str(db))
    if silence:  # a maintenance window: any alert of this agent's store, with its reason
        store.execute(
            "INSERT INTO silences VALUES ('mw1', NULL, NULL, NULL, NULL, TIMESTAMP '2026-12-01 00:00:00', "
            "TIMESTAMP '2026-12-02 00:00:00', 'alice', ?)",
            [silence],
        )
    ingest(store, d, IngestOptions(quiet=True))
    judge(store, RULES)
    return store


def _export(dirs: dict[str, Path], tmp: Path, nodes: list[str], **silences: str) -> None:
    loc = open_location(URL)
    for node in nodes:
        with _agent(dirs[node], tmp / f"{node}.duckdb", silences.get(node.replace("-", "_"))) as st:
            segments.export(st, loc, node, NOW)


def _whole(rec: Path, tmp: Path) -> Path:
    db = tmp / "whole.duckdb"
    with Store(str(db)) as store:
        ingest(store, rec, IngestOptions(quiet=True))
        write_alerts(store, evaluate(store, RULES))
    return db


def _cli(*args: str) -> tuple[Any, str]:
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout), res.stderr


def _shape(incidents: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted(
        (
            i["scope"],
            i["key"],
            i["root"] and (i["root"]["node"], i["root"]["gpu"], i["root"]["pci_bus_id"], i["root"]["code"]),
            i["nodes"],
            i["gpus"],
            i["alerts"],
            i["page"],
            i["severity"],
            i["state"],
        )
        for i in incidents
    )


def test_fleet_incidents_over_s3_equal_a_whole_replay_and_read_only_new_segments(
    s3: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    _bucket(s3)
    rec = job_crash(tmp_path / "rec", nodes=4)
    dirs = _split(rec, tmp_path / "nodes")
    cache = tmp_path / "cache"
    # three agents export first: the job's crash, rooted on gpu-01's XID 79, on the nodes seen so far
    _export(dirs, tmp_path, ["gpu-01", "gpu-02", "gpu-03"])
    first, err = _cli("fleet", "incidents", "--fleet", URL, "--cache", str(cache), "--json")
    assert _shape(first) == [
        ("job", "4711", ("gpu-01", None, "00000000:18:00.0", 79), 3, 24, 24, True, "critical", "firing")
    ]
    assert "read 6 of 6 segments (0 cached" in err, err  # alerts and jobs of each of the three
    # the fourth exports: the next run reads its segments only, and the incidents are the whole replay's
    _export(dirs, tmp_path, ["gpu-04"])
    listed = open_location(URL, create=False).fs.get_file_info(pafs.FileSelector("gpu-fleet", recursive=True))
    fold_tables = ("alerts", "gpus", "node_topology", "jobs", "node_audit", "silences")
    new = [
        f
        for f in listed
        if f.type == pafs.FileType.File
        and "exporter=gpu-04" in f.path
        and f.path.split("/")[2] in fold_tables
    ]
    second, err = _cli("fleet", "incidents", "--fleet", URL, "--cache", str(cache), "--json")
    assert f"read {len(new)} of " in err and len(new) >= 2, (err, [f.path for f in new])
    whole, _ = _cli("incidents", "--db", str(_whole(rec, tmp_path)), "--json")
    assert _shape(second) == _shape(whole)
    assert _shape(whole) == [
        ("job", "4711", ("gpu-01", None, "00000000:18:00.0", 79), 4, 32, 32, True, "critical", "firing")
    ]
    assert second[0]["id"] == first[0]["id"]  # the same incident, grown
    # an agent exporting again with nothing new rewrites nothing, and nothing is read
    with Store(str(tmp_path / "gpu-01.duckdb")) as st:
        again = segments.export(st, open_location(URL), "gpu-01", NOW)
    assert again.segments == 0, again
    third, err = _cli("fleet", "incidents", "--fleet", URL, "--cache", str(cache), "--json")
    assert "read 0 of " in err and third == second
    # --evaluate folds the alerts the rules give over every node's data: the same incident
    ev, _ = _cli("fleet", "incidents", "--fleet", URL, "--cache", str(cache), "--evaluate", "--json")
    assert _shape(ev) == _shape(whole)


def test_an_nvlink_domain_fault_across_agents_folds_by_the_exported_topology(
    s3: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    _bucket(s3)
    nodes = [f"r06-{i:02d}" for i in range(1, 5)]
    lines = {nodes[0]: [line(0, nodes[0], 0, 149)]}
    for i, node in enumerate(nodes):
        lines.setdefault(node, []).extend(
            line(30 + i * 4 + g, node, g, 145) for g in range(4) if (i, g) != (0, 0)
        )
    topo = "BlockName=r06 Nodes=r06-[01-04]\nBlockSizes=4\n"
    rec = write(tmp_path / "rec", lines, {"topology.conf": topo})
    dirs = _split(rec, tmp_path / "nodes")
    _export(dirs, tmp_path, nodes)
    got, _ = _cli("fleet", "incidents", "--fleet", URL, "--no-cache", "--json")
    whole, _ = _cli("incidents", "--db", str(_whole(rec, tmp_path)), "--json")
    assert _shape(got) == _shape(whole)
    rooted = [i for i in got if i["root"] and i["root"]["code"] == 149]
    assert [(i["scope"], i["key"], i["nodes"], i["alerts"]) for i in rooted] == [
        ("nvlink-domain", "r06", 4, 16)
    ]


def test_a_maintenance_silence_is_planned_fleet_wide_for_its_own_agents_nodes_only(
    s3: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    _bucket(s3)
    lines = {"gpu-01": [line(0, "gpu-01", 0, 79)], "gpu-02": [line(3600, "gpu-02", 3, 79)]}
    dirs = _split(write(tmp_path / "rec", lines), tmp_path / "nodes")
    _export(dirs, tmp_path, ["gpu-01", "gpu-02"], gpu_01="rack rk07 maintenance window")
    got, _ = _cli("fleet", "incidents", "--fleet", URL, "--no-cache", "--json")
    by_node = {i["root"]["node"]: i for i in got}
    assert set(by_node) == {"gpu-01", "gpu-02"}
    assert by_node["gpu-01"]["page"] is False and any(
        b.startswith("planned:") for b in by_node["gpu-01"]["because"]
    )
    assert by_node["gpu-02"]["page"] is True


def test_bad_fleet_and_cache_are_named(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["fleet", "incidents", "--fleet", str(tmp_path / "nope")])
    assert res.exit_code == 3 and "nope" in res.stderr
    fleet = tmp_path / "fleet"
    (fleet / "alerts").mkdir(parents=True)
    (tmp_path / "file").write_text("x")
    res = CliRunner().invoke(
        app, ["fleet", "incidents", "--fleet", str(fleet), "--cache", str(tmp_path / "file")]
    )
    assert res.exit_code == 3 and "--cache" in res.stderr and "file" in res.stderr


def test_the_tui_fleet_source_yields_a_store_with_incidents(tmp_path: Path) -> None:
    from fleettool.store.incidents import list_incidents
    from fleettool.tui.source import Source

    rec = job_crash(tmp_path / "rec", nodes=2)
    dirs = _split(rec, tmp_path / "nodes")
    loc = open_location(str(tmp_path / "fleet"))
    for node, d in dirs.items():
        with _agent(d, tmp_path / f"{node}.duckdb") as st:
            segments.export(st, loc, node, NOW)
    with Source(fleet=str(tmp_path / "fleet")).open() as store:
        got = list_incidents(store)
    assert [(r["scope"], r["key"], r["root_node"], r["alerts"], r["nodes"]) for r in got] == [
        ("job", "4711", "gpu-01", 16, 2)
    ]


def test_each_exporters_copy_of_a_job_and_of_topology_reads_as_one_row_the_newest(tmp_path: Path) -> None:
    from fleettool.fleet.read import open_fleet

    loc = open_location(str(tmp_path / "fleet"))
    for who, end, rack in (("a", None, "rk01"), ("b", "2026-12-01 05:00:00", "rk07")):
        with Store(str(tmp_path / f"{who}.duckdb")) as st:
            st.execute(
                "INSERT INTO jobs VALUES ('4711', 'train', ['gpu-01', 'gpu-02'], TIMESTAMP '2026-12-01 02:00:00', "
                "?::TIMESTAMP, ?, NULL, ?)",
                [end, "RUNNING" if end is None else "COMPLETED", f"/etc/{who}/sacct.txt"],
            )
            st.execute(
                "INSERT INTO node_topology VALUES ('gpu-01', 'rack', ?, 'topology.csv', ?::TIMESTAMP)",
                [rack, "2026-12-01 01:00:00" if who == "a" else "2026-12-01 04:00:00"],
            )
            segments.export(st, loc, who, NOW)
    with open_fleet(str(tmp_path / "fleet")) as fl:
        jobs = fl.query("SELECT job_id, state, epoch(end_time) AS e FROM jobs")
        topo = fl.query("SELECT node, key, value FROM node_topology")
    assert jobs == [{"job_id": "4711", "state": "COMPLETED", "e": 1_796_101_200.0}]
    assert topo == [{"node": "gpu-01", "key": "rack", "value": "rk07"}]


def test_topology_given_to_the_fleet_command_folds_an_nvlink_domain_the_agents_did_not_know(
    tmp_path: Path,
) -> None:
    from fleettool.tui.source import Source

    nodes = [f"r06-{i:02d}" for i in range(1, 5)]
    lines = {nodes[0]: [line(0, nodes[0], 0, 149)]}
    for i, node in enumerate(nodes):
        lines.setdefault(node, []).extend(
            line(30 + i * 4 + g, node, g, 145) for g in range(4) if (i, g) != (0, 0)
        )
    dirs = _split(write(tmp_path / "rec", lines), tmp_path / "nodes")  # no topology beside the agents
    loc = open_location(str(tmp_path / "fleet"))
    for node, d in dirs.items():
        with _agent(d, tmp_path / f"{node}.duckdb") as st:
            segments.export(st, loc, node, NOW)
    topo = tmp_path / "topology.conf"
    topo.write_text("BlockName=r06 Nodes=r06-[01-04]\nBlockSizes=4\n")
    fleet = str(tmp_path / "fleet")
    bare, _ = _cli("fleet", "incidents", "--fleet", fleet, "--no-cache", "--json")
    assert not any(i["scope"] == "nvlink-domain" for i in bare)
    got, _ = _cli("fleet", "incidents", "--fleet", fleet, "--no-cache", "--topology", str(topo), "--json")
    rooted = [(i["scope"], i["key"], i["nodes"], i["alerts"]) for i in got if i["root"]]
    assert rooted == [("nvlink-domain", "r06", 4, 16)], got
    # the TUI's fleet source, with its --topology hook: the same incident
    from fleettool.cli.topology_opts import load_topology, topology_files
    from fleettool.store.incidents import list_incidents

    files = topology_files([topo], "topology.kubernetes.io/rack")
    with Source(fleet=fleet, prepare=lambda st: load_topology(st, files, quiet=True)).open() as store:
        tui = [
            (r["scope"], r["key"], r["nodes"], r["alerts"]) for r in list_incidents(store) if r["root_alert"]
        ]
    assert tui == rooted
