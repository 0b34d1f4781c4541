"""The Slurm dispatch path against a real one-node Slurm (Debian slurm-wlm + munge), started by this test as
root in a temporary directory: `fleettool burnin --node <this host> --via slurm` runs the burn-in through
`srun -w`, and its JSON report comes back into the local store."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleettool.store import Store
from tests.conftest import run_cli

NEEDED = ("slurmctld", "slurmd", "srun", "sinfo", "munged")
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or any(shutil.which(x) is None for x in NEEDED),
    reason="needs root and Debian's slurm-wlm + munge (CI installs them)",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    d = tmp_path_factory.mktemp("slurm")
    host = socket.gethostname().split(".")[0]
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    sock = d / "munge.socket"
    for sub in ("state", "spool", "log", "munge-run"):
        (d / sub).mkdir()
    munged = subprocess.Popen(
        [
            "munged",
            "--foreground",
            "--force",
            f"--key-file={key}",
            f"--socket={sock}",
            f"--pid-file={d / 'munge-run' / 'munged.pid'}",
            f"--seed-file={d / 'munge-run' / 'seed'}",
            f"--log-file={d / 'log' / 'munged.log'}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    mem_mb = int(Path("/proc/meminfo").read_text().split()[1]) // 1024
    conf = d / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=fleettool-test",
                f"SlurmctldHost={host}",
                "SlurmUser=root",
                "AuthType=auth/munge",
                f"AuthInfo=socket={sock}",
                "CredType=cred/munge",
                f"SlurmctldPort={_free_port()}",
                f"SlurmdPort={_free_port()}",
                f"StateSaveLocation={d / 'state'}",
                f"SlurmdSpoolDir={d / 'spool'}",
                f"SlurmctldPidFile={d / 'slurmctld.pid'}",
                f"SlurmdPidFile={d / 'slurmd.pid'}",
                f"SlurmctldLogFile={d / 'log' / 'slurmctld.log'}",
                f"SlurmdLogFile={d / 'log' / 'slurmd.log'}",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core",
                "MpiDefault=none",
                "ReturnToService=2",
                "SchedulerType=sched/backfill",
                f"NodeName={host} CPUs={os.cpu_count()} RealMemory={max(mem_mb - 512, 256)} State=UNKNOWN",
                f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )
    )
    env = {**os.environ, "SLURM_CONF": str(conf)}
    ctld = subprocess.Popen(
        ["slurmctld", "-D", "-f", str(conf)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    time.sleep(1.0)
    sd = subprocess.Popen(
        ["slurmd", "-D", "-f", str(conf)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.time() + 60
        state = ""
        while time.time() < deadline:
            r = subprocess.run(
                ["sinfo", "-h", "-o", "%t", "-n", host], env=env, capture_output=True, text=True
            )
            state = r.stdout.strip()
            if state.startswith("idle"):
                break
            time.sleep(1)
        if not state.startswith("idle"):
            logs = "".join(
                (d / "log" / f).read_text()[-1500:]
                for f in ("slurmctld.log", "slurmd.log")
                if (d / "log" / f).exists()
            )
            pytest.fail(f"slurm did not come up (sinfo state {state!r}):\n{logs}")
        yield {"SLURM_CONF": str(conf), "host": host}
    finally:
        for p in (sd, ctld, munged):
            p.terminate()
        for p in (sd, ctld, munged):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


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
