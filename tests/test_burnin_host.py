"""A burn-in runs on the host it names: `--via local` proves this host only, and a CPU burn-in (no GPU) never
reaches the fleet baselines as a model '?'. No torch needed: the refusal comes before any step runs."""

from __future__ import annotations

import socket
from pathlib import Path

from fleettool.engine.baselines import compute
from fleettool.model import GpuInfo
from fleettool.store import Store
from fleettool.store.burnin import write_burnin_results
from tests.conftest import run_cli


def test_via_local_refuses_another_hosts_name_and_stores_nothing(tmp_path: Path) -> None:
    db = tmp_path / "fleet.duckdb"
    here = socket.gethostname().split(".")[0]
    other = "gpu-17" if here != "gpu-17" else "gpu-18"
    r = run_cli("burnin", "--via", "local", "--node", other, "--backend", "cpu", "--db", str(db))
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [
        f"fleettool: --via local runs here, on {here}, and --node {other} is another host: reach it with "
        "--via ssh|slurm|k8s, or leave --node out"
    ]
    assert not db.exists()


def test_a_cpu_burnin_never_makes_a_baseline_of_model_unknown(tmp_path: Path) -> None:
    with Store(tmp_path / "b.duckdb") as st:
        st.upsert_gpus([GpuInfo("gpu-17", 0, "GPU-a", model="NVIDIA H100 80GB HBM3", driver="570.1")], 1.0)
        st.begin()
        write_burnin_results(
            st,
            "run-gpu",
            2.0,
            [
                {
                    "node": "gpu-17",
                    "gpu": 0,
                    "uuid": "GPU-a",
                    "test": "hbm",
                    "figure": 3000.0,
                    "verdict": "PASS",
                }
            ],
        )
        write_burnin_results(  # the CPU backend: one device with no GPU index, and CPU devices 0..1 of a laptop
            st,
            "run-cpu",
            3.0,
            [
                {"node": "laptop", "gpu": None, "test": "hbm", "figure": 20.0, "verdict": "PASS"},
                {"node": "laptop", "gpu": 1, "test": "gemm", "figure": 0.5, "verdict": "PASS"},
            ],
        )
        st.commit()
        got = {(b.model, b.metric, b.key) for b in compute(st)}
    assert got == {("NVIDIA H100 80GB HBM3", "burnin", "hbm")}
