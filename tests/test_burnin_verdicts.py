"""Verdicts you can act on: a GPU whose results differ from a strict majority FAILs, a split with no majority is
INCONCLUSIVE naming the groups (real CPU runs, one device's products corrupted by the runner's drill); a fleet
floor built from the GPU under test itself is provisional (WARN, never PASS); the tf32 switch is put back after
the GEMM; --dtypes is honoured on the CPU; no dcgmi is a SKIPPED row; bad --backend/--tests/--dtypes are usage
errors (2) naming the flag and the accepted values."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleettool.burnin import gemm
from fleettool.burnin.context import BurninConfig, StepContext
from fleettool.burnin.floors import floor_with_provenance
from fleettool.burnin.report import BurninReport
from fleettool.burnin.runner import run_burnin
from fleettool.burnin.steps import run_dcgm
from fleettool.burnin.verdict import Result, Verdict, cross_gpu, exit_code
from tests.conftest import run_cli

torch = pytest.importorskip("torch", reason="the burn-in extra (pip install -e '.[burnin]') is not installed")
HOST = socket.gethostname().split(".")[0]


def sdc_run(devices: int, corrupt: tuple[int, ...]) -> dict[int | None, Result]:
    cfg = BurninConfig(
        node="n",
        backend="cpu",
        tests=("gemm",),
        dtypes=("fp32",),
        seconds=0.3,
        cpu_devices=devices,
        sdc_inject=corrupt,
    )
    rep = run_burnin(cfg)
    return {r.gpu: r for r in rep.results if r.test == "gemm-fp32"}


def test_a_gpu_that_differs_from_the_majority_fails() -> None:
    g = sdc_run(4, corrupt=(2,))
    assert g[2].verdict == Verdict.FAIL and g[2].evidence["corruption"] is True
    assert g[2].reason == (
        "silent data corruption: its result differs from the 3 of 4 devices that agree, for the same inputs"
    )
    assert g[2].evidence["sdc_mismatches"] == 0  # the same wrong bits every time: only peers can tell
    assert {g[i].verdict for i in (0, 1, 3)} == {Verdict.WARN}  # no floor on a CPU
    sums = {g[i].evidence["checksum"] for i in (0, 1, 3)}
    assert len(sums) == 1 and g[2].evidence["checksum"] not in sums
    assert exit_code(list(g.values())) == 1


def test_a_two_against_two_split_is_inconclusive_naming_the_groups() -> None:
    g = sdc_run(4, corrupt=(2, 3))
    assert {r.verdict for r in g.values()} == {Verdict.INCONCLUSIVE}
    good, bad = g[0].evidence["checksum"], g[2].evidence["checksum"]
    assert good != bad
    why = g[0].reason
    assert why.startswith("results differ across devices with no majority (2 vs 2)")
    assert f"GPU 0, GPU 1: checksum {good!r}" in why and f"GPU 2, GPU 3: checksum {bad!r}" in why
    assert all(r.reason == why and "corruption" not in r.evidence for r in g.values())
    assert exit_code(list(g.values())) == 7  # never a pass, and no healthy GPU failed


@pytest.mark.parametrize(
    ("sizes", "verdicts"),
    [
        ([1], {}),
        ([3, 1], {3: Verdict.FAIL}),
        ([2, 1], {2: Verdict.FAIL}),
        ([3, 1, 1], {3: Verdict.FAIL, 4: Verdict.FAIL}),
        ([1, 1], {0: Verdict.INCONCLUSIVE, 1: Verdict.INCONCLUSIVE}),
        ([2, 2, 1], {i: Verdict.INCONCLUSIVE for i in range(5)}),
        ([2, 1, 1], {i: Verdict.INCONCLUSIVE for i in range(4)}),
    ],
)
def test_only_a_strict_majority_convicts(sizes: list[int], verdicts: dict[int, Verdict]) -> None:
    devices = [{"gpu": i} for i in range(sum(sizes))]
    groups, start = {}, 0
    for k, n in enumerate(sizes):
        groups[repr(1000.0 + k)] = list(range(start, start + n))
        start += n
    out, ev = cross_gpu(devices, groups)
    assert {i: v for i, (v, _why) in out.items()} == verdicts
    assert ("cross_gpu_groups" in ev) == (len(sizes) > 1)


# -- floors -----------------------------------------------------------------------------------------------
H200, DRIVER = "NVIDIA H200", "580.159.04"


def _run(st: object, run_id: str, node: str, gpus: range, figure: float, ts: float) -> None:
    from fleettool.model import GpuInfo
    from fleettool.store.burnin import write_burnin_results

    st.upsert_gpus([GpuInfo(node, g, f"GPU-{node}-{g}", model=H200, driver=DRIVER) for g in gpus], ts)  # type: ignore[attr-defined]
    rows = [
        {
            "node": node,
            "gpu": g,
            "uuid": f"GPU-{node}-{g}",
            "test": "hbm",
            "figure": figure + g,
            "verdict": "PASS",
        }
        for g in gpus
    ]
    write_burnin_results(st, run_id, ts, rows)  # type: ignore[arg-type]


def _judged(st: object, node: str, gpu: int, figure: float) -> Result:
    """A GPU's HBM figure judged as a run judges it: the step's floor, then the runner's settle."""
    from fleettool.burnin.hbm import HbmResult
    from fleettool.burnin.verdict import judge_hbm

    cfg = BurninConfig(node=node, backend="cuda")
    ctx = StepContext(cfg, torch, [], BurninReport("r", node, 0.0), store=st, model=H200, driver=DRIVER)  # type: ignore[arg-type]
    dev = {"gpu": gpu, "uuid": f"GPU-{node}-{gpu}"}
    res = judge_hbm(node, [dev], [HbmResult(1 << 30, 10, 1.0, figure)], ctx.floor("hbm"), {})
    return ctx.settle(res)[0]


def _update(st: object, now: float) -> None:
    from fleettool.engine.baselines import compute, save

    save(st, compute(st), now)  # type: ignore[arg-type]


def test_a_floor_from_one_run_on_this_gpu_is_provisional(tmp_path: Path) -> None:
    from fleettool.store import Store

    with Store(tmp_path / "f.duckdb") as st:
        _run(st, "run1", "gpu-17", range(8), 4300.0, 1000.0)  # one run of a node's eight GPUs
        _update(st, 1001.0)
        fl, src, prov = floor_with_provenance(st, H200, DRIVER, "hbm")
        assert fl is not None and src.startswith("fleet baseline NVIDIA H200/580.159.04") and prov is not None
        assert prov.runs == 1 and len(prov.slots) == 8
        r = _judged(st, "gpu-17", 3, 4400.0)  # above the floor, by a margin: PASS, but against itself
        assert r.verdict == Verdict.WARN and r.reason.endswith("; floor from 1 run on this GPU: provisional")
        assert r.evidence["floor_provisional"] == "floor from 1 run on this GPU: provisional"
        other = _judged(st, "gpu-18", 3, 4400.0)  # a GPU the floor does not come from
        assert other.verdict == Verdict.PASS and "floor_provisional" not in other.evidence
        low = _judged(st, "gpu-17", 3, 3000.0)  # a provisional floor cannot pass, but it can fail
        assert low.verdict == Verdict.FAIL
        # a second run on another node: the floor no longer rests on this GPU's one run
        _run(st, "run2", "gpu-18", range(8), 4310.0, 1002.0)
        _update(st, 1003.0)
        assert _judged(st, "gpu-17", 3, 4400.0).verdict == Verdict.PASS


def test_a_floor_from_this_gpus_own_runs_only_is_provisional(tmp_path: Path) -> None:
    from fleettool.store import Store

    with Store(tmp_path / "f.duckdb") as st:
        for k in range(8):
            _run(st, f"run{k}", "gpu-17", range(1), 4300.0 + k, 1000.0 + k)
        _run(st, "later", "gpu-19", range(8), 4300.0, 2000.0)  # after the baseline's update: not in it
        _update(st, 1500.0)
        prov = floor_with_provenance(st, H200, DRIVER, "hbm")[2]
        assert prov is not None and prov.runs == 8 and prov.slots == {("gpu-17", 0)}
        r = _judged(st, "gpu-17", 0, 4500.0)
        assert r.verdict == Verdict.WARN and "floor from 8 runs, all on this GPU: provisional" in r.reason


# -- tf32 ---------------------------------------------------------------------------------------------------
@pytest.fixture
def tf32_switch() -> Iterator[None]:
    m = torch.backends.cuda.matmul
    before = m.fp32_precision
    yield
    m.fp32_precision = before


@pytest.mark.parametrize("before", [False, True])
def test_the_tf32_switch_is_put_back_after_the_gemm(tf32_switch: None, before: bool) -> None:
    m = torch.backends.cuda.matmul
    m.allow_tf32 = before  # as a user's script sets it, with the old API
    r = gemm.run_gemm(torch, torch.device("cpu"), "tf32", 0.05, 32)
    assert r.tf32 is True and m.allow_tf32 is before
    r = gemm.run_gemm(torch, torch.device("cpu"), "fp32", 0.05, 32)
    assert r.tf32 is False and m.allow_tf32 is before
    with pytest.raises(RuntimeError, match="meta"):  # fails inside the GEMM: still put back
        gemm.run_gemm(torch, torch.device("meta"), "tf32", 0.05, 32)
    assert m.allow_tf32 is before


def test_the_new_tf32_api_is_put_back_as_it_was(tf32_switch: None) -> None:
    m = torch.backends.cuda.matmul
    for setting in ("tf32", "none", "ieee"):
        m.fp32_precision = setting
        assert gemm.run_gemm(torch, torch.device("cpu"), "fp32", 0.05, 32).tf32 is False
        assert m.fp32_precision == setting
    m.fp32_precision = "tf32"
    rep = run_burnin(BurninConfig(node="n", backend="cpu", tests=("gemm",), dtypes=("fp32",), seconds=0.2))
    (g,) = [r for r in rep.results if r.test == "gemm-fp32"]
    assert g.evidence["tf32"] is False and m.fp32_precision == "tf32"


# -- dtypes, DCGM, the command line --------------------------------------------------------------------------
def test_dtypes_are_honoured_on_the_cpu() -> None:
    cfg = BurninConfig(node="n", backend="cpu", tests=("gemm",), dtypes=("fp16", "tf32"), seconds=0.2)
    rep = run_burnin(cfg)
    got = {r.test: r for r in rep.results}
    assert set(got) == {"gemm-fp16", "gemm-tf32", "exclusive"}
    assert got["gemm-fp16"].figure is not None and got["gemm-fp16"].figure > 0
    assert got["gemm-tf32"].verdict == Verdict.SKIPPED and "tensor-core" in got["gemm-tf32"].reason


def test_no_dcgmi_is_a_skipped_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH without dcgmi
    ctx = StepContext(BurninConfig(node="n", backend="cuda"), torch, [], BurninReport("r", "n", 0.0))
    (r,) = run_dcgm(ctx)
    assert (r.test, r.verdict, r.gpu) == ("dcgm-diag", Verdict.SKIPPED, None)
    assert r.reason.startswith("dcgmi not found on PATH")
    assert exit_code([Result("n", 0, "hbm", Verdict.PASS), r]) == 0  # it does not apply: not a failure


def test_dtypes_on_the_command_line() -> None:
    import json

    r = run_cli(
        "burnin", "--node", HOST, "--backend", "cpu", "--tests", "gemm", "--dtypes", "fp16",
        "--duration", "1s", "--no-store", "--json", timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert [x["test"] for x in json.loads(r.stdout)["results"]] == ["gemm-fp16", "exclusive"]


@pytest.mark.parametrize(
    ("flag", "value", "accepted"),
    [
        ("--backend", "gpu", "(one of cuda, cpu)"),
        ("--tests", "gemm,nope", "(one of gemm, hbm, allreduce, dcgm)"),
        ("--dtypes", "fp9", "(one of bf16, fp16, tf32, fp8, fp32)"),
    ],
)
def test_bad_choices_are_usage_errors(flag: str, value: str, accepted: str) -> None:
    r = run_cli("burnin", "--node", HOST, flag, value, "--no-store")
    assert r.returncode == 2
    (line,) = r.stderr.splitlines()
    assert (
        line.startswith("fleettool: burnin: ")
        and flag in line
        and accepted in line
        and value.split(",")[-1] in line
    )
