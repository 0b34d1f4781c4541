"""The Slurm dispatch path against a real one-node Slurm (Debian slurm-wlm + munge), started by this test as
root in a temporary directory: `fleettool burnin --node <this host> --via slurm` runs the burn-in through
`srun -w`, and its JSON report comes back into the local store."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleettool.store import Store
from tests.conftest import run_cli
from tests.slurm_cluster import SKIP, one_node_slurm

pytestmark = SKIP


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with one_node_slurm(tmp_path_factory.mktemp("slurm")) as s:
        yield s


def test_srun_works(slurm: dict[str, str]) -> None:
    r = subprocess.run(
        ["srun", "-w", slurm["host"], "hostname"],
        env={**os.environ, "SLURM_CONF": slurm["SLURM_CONF"]},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().split(".")[0] == slurm["host"]


def test_burnin_via_slurm_comes_back_into_the_store(slurm: dict[str, str], tmp_path: Path) -> None:
    pytest.importorskip("torch")
    db = tmp_path / "s.duckdb"
    r = run_cli(
        "burnin",
        "--node",
        slurm["host"],
        "--via",
        "slurm",
        "--backend",
        "cpu",
        "--duration",
        "2s",
        "--json",
        "--db",
        str(db),
        env={"SLURM_CONF": slurm["SLURM_CONF"]},
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(r.stdout)
    assert rep["node"] == slurm["host"] and {x["test"] for x in rep["results"]} >= {
        "gemm-fp32",
        "allreduce-2",
    }
    from fleettool.store import Store

    with Store(db, read_only=True) as st:
        n = st.scalar("SELECT count(*) FROM burnin_results WHERE run_id = ?", [rep["run_id"]])
    assert n == len(rep["results"])


def test_lifecycle_drains_and_resumes_the_slurm_node(slurm: dict[str, str], tmp_path: Path) -> None:
    env = {"SLURM_CONF": slurm["SLURM_CONF"]}
    db = tmp_path / "l.duckdb"
    host = slurm["host"]

    def state() -> str:
        r = subprocess.run(
            ["sinfo", "-h", "-o", "%t", "-n", host], env={**os.environ, **env}, capture_output=True, text=True
        )
        return r.stdout.strip()

    Store(db).close()  # the fleet's store exists (a lifecycle move never creates one)
    r = run_cli("node", host, "cordon", "--slurm", "--db", str(db), "-m", "XID 79 twice", env=env)
    assert r.returncode == 0, r.stderr
    assert state().startswith("drain")
    back = ("return", "--slurm", "--force", "-m", "no GPU here to burn in")
    assert run_cli("node", host, *back, "--db", str(db), env=env).returncode == 0
    assert state().startswith("idle")
    trail = json.loads(run_cli("node", host, "--db", str(db), "--json").stdout)["audit"]
    assert (
        "scontrol update nodename=" in trail[0]["side_effects"] and "state=resume" in trail[1]["side_effects"]
    )
