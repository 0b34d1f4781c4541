"""Burn-in: the CPU backend runs the real code paths (torch CPU GEMM and copies, gloo all-reduce with two
processes); verdict and exit-code logic; no GPU is never a pass; node names are validated; dispatch commands
are argv lists; the Kubernetes Job validates against Kubernetes' own schema."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from fleettool.burnin.dispatch import k8s_job, slurm_argv, ssh_argv, validate_node
from fleettool.burnin.verdict import (
    PEER_SLOW,
    Result,
    Verdict,
    apply_peers,
    apply_telemetry,
    exit_code,
    judge,
)
from tests.conftest import run_cli

torch = pytest.importorskip("torch", reason="the burn-in extra (pip install -e '.[burnin]') is not installed")
HOST = socket.gethostname().split(".")[0]


def test_cpu_backend_end_to_end(tmp_path: Path) -> None:
    db = tmp_path / "b.duckdb"
    r = run_cli(
        "burnin",
        "--node",
        HOST,
        "--backend",
        "cpu",
        "--duration",
        "10s",
        "--json",
        "--db",
        str(db),
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    rep = json.loads(r.stdout)
    tests = {x["test"]: x for x in rep["results"]}
    assert set(tests) == {"gemm-fp32", "gemm-bf16", "hbm", "allreduce-2", "dcgm-diag", "exclusive"}
    g = tests["gemm-fp32"]
    assert g["figure"] > 0 and g["unit"] == "TFLOP/s" and g["evidence"]["sdc_checks"] > 0
    assert g["evidence"]["sdc_mismatches"] == 0 and g["evidence"]["tf32"] is False
    # what does not apply on the CPU is a row that says so, not a test that silently disappears
    assert tests["dcgm-diag"]["verdict"] == "SKIPPED" and "cpu backend" in tests["dcgm-diag"]["reason"]
    ex = tests["exclusive"]
    assert ex["verdict"] == "SKIPPED" and ex["reason"].endswith("no NVML on the CPU backend")
    assert rep["busy"]["checked"] is False and rep["busy"]["why_not"] == "no NVML on the CPU backend"
    ar = tests["allreduce-2"]
    rows = ar["evidence"]["rows"]
    assert ar["evidence"]["world"] == 2 and len(rows) >= 5 and all(x["wrong"] == 0 for x in rows)
    # busbw as nccl-tests defines it: algbw x 2(n-1)/n, n = 2 -> busbw == algbw
    assert all(abs(x["busbw_gbps"] - x["algbw_gbps"]) < 1e-9 for x in rows)
    assert rep["exit_code"] == 0
    nccl = json.loads(run_cli("nccl", "--db", str(db), "--json").stdout)
    assert len(nccl) == 1 and nccl[0]["ranks"] == 2 and nccl[0]["source"].startswith("fleettool burnin")
    from fleettool.store import Store

    with Store(db, read_only=True) as st:
        assert st.scalar("SELECT count(*) FROM burnin_results WHERE run_id = ?", [rep["run_id"]]) == 6


def test_no_gpu_is_skipped_and_never_passes() -> None:
    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    r = run_cli("burnin", "--node", HOST, "--json", "--no-store")
    assert r.returncode == 7
    rep = json.loads(r.stdout)
    assert {x["verdict"] for x in rep["results"]} == {"SKIPPED"} and rep["exit_code"] == 7


def test_verdicts() -> None:
    assert judge(600.0, 495.0)[0] == Verdict.PASS
    assert judge(520.0, 495.0)[0] == Verdict.WARN  # within 10 % of the floor
    assert judge(400.0, 495.0)[0] == Verdict.FAIL
    assert judge(None, 495.0)[0] == Verdict.INCONCLUSIVE
    assert judge(600.0, None)[0] == Verdict.WARN  # no floor: judged by peers only


def test_slow_gpu_fails_against_its_peers_even_above_the_floor() -> None:
    rs = [Result("n", g, "gemm-bf16", Verdict.PASS, 650.0, floor=300.0) for g in range(7)]
    rs.append(Result("n", 7, "gemm-bf16", Verdict.PASS, 650.0 * (1 - PEER_SLOW) - 10, floor=300.0))
    apply_peers(rs)
    assert [r.verdict for r in rs] == [Verdict.PASS] * 7 + [Verdict.FAIL]
    assert "below the median" in rs[7].reason


def test_power_capping_is_normal_thermal_is_a_finding() -> None:
    r = Result("n", 0, "gemm-bf16", Verdict.PASS, 650.0)
    apply_telemetry(r, 0x4 | 0x1)
    assert r.verdict == Verdict.PASS and r.evidence["power_capped"] is True
    apply_telemetry(r, 0x4 | 0x40)
    assert r.verdict == Verdict.WARN and "thermal" in r.reason


def test_exit_codes() -> None:
    p = Result("n", 0, "gemm-bf16", Verdict.PASS)
    assert exit_code([p]) == 0
    assert exit_code([p, Result("n", None, "allreduce-1", Verdict.SKIPPED)]) == 0  # does not apply: one GPU
    assert exit_code([Result("n", None, "gemm", Verdict.SKIPPED)]) == 7  # no GPU at all
    assert exit_code([p, Result("n", None, "dcgm-diag", Verdict.INCONCLUSIVE)]) == 7
    assert exit_code([p, Result("n", 1, "hbm", Verdict.FAIL)]) == 1
    assert exit_code([]) == 7


@pytest.mark.parametrize(
    "bad", ["gpu-17;rm -rf /", "$(reboot)", "a b", "-oProxyCommand=x", "", "x" * 300, "n\n"]
)
def test_malicious_node_names_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        validate_node(bad)
    r = run_cli("burnin", "--node", bad, "--via", "ssh", "--no-store")
    assert r.returncode == 2 and "invalid node name" in r.stderr


def test_dispatch_argv() -> None:
    argv = ssh_argv("gpu-17.cluster", ["--duration", "30s"])
    assert argv[:4] == ["ssh", "-o", "BatchMode=yes", "--"] and argv[4] == "gpu-17.cluster"
    assert argv[5] == "fleettool burnin --node gpu-17.cluster --json --no-store --duration 30s"
    assert slurm_argv("gpu-17", [], partition="gpu")[:9] == [
        "srun",
        "-w",
        "gpu-17",
        "-N",
        "1",
        "-n",
        "1",
        "--exclusive",
        "-p",
    ]


def test_k8s_job_validates_against_the_kubernetes_schema() -> None:
    kv = pytest.importorskip("kubernetes_validate")
    job = k8s_job("gpu-17", ["--duration", "30s"], image="ghcr.io/fleettool/fleettool:0.1", gpus=8)
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "gpu-17"}
    kv.validate(job, kv.utils.latest_version(), strict=True)
    bad = json.loads(json.dumps(job))
    bad["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = "eight"
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, kv.utils.latest_version(), strict=True)


def test_print_job_cli() -> None:
    r = run_cli("burnin", "--node", "gpu-17", "--via", "k8s", "--print-job", "--image", "reg/fleettool:1")
    assert r.returncode == 0
    job = json.loads(r.stdout)
    assert (
        job["kind"] == "Job"
        and job["spec"]["template"]["spec"]["containers"][0]["image"] == "reg/fleettool:1"
    )


def test_allreduce_through_nccl_tests_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where all_reduce_perf is installed the burn-in can run it and read its table with the nccl-tests reader.
    No GPU here: a stand-in all_reduce_perf prints a real recorded 8 x H100 output (nccl-tests issue #290)."""
    from tests.conftest import FIXTURES

    sample = FIXTURES / "samples" / "nccl-tests" / "nccl-tests-h100x8-single-node-and-2node-issue290.txt"
    part1 = sample.read_text().split("=== PART 2")[0].split("\n", 1)[1]
    (tmp_path / "out.txt").write_text(part1)
    exe = tmp_path / "all_reduce_perf"
    exe.write_text(f"#!/bin/sh\ncat {tmp_path / 'out.txt'}\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    from fleettool.burnin.context import BurninConfig
    from fleettool.burnin.report import BurninReport
    from fleettool.burnin.steps import measure_allreduce

    cfg = BurninConfig(node="n", backend="cuda", ar_tool="nccl-tests", ar_procs=8)
    rep = BurninReport("r", "n", 0.0)
    res = measure_allreduce(
        cfg,
        [{"gpu": i, "memory_bytes": 80 << 30} for i in range(8)],
        lambda t: (360.0, "0.75 x 480 GB/s"),
        rep,
    )
    assert res.test == "allreduce-8" and res.verdict == Verdict.PASS
    assert res.figure == pytest.approx(476.53)  # in-place busbw at 4 GiB, the largest size
    assert rep.allreduce is not None and rep.allreduce["footer_avg_busbw_gbps"] == pytest.approx(439.369)
