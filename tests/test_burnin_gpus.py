"""`fleettool burnin --gpus LIST`: only the GPUs named (NVML indices) are stressed and judged, so a remediation
proves the GPU it reset without loading the node's others; an index the node lacks is a usage error (2) naming
it, before anything runs; a list that is not indices is one too. Real CPU runs (the cpu backend's devices 0..n-1
stand for GPUs 0..n-1)."""

from __future__ import annotations

import json
import socket

import pytest

from fleettool.burnin.context import BurninConfig
from fleettool.burnin.runner import NoSuchGpu, run_burnin
from tests.conftest import run_cli

torch = pytest.importorskip("torch", reason="the burn-in extra (pip install -e '.[burnin]') is not installed")
HOST = socket.gethostname().split(".")[0]


def test_only_the_gpus_named_are_stressed_and_judged() -> None:
    cfg = BurninConfig(
        node="n", backend="cpu", tests=("gemm", "hbm"), dtypes=("fp32",), seconds=0.3, cpu_devices=4,
        gpus=(1, 3),
    )  # fmt: skip
    rep = run_burnin(cfg)
    assert [d["gpu"] for d in rep.devices] == [1, 3]
    measured = {(r.gpu, r.test) for r in rep.results if r.test != "exclusive"}
    assert measured == {(1, "gemm-fp32"), (3, "gemm-fp32"), (1, "hbm"), (3, "hbm")}


def test_a_gpu_the_node_lacks_is_refused_naming_it() -> None:
    cfg = BurninConfig(node="n", backend="cpu", tests=("gemm",), seconds=0.3, cpu_devices=2, gpus=(1, 5))
    with pytest.raises(NoSuchGpu, match=r"n has no GPU 5 \(its GPUs: 0, 1\)"):
        run_burnin(cfg)


def test_cli_gpus_names_a_missing_index_and_exits_2() -> None:
    # the cpu backend's one device is no GPU: --gpus 0 names a GPU this host does not have
    r = run_cli(
        "burnin", "--backend", "cpu", "--tests", "gemm", "--duration", "1s", "--no-store", "--gpus", "0"
    )
    assert r.returncode == 2, r.stderr
    assert "--gpus" in r.stderr and "no GPU 0" in r.stderr
    assert r.stdout == ""  # nothing ran, no report


@pytest.mark.parametrize("bad", ["x", "1,,2", "-1", "1.5"])
def test_cli_gpus_that_are_not_indices_are_a_usage_error(bad: str) -> None:
    r = run_cli("burnin", "--backend", "cpu", "--no-store", "--gpus", bad)
    assert r.returncode == 2
    assert "--gpus" in r.stderr and "not a comma list of GPU indices" in r.stderr


def test_cli_without_gpus_still_runs_every_device() -> None:
    r = run_cli("burnin", "--node", HOST, "--backend", "cpu", "--tests", "hbm", "--duration", "1s",
                "--no-store", "--json")  # fmt: skip
    doc = json.loads(r.stdout)
    assert [x["test"] for x in doc["results"]] == ["hbm", "exclusive"]


def test_gpus_travels_to_a_remote_run() -> None:
    from fleettool.cli.burnin_cmd import gpus_passthrough

    assert gpus_passthrough((0, 3)) == ["--gpus", "0,3"]
    assert gpus_passthrough(None) == []
