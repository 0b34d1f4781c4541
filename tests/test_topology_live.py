"""Topology and jobs where the tool is installed (issue 30 item 1): the agent's --topology files read again when
they change, `--jobs-from sacct` and `--topology-from kubectl` (stand-in executables on PATH printing the recorded
fixtures: slurmdbd and an API server cannot run here; the real sacct and kubectl, where installed, fail here for
want of a cluster and are the failure case), the GPU source's NVLink fabric info, and --topology on fleet and
TUI."""

from __future__ import annotations

import ctypes
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from fleettool.agent.topology import SACCT, TopologyRefresh, fetch_fabric
from fleettool.sources.base import FabricInfo, SourceUnavailable
from fleettool.sources.fake import FakeSource
from fleettool.sources.fake_inject import load_fabric
from fleettool.sources.nvml import NvmlSource
from fleettool.sources.nvml_fabric import read_fabric
from fleettool.store.db import Store
from fleettool.store.topology import list_jobs, node_topology
from tests.conftest import FIXTURES, run_cli

TOPO = FIXTURES / "topology"
FABRIC = FIXTURES / "fabric"
GB200_DOMAIN = "9c6f5af3-53bf-49b5-a436-b66766c413c3"


def _tool(bindir: Path, name: str, body: str) -> Path:
    """A stand-in executable: records its arguments, then runs `body` (shell)."""
    bindir.mkdir(exist_ok=True)
    p = bindir / name
    p.write_text(f'#!/bin/sh\necho "$@" >> "{bindir}/{name}.args"\n{body}\n')
    p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return p


def _path_with(bindir: Path) -> str:
    return f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"


def _agent(db: Path, *extra: str, env: dict[str, str] | None = None, seconds: str = "4s") -> object:
    return run_cli(
        "agent",
        "--db",
        str(db),
        "--node",
        "gb-01",
        "--source",
        "fake",
        "--gpus",
        "2",
        "--kmsg",
        "off",
        "--dcgm-exporter",
        "off",
        "--no-rules",
        "--duration",
        seconds,
        *extra,
        env=env,
        timeout=90,
    )


def test_agent_stores_sacct_kubectl_fabric_and_files(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    _tool(bindir, "sacct", f'cat "{TOPO / "sacct.txt"}"')
    _tool(bindir, "kubectl", f'cat "{TOPO / "kubectl-nodes.json"}"')
    db = tmp_path / "a.duckdb"
    r = _agent(
        db,
        "--topology",
        str(TOPO / "topology-tree.conf"),
        "--jobs-from",
        "sacct",
        "--topology-from",
        "kubectl",
        "--fake-fabric",
        str(FABRIC / "gb200-completed.json"),
        env={"PATH": _path_with(bindir)},
    )
    assert r.returncode == 0, r.stderr  # type: ignore[attr-defined]
    # the exact command lines (sacct(1): --parsable2, -S now[-count hours], -a; the header kept for the reader)
    assert (bindir / "sacct.args").read_text().splitlines()[0] == " ".join(SACCT[1:])
    assert (bindir / "kubectl.args").read_text().split()[:4] == ["get", "nodes", "-o", "json"]
    with Store(db, read_only=True) as st:
        topo = node_topology(st)
        jobs = {j["job_id"]: j for j in list_jobs(st)}
        sources = {r["node"]: r["source"] for r in st.query("SELECT node, source FROM node_topology")}
    assert topo["gb-01"] == {
        "driver": "580.159.04",
        "fabric_state": "completed",
        "nvlink_domain": GB200_DOMAIN,
        "clique": f"{GB200_DOMAIN}.4026",
    }
    assert topo["gpu-07"] == {"leaf": "leaf1", "spine": "spine1"}  # the --topology file
    assert topo["r06-02"]["rack"] == "rk06"  # kubectl's
    assert sources["r06-02"] == "kubectl get nodes (live)" and sources["gb-01"] == "nvml fabric info (live)"
    assert (jobs["4712"]["state"], jobs["4712"]["state_detail"], jobs["4712"]["source"]) == (
        "CANCELLED",
        "by 1000",
        "sacct (live)",
    )
    assert len(jobs["4711"]["nodes"]) == 16


def test_a_failing_sacct_is_one_line_counted_and_survived(tmp_path: Path) -> None:
    """The real sacct where installed (no slurm.conf here: `sacct: fatal: Could not establish a configuration
    source`, exit 1), else a stand-in failing the same way; the agent runs on and says so once."""
    bindir = tmp_path / "bin"
    if shutil.which("sacct") is None:
        _tool(bindir, "sacct", 'echo "sacct: fatal: Could not establish a configuration source" >&2; exit 1')
    db = tmp_path / "a.duckdb"
    r = _agent(db, "--jobs-from", "sacct", env={"PATH": _path_with(bindir)}, seconds="12s")
    assert r.returncode == 0, r.stderr  # type: ignore[attr-defined]
    lines = [ln for ln in r.stderr.splitlines() if "topology source sacct failed" in ln]  # type: ignore[attr-defined]
    assert len(lines) == 1 and "sacct exited 1" in lines[0], r.stderr  # type: ignore[attr-defined]
    with Store(db, read_only=True) as st:
        got = st.query(
            "SELECT metric, max(value) AS v FROM samples WHERE metric LIKE 'agent_topology%' "
            "AND sub = 'source=sacct' GROUP BY metric"
        )
        assert st.scalar("SELECT count(*) FROM jobs") == 0
    assert {g["metric"]: g["v"] for g in got} == {
        "agent_topology_failures_total": 1.0,
        "agent_topology_up": 0.0,
    }


def test_refresh_keeps_failing_quietly_then_says_it_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bindir = tmp_path / "bin"
    tool = _tool(bindir, "sacct", 'echo "sacct: error: Problem talking to the database" >&2; exit 1')
    monkeypatch.setenv("PATH", _path_with(bindir))
    said: list[str] = []
    now = [0.0]
    t = TopologyRefresh("gb-01", jobs_from="sacct", log=said.append, clock=lambda: now[0])
    with Store(tmp_path / "a.duckdb") as st:
        for _ in range(3):  # three rounds, five minutes apart
            assert t.run_due() == 1
            t.store(st)
            assert t.run_due() == 0  # not due again within the 5 minutes
            now[0] += 300.0
        assert t.failures["sacct"] == 3 and len(said) == 1, said
        assert said[0] == (
            "topology source sacct failed: sacct exited 1: sacct: error: Problem talking to the database; "
            "tried again in 300s"
        )
        assert {s.metric: s.value for s in t.samples(now[0])} == {
            "agent_topology_failures_total": 3.0,
            "agent_topology_up": 0.0,
        }
        tool.write_text(f'#!/bin/sh\ncat "{TOPO / "sacct.txt"}"\n')
        assert t.run_due() == 1
        t.store(st)
        assert said[-1] == "topology source sacct answers again"
        assert st.scalar("SELECT count(*) FROM jobs") == 3
        assert {s.metric: s.value for s in t.samples(now[0])} == {
            "agent_topology_failures_total": 3.0,
            "agent_topology_up": 1.0,
        }


def test_topology_files_read_again_when_they_change(tmp_path: Path) -> None:
    conf = tmp_path / "topology.conf"
    conf.write_text("SwitchName=leaf1 Nodes=gpu-[01-04]\nSwitchName=spine1 Switches=leaf1\n")
    said: list[str] = []
    t = TopologyRefresh("gb-01", [conf], log=said.append)
    with Store(tmp_path / "a.duckdb") as st:
        t.store(st)
        assert node_topology(st)["gpu-03"]["leaf"] == "leaf1"
        stored = t.stored[str(conf)]
        t.store(st)  # unchanged: not read again
        assert t.stored[str(conf)] == stored
        conf.write_text("SwitchName=leaf2 Nodes=gpu-[01-04]\nSwitchName=spine1 Switches=leaf2\n")
        os.utime(conf, ns=(conf.stat().st_atime_ns, conf.stat().st_mtime_ns + 10**9))
        t.store(st)
        assert node_topology(st)["gpu-03"]["leaf"] == "leaf2"
        conf.write_text("SwitchName=leaf1 Nodes=gpu-[01-04]\nSwitchName=spine1 Switches=leaf1\n")
        os.utime(conf, ns=(conf.stat().st_atime_ns, conf.stat().st_mtime_ns + 2 * 10**9))
        t.store(st)  # back to what it said first: read again (a replay's "already ingested" would skip it)
        assert node_topology(st)["gpu-03"]["leaf"] == "leaf1"
        conf.unlink()  # gone: named once, what it stored is kept
        t.store(st)
        t.store(st)
        assert len([s for s in said if "No such file" in s]) == 1, said
        assert node_topology(st)["gpu-03"]["leaf"] == "leaf1"
        conf.write_text("this is not a topology file at all, just words\n")
        t.store(st)
        assert "not a topology or jobs file" in said[-1] and "skipped" in said[-1]


@pytest.mark.parametrize(
    ("fixture", "domain", "state"),
    [
        ("gb200-completed.json", GB200_DOMAIN, "completed"),
        ("h100-hbm3-not-supported.json", None, "not-supported"),  # a real H100's answer
        ("h100-completed-zero-uuid.json", None, "completed"),  # torchcomms#1385: zeros are no domain
        ("nvml-unknown-error.json", None, "error: Unknown Error"),
    ],
)
def test_fabric_info_keys(fixture: str, domain: str | None, state: str) -> None:
    src = FakeSource(gpus=2, fabric=load_fabric(FABRIC / fixture))
    src.open()
    try:
        keys = fetch_fabric("gb-01", src).nodes["gb-01"]
    finally:
        src.close()
    assert keys.get("nvlink_domain") == domain and keys["driver"] == "580.159.04"
    assert keys["fabric_state"] == state
    assert ("clique" in keys) == (domain is not None)


def test_fabric_probe_that_failed_is_no_domain() -> None:
    info = FabricInfo(GB200_DOMAIN.replace("-", ""), 4026, 3, 45)  # completed, status NVML error 45
    assert info.domain is None and info.state_name == "completed (status 45)"
    assert FabricInfo(GB200_DOMAIN.replace("-", ""), 4026, 2).domain is None  # in progress


def test_nvml_fabric_read_fills_nvmls_struct() -> None:
    """read_fabric passes nvidia-ml-py's own v2 struct by reference and reads it back (the library call is played
    by a function writing what the GB200 of gpud#1106 answered)."""
    import pynvml

    def answer(handle: object, ref: object) -> int:
        info = ctypes.cast(ref, ctypes.POINTER(pynvml.c_nvmlGpuFabricInfoV_t)).contents
        info.clusterUuid[:] = list(bytes.fromhex(GB200_DOMAIN.replace("-", "")))
        info.cliqueId, info.state, info.status = 4026, pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, 0
        return 0

    class Nv:
        c_nvmlGpuFabricInfoV_t = pynvml.c_nvmlGpuFabricInfoV_t
        nvmlDeviceGetGpuFabricInfoV = staticmethod(answer)

    got = read_fabric(Nv(), lambda label, fn, *a: fn(*a), 0, object())
    assert got.domain == GB200_DOMAIN and got.clique == f"{GB200_DOMAIN}.4026"
    with pytest.raises(SourceUnavailable):
        NvmlSource().fabric_info(0)  # not opened (no driver here)
    with pytest.raises(
        RuntimeError, match="NVML is not open"
    ):  # a failed round for the agent: one line, counted
        fetch_fabric("gb-01", NvmlSource())


def test_agent_options_refused_as_documented(tmp_path: Path) -> None:
    db = tmp_path / "a.duckdb"
    bindir = tmp_path / "empty"
    bindir.mkdir()
    py = str(Path(sys.executable).parent)
    r = _agent(db, "--jobs-from", "sacct", env={"PATH": f"{py}{os.pathsep}{bindir}"})
    assert r.returncode == 8 and "sacct is not installed" in r.stderr, r.stderr  # type: ignore[attr-defined]
    r = _agent(db, "--topology-from", "scontrol")
    assert r.returncode == 2 and "--topology-from" in r.stderr  # type: ignore[attr-defined]
    r = _agent(db, "--topology", str(tmp_path / "nope.conf"))
    assert r.returncode == 3 and r.stderr.count("\n") == 1 and "nope.conf" in r.stderr  # type: ignore[attr-defined]
    other = tmp_path / "notes.txt"
    other.write_text("just some words here that are not any recording format at all really\n")
    r = _agent(db, "--topology", str(other), "--topology", str(TOPO / "nodes.csv"), seconds="2s")
    assert r.returncode == 0, r.stderr  # type: ignore[attr-defined]
    assert f"{other}" in r.stderr and "skipped" in r.stderr  # type: ignore[attr-defined]
    with Store(db, read_only=True) as st:
        assert node_topology(st)["gpu-02"]["pdu"] == "pdu-a2"


def test_fleet_alerts_and_tui_read_topology(tmp_path: Path) -> None:
    db, fleet = tmp_path / "r.duckdb", tmp_path / "fleet"
    assert run_cli("replay", str(FIXTURES / "scenarios" / "app-xid"), "--db", str(db)).returncode == 0
    ex = run_cli("export", "--db", str(db), "--to", str(fleet))
    assert ex.returncode == 0, ex.stderr
    r = run_cli(
        "fleet", "alerts", "--fleet", str(fleet), "--json", "--topology", str(TOPO / "topology-tree.conf")
    )
    assert r.returncode == 0, r.stderr
    assert "topology: 16 nodes in 2 leaves, 1 spine" in r.stderr
    r = run_cli("fleet", "alerts", "--fleet", str(fleet), "--topology", str(tmp_path / "nope.conf"))
    assert r.returncode == 3 and "nope.conf" in r.stderr and r.stderr.count("\n") == 1
    from fleettool.cli.topology_opts import load_topology, topology_files
    from tui.source import Source

    files = topology_files([TOPO / "nodes.csv"])
    src = Source(fleet=str(fleet), prepare=lambda store: load_topology(store, files, quiet=True))
    with src.open() as store:  # each load of the fleet reads them into its in-memory store
        assert node_topology(store)["gpu-02"]["pdu"] == "pdu-a2"
