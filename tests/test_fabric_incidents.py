"""Leaf and domain incidents (issue 31, item 6), through the CLI: a recording with the cluster's topology.conf
and fleettool's own samples is replayed (`fleettool replay`, whole and `--as-agent`), then read back with
`fleettool incidents --json`.

- NIC faults (category nic, judged by the built-in rules/fabric.yaml: NicPortDown on a port that left ACTIVE,
  NicPortDropped when it stays down) on several nodes under one IB leaf within 60 s are ONE leaf incident keyed
  by the leaf: one page, no node cordoned or inspected.
- NVLink faults (category nvlink: NvlinkLinksFewer, NvlinkFabricUnhealthy) across nodes of one NVLink domain
  (topology.conf's block plugin) fold the same way into one nvlink-domain incident.
The samples are written in the recording format `fleettool record` writes (OpenMetrics, fleettool_<metric>,
seconds since the epoch)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fleettool.cli import app

T0 = dt.datetime(2026, 12, 1, 3, 0, 0, tzinfo=dt.timezone.utc).timestamp()
FATAL = {"reset-gpu", "reboot-node", "inspect-hardware"}  # what bench/noise/score.py counts as a node action

TREE = """# TopologyPlugin=topology/tree: 3 IB leaves of 8 nodes, one spine
SwitchName=leaf1 Nodes=gpu-[101-108]
SwitchName=leaf2 Nodes=gpu-[201-208]
SwitchName=leaf3 Nodes=gpu-[301-308]
SwitchName=spine1 Switches=leaf[1-3]
"""
BLOCKS = """# TopologyPlugin=topology/block: two GB200 NVLink domains of 8 trays
BlockName=r129 Nodes=r129-n[01-08]
BlockName=r130 Nodes=r130-n[01-08]
BlockSizes=8
"""


def om(node: str, series: dict[tuple[str, str], list[tuple[float, float]]]) -> str:
    """One node's samples in the recording's OpenMetrics form."""
    out = []
    for (metric, labels), points in series.items():
        out.append(f"# TYPE fleettool_{metric} gauge\n")
        lab = f'hostname="{node}"' + (f",{labels}" if labels else "")
        out += [f"fleettool_{metric}{{{lab}}} {v:g} {T0 + t:.3f}\n" for t, v in points]
    return "".join(out) + "# EOF\n"


def port(down_at: float | None = None, slow_at: float | None = None, end: float = 1500) -> dict[Any, Any]:
    """One port every 10 s: ACTIVE at 400 Gb/s, DOWN from `down_at`, at 200 Gb/s from `slow_at`."""
    ts = [float(t) for t in range(0, int(end) + 1, 10)]
    state = [(t, 1.0 if down_at is not None and t >= down_at else 4.0) for t in ts]
    rate = [(t, 200.0 if slow_at is not None and t >= slow_at else 400.0) for t in ts]
    return {("ib_port_state", 'port="mlx5_0/1"'): state, ("ib_port_rate_gbps", 'port="mlx5_0/1"'): rate}


def links(drop_at: float | None = None, mask_at: float | None = None, end: float = 1500) -> dict[Any, Any]:
    """GPU 0 of a GB200 tray every 30 s: 18 active NVLinks (16 from `drop_at`), a healthy fabric mask (0x1AA)
    that turns route-unhealthy (0x19A) from `mask_at`."""
    ts = [float(t) for t in range(0, int(end) + 1, 30)]
    n = [(t, 16.0 if drop_at is not None and t >= drop_at else 18.0) for t in ts]
    m = [(t, 410.0 if mask_at is not None and t >= mask_at else 426.0) for t in ts]
    return {("nvlink_links_active", 'gpu="0"'): n, ("nvlink_fabric_health_mask", 'gpu="0"'): m}


def recording(rec: Path, topology: str, nodes: dict[str, dict[Any, Any]]) -> Path:
    rec.mkdir(parents=True)
    (rec / "topology.conf").write_text(topology)
    for node, series in nodes.items():
        (rec / f"fleettool-{node}.om").write_text(om(node, series))
    return rec


def cli(*args: str) -> Any:
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout) if "--json" in args else res.stdout


def incidents(rec: Path, db: Path, *extra: str) -> list[dict[str, Any]]:
    cli("replay", str(rec), "--db", str(db), "-q", *extra)
    got: list[dict[str, Any]] = cli("incidents", "--db", str(db), "--json")
    return got


def leaf_fault(tmp: Path) -> Path:
    """leaf3's 8 nodes lose their port 5 s apart (35 s in all); gpu-101, on leaf1, loses its port alone 10
    minutes later; the other nodes are healthy."""
    nodes = {f"gpu-{leaf}0{i}": port() for leaf in (1, 2) for i in range(1, 9)}
    for i in range(1, 9):
        at = 300.0 + 5 * (i - 1)
        nodes[f"gpu-30{i}"] = port(down_at=at)
    nodes["gpu-101"] = port(down_at=900.0)
    return recording(tmp / "rec", TREE, nodes)


@pytest.mark.parametrize("as_agent", [False, True])
def test_nic_faults_under_one_leaf_are_one_leaf_incident(tmp_path: Path, as_agent: bool) -> None:
    rec = leaf_fault(tmp_path)
    extra = ("--as-agent",) if as_agent else ()
    got = incidents(rec, tmp_path / "t.duckdb", *extra)
    leaf = [i for i in got if i["scope"] == "leaf"]
    assert len(leaf) == 1, got
    inc = leaf[0]
    assert inc["key"] == "leaf3" and inc["nodes"] == 8 and inc["alerts"] >= 8
    assert inc["page"] is True and inc["root"] is None
    assert inc["action"] == "none"  # no node cordoned or inspected for its leaf's fault
    assert "8 of 8 nodes of leaf leaf3" in inc["because"][0] and "NicPortDropped" in inc["because"][0]
    # gpu-101's lone port: its own incident, its own node's action; two pages in all
    lone = [i for i in got if i is not inc]
    assert len(lone) == 1 and lone[0]["action"] == "inspect-hardware" and lone[0]["nodes"] == 1
    assert sum(i["page"] for i in got) == 2
    cordoned = [i for i in got if i["action"] in FATAL]
    assert len(cordoned) == 1  # gpu-101 only: 0 cordons for leaf3


def test_nic_faults_under_one_leaf_minutes_apart_stay_apart(tmp_path: Path) -> None:
    """Two nodes of a leaf whose ports go down 5 minutes apart are no leaf incident (the 60 s window): the time
    stage's burst holds them, each node keeping its own action."""
    nodes = {f"gpu-30{i}": port() for i in range(1, 9)}
    nodes["gpu-301"] = port(down_at=300.0)
    nodes["gpu-305"] = port(down_at=600.0)
    rec = recording(tmp_path / "rec", TREE, nodes)
    got = incidents(rec, tmp_path / "t.duckdb")
    assert not [i for i in got if i["scope"] == "leaf"], got
    assert [i["action"] for i in got] == ["inspect-hardware"]


def test_nvlink_faults_across_one_domain_are_one_domain_incident(tmp_path: Path) -> None:
    """r129: 6 trays lose 2 NVLinks and 2 trays' fabric routes turn unhealthy within 40 s; r130 stays
    healthy but one tray loses links 15 minutes later, alone."""
    nodes = {f"r130-n0{i}": links() for i in range(1, 9)}
    for i in range(1, 9):
        at = 300.0 + 5 * (i - 1)
        nodes[f"r129-n0{i}"] = links(mask_at=at) if i in (3, 6) else links(drop_at=at)
    nodes["r130-n02"] = links(drop_at=1200.0)
    rec = recording(tmp_path / "rec", BLOCKS, nodes)
    got = incidents(rec, tmp_path / "t.duckdb")
    dom = [i for i in got if i["scope"] == "nvlink-domain"]
    assert len(dom) == 1, got
    inc = dom[0]
    assert inc["key"] == "r129" and inc["nodes"] == 8 and inc["page"] is True and inc["action"] == "none"
    assert "NvlinkFabricUnhealthy, NvlinkLinksFewer" in inc["because"][0]
    rest = [i for i in got if i is not inc]
    assert len(rest) == 1 and rest[0]["nodes"] == 1 and rest[0]["action"] == "reset-gpu"
