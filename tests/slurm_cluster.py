"""A real one-node Slurm (Debian slurm-wlm + munge) started as root in a temporary directory, for the tests that
drive Slurm itself (tests/test_slurm.py, tests/test_remediate_slurm.py). Ports are free ones picked at start, so
two of these can run at once on one host."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

NEEDED = ("slurmctld", "slurmd", "srun", "sinfo", "scontrol", "munged")
SKIP = pytest.mark.skipif(
    os.geteuid() != 0 or any(shutil.which(x) is None for x in NEEDED),
    reason="needs root and Debian's slurm-wlm + munge (CI installs them)",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def one_node_slurm(d: Path, extra: tuple[str, ...] = ()) -> Iterator[dict[str, str]]:
    """Start munged, slurmctld and slurmd under `d` (slurm.conf's lines plus `extra`), wait for the node to be
    idle, yield {"SLURM_CONF": path, "host": node name, "dir": d}; stop all three on the way out."""
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
                *extra,
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
            pytest.fail(f"slurm did not come up (sinfo state {state!r}):\n{logs(d)}")
        yield {"SLURM_CONF": str(conf), "host": host, "dir": str(d)}
    finally:
        for p in (sd, ctld, munged):
            p.terminate()
        for p in (sd, ctld, munged):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def logs(d: Path, tail: int = 1500) -> str:
    """The ends of slurmctld's and slurmd's logs (for a failure message)."""
    return "".join(
        f"--- {f}\n" + (d / "log" / f).read_text()[-tail:]
        for f in ("slurmctld.log", "slurmd.log")
        if (d / "log" / f).exists()
    )
