"""The busy check: a GPU another process is using is INCONCLUSIVE with the PIDs named, never FAIL or PASS;
this run's own PID and its children are not "another process"; a process that appears during a test counts
where NVML's PIDs are this run's namespace's, and is reported unattributed where they are not; without a
source that lists processes the check says it was not made.

Real burn-ins on the CPU backend, four CPU devices side by side as GPUs 0-3, with the fake GPU source (a
recorded H200 played back) as their NVML: its `busy:PID` injection is what NVML's running-process lists
would show."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from fleettool.burnin.busy import BusyCheck, is_ours
from fleettool.burnin.context import BurninConfig
from fleettool.burnin.report import BurninReport, from_dict, to_dict
from fleettool.burnin.runner import run_burnin
from fleettool.burnin.verdict import Result, Verdict, exit_code
from fleettool.sources.base import GpuProcess
from fleettool.sources.fake import FakeSource, parse_injection

pytest.importorskip("torch", reason="the burn-in extra (pip install -e '.[burnin]') is not installed")

ME = os.getpid()


def fake(gpus: int, *specs: str) -> FakeSource:
    src = FakeSource(gpus=gpus, inject=[parse_injection(s) for s in specs])
    src.open()
    return src


def gemm_run(src: FakeSource | None, devices: int, seconds: float) -> BurninReport:
    cfg = BurninConfig(
        node="n", backend="cpu", tests=("gemm",), dtypes=("fp32",), seconds=seconds, cpu_devices=devices
    )
    return run_burnin(cfg, source=src)


def by_gpu(rep: BurninReport, test: str) -> dict[int | None, Result]:
    return {r.gpu: r for r in rep.results if r.test == test}


def test_a_gpu_busy_before_the_tests_is_inconclusive_naming_the_pids() -> None:
    # GPU 2 has someone else's process; GPU 1 lists this run's own PID (as NVML would once it has a context)
    rep = gemm_run(fake(4, "busy:4937@gpu=2", f"busy:{ME}@gpu=1"), devices=4, seconds=0.5)
    g = {r.gpu: r for r in rep.results if r.test == "gemm-fp32"}
    assert g[2].verdict == Verdict.INCONCLUSIVE
    assert "PID 4937 (C, 512 MiB)" in g[2].reason and "GPU 2 before the test" in g[2].reason
    assert g[2].evidence["busy_pids"] == [4937] and g[2].figure is not None  # measured, kept, not judged
    # the others were not busy (our own PID is ours) and are judged as usual (no floor on the CPU: WARN)
    assert [g[i].verdict for i in (0, 1, 3)] == [Verdict.WARN] * 3
    assert all("busy_pids" not in g[i].evidence for i in (0, 1, 3))
    ex = by_gpu(rep, "exclusive")[None]
    assert ex.verdict == Verdict.INCONCLUSIVE and "GPU 2 before the tests: PID 4937" in ex.reason
    assert exit_code(rep.results) == 7
    # the report's JSON carries the PIDs, and a remote run's JSON reads back with them
    doc = json.loads(json.dumps(to_dict(rep, 7)))
    assert doc["busy"]["checked"] is True and doc["busy"]["gpus"] == [0, 1, 2, 3]
    assert doc["busy"]["before"] == {"2": [{"pid": 4937, "kind": "C", "used_memory_bytes": 512 << 20}]}
    assert from_dict(doc).busy == doc["busy"]


def test_a_process_that_appears_during_a_test() -> None:
    """GPU 0: NVML lists this run's PID as well, so its PIDs are ours to compare: 5151 is another process.
    GPU 1: NVML never lists this run's PID (a container's view): 6161 cannot be attributed."""
    src = fake(2, f"busy:{ME}@gpu=0", "busy:5151@gpu=0,after=0.7", "busy:6161@gpu=1,after=0.7")
    cfg = BurninConfig(
        node="n", backend="cpu", tests=("gemm",), dtypes=("fp32", "bf16"), seconds=1.5, cpu_devices=2
    )
    rep = run_burnin(cfg, source=src)
    for test in ("gemm-fp32", "gemm-bf16"):  # it appeared during the first dtype and stayed for the second
        g = by_gpu(rep, test)
        assert g[0].verdict == Verdict.INCONCLUSIVE and "GPU 0 during the test: PID 5151" in g[0].reason
        assert g[1].verdict == Verdict.WARN and "busy_pids" not in g[1].evidence
    assert rep.busy is not None
    assert rep.busy["before"] == {} and [p["pid"] for p in rep.busy["during"]["0"]] == [5151]
    assert [p["pid"] for p in rep.busy["unattributed"]["1"]] == [6161]
    ex = by_gpu(rep, "exclusive")[None]
    assert ex.verdict == Verdict.INCONCLUSIVE and "GPU 0 during them: PID 5151" in ex.reason
    assert "GPU 1: PID 6161 (C, 512 MiB) appeared during the tests, unattributed" in ex.reason


def test_idle_gpus_pass_the_check() -> None:
    rep = gemm_run(fake(2, f"busy:{ME}"), devices=2, seconds=0.3)
    ex = by_gpu(rep, "exclusive")[None]
    assert (
        ex.verdict == Verdict.PASS and ex.reason == "no other process on GPU 0, 1 before or during the tests"
    )
    assert {r.verdict for r in rep.results if r.test == "gemm-fp32"} == {Verdict.WARN}  # no floor on a CPU
    assert exit_code(rep.results) == 0


def test_without_a_process_list_the_check_is_not_made() -> None:
    rep = gemm_run(None, devices=2, seconds=0.2)
    ex = by_gpu(rep, "exclusive")[None]
    assert ex.verdict == Verdict.SKIPPED
    assert ex.reason == "not checked for other processes on the GPUs: no NVML on the CPU backend"
    assert rep.busy is not None and rep.busy["checked"] is False
    # a source that has no process list (the protocol's optional part) is not taken for an idle GPU
    check = BusyCheck(object(), [0])  # type: ignore[arg-type]
    check.before_tests(time.time())
    assert check.result("n").verdict == Verdict.SKIPPED
    assert check.result("n").reason.endswith("the GPU source cannot list processes")


def test_a_gpu_whose_processes_cannot_be_listed_is_named() -> None:
    src = fake(2)

    class Half:  # the fake, but GPU 1's list fails as NVML's does on a GPU that does not support it
        def __getattr__(self, name: str) -> object:
            return getattr(src, name)

        def running_processes(self, index: int, now: float) -> list[GpuProcess]:
            if index == 1:
                from fleettool.sources.base import NotSupported

                raise NotSupported("nvmlDeviceGetComputeRunningProcesses(gpu 1): Not Supported")
            return src.running_processes(index, now)

    check = BusyCheck(Half(), [0, 1])  # type: ignore[arg-type]
    check.before_tests(time.time())
    r = check.result("n")
    assert r.verdict == Verdict.WARN and r.reason.startswith("no other process on GPU 0 before or during")
    assert "GPU 1: processes could not be listed (nvmlDeviceGetComputeRunningProcesses(gpu 1)" in r.reason


def test_this_run_and_its_children_are_ours() -> None:
    child = subprocess.Popen(["sleep", "30"])
    # a process this run did not start: the shell's `sleep` outlives the shell and is re-parented away
    out = subprocess.run(["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True)
    orphan = int(out.stdout.strip())
    try:
        assert is_ours(ME) and is_ours(child.pid)
        assert not is_ours(orphan) and not is_ours(os.getppid()) and not is_ours(1)
        assert not is_ours(2**22 + 12345)  # no such process here (another PID namespace's)
    finally:
        child.kill()
        child.wait()
        os.kill(orphan, 9)


def test_busy_injection_needs_a_pid() -> None:
    with pytest.raises(ValueError, match="busy needs a PID"):
        parse_injection("busy@gpu=1")
    assert fake(4, "busy:77@gpu=3,after=0").running_processes(3, time.time()) == [
        GpuProcess(77, "C", 512 << 20)
    ]


def test_a_process_gone_by_a_later_test_no_longer_counts() -> None:
    """Before the tests PID 4937 holds GPU 0; the next step's watch lists only this run's own PID there: that
    step's figures are the GPU's. A step with no watch (all-reduce) cannot know and keeps counting it."""
    check = BusyCheck(fake(1, "busy:4937@gpu=0"), [0])
    check.before_tests(time.time())
    mine = GpuProcess(ME, "C", 1 << 30)
    check.begin_step()
    check.observe({0: {ME: mine}}, self_seen={0}, listed={0})
    r = Result("n", 0, "hbm", Verdict.PASS, 10.0, reason="fine")
    check.apply([r])
    assert r.verdict == Verdict.PASS and "busy_pids" not in r.evidence
    check.begin_step()
    node_level = Result("n", None, "allreduce-2", Verdict.PASS, 5.0, reason="fine")
    check.apply([node_level])
    assert node_level.verdict == Verdict.INCONCLUSIVE and node_level.evidence["busy_pids"] == [4937]
    assert node_level.reason.endswith("the figures measure its load too (measured: fine)")
    # and a wrong result stays FAIL on a busy GPU: another process cannot change its bits
    bad = Result(
        "n", 0, "gemm-bf16", Verdict.FAIL, reason="silent data corruption", evidence={"corruption": True}
    )
    check.apply([bad])
    assert bad.verdict == Verdict.FAIL and "also busy (GPU 0 before the test: PID 4937" in bad.reason
