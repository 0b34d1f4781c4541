"""One GPU whose NVML call hangs stops only that GPU: the other GPUs keep being read at their cadence, an event
on another GPU is still seen, the hung GPU is named (which GPU, which call) and its return is noticed.

The fake source plays the real H200 recording for 8 GPUs; `hang@gpu=3,read=temperature` blocks GPU 3's
temperature read on a real thread until the test releases it; the watchdog is the agent's own runner and loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fleettool.agent.loop import Agent, AgentConfig
from fleettool.agent.watchdog import CollectorRunner
from fleettool.collectors.base import Collected
from fleettool.collectors.nvml import NvmlCollector
from fleettool.export.metrics_server import AgentMetrics
from fleettool.sources.fake import FakeSource, parse_injection
from tests.conftest import H200

REC = H200 / "nvml.om.gz"
T0 = 1_800_000_000.0
LIMIT_S = 0.3


def _source() -> FakeSource:
    inject = ["hang@gpu=3,read=temperature,after=2", "dbe@gpu=5,after=5"]
    return FakeSource(gpus=8, recording=REC, inject=[parse_injection(s) for s in inject], clock=T0)


BEFORE: set[threading.Thread] = set()


def _collector_threads() -> int:
    """The NVML collector's worker threads alive that this test started."""
    return sum(1 for t in threading.enumerate() if t.name == "collector-nvml" and t not in BEFORE)


@pytest.fixture
def hung() -> Iterator[tuple[FakeSource, CollectorRunner]]:
    BEFORE.clear()
    BEFORE.update(threading.enumerate())
    src = _source()
    c = NvmlCollector(src, "gpu-17")
    assert c.start()
    runner = CollectorRunner(c, limit_s=LIMIT_S)
    try:
        yield src, runner
    finally:
        src.release_hangs()
        runner.close()
        c.close()


def _temps(c: Collected) -> set[int]:
    return {s.gpu for s in c.samples if s.metric == "gpu_temp_c" and s.gpu is not None}


def _value(c: Collected, metric: str, gpu: int) -> float | None:
    return next((s.value for s in c.samples if s.metric == metric and s.gpu == gpu), None)


def test_the_other_gpus_go_on_and_a_dbe_on_another_gpu_is_seen(
    hung: tuple[FakeSource, CollectorRunner],
) -> None:
    src, runner = hung
    runs = []
    for k in range(9):
        t = time.monotonic()
        runs.append(runner.run(T0 + k))
        assert time.monotonic() - t < LIMIT_S + 1.0  # no tick waits longer than the watchdog
    assert all(r.status == "ok" and r.collected is not None for r in runs), [r.status for r in runs]
    got = [r.collected for r in runs if r.collected is not None]
    # before the hang every GPU; the hung tick hands back GPUs 0-2 (read before GPU 3 hung); then all but 3
    assert [_temps(c) for c in got[:2]] == [set(range(8))] * 2
    assert _temps(got[2]) == {0, 1, 2} and runs[2].detail == "set aside: temperature(gpu 3)"
    assert all(_temps(c) == {0, 1, 2, 4, 5, 6, 7} for c in got[3:])
    # GPU 3 named, with the call: an event and agent_nvml_gpu_hung, and its skipped reads counted
    (ev,) = [e for e in got[2].events if e.gpu == 3]
    assert ev.kind == "agent" and "temperature(gpu 3)" in ev.message and "GPU 3 hung" in ev.message
    assert ev.uuid == src.device_info(3).uuid
    assert [_value(c, "agent_nvml_gpu_hung", 3) for c in got[2:]] == [1.0] * 7
    # the reads the hung collection had left are counted: GPU 3's 5 other gauges, GPUs 4-7's 6 each; then
    # GPU 3's 6 gauges a tick (and at the DBE, the counters it would have read at once: 7 more)
    assert [_value(got[2], "agent_nvml_reads_skipped_total", g) for g in range(3, 8)] == [5.0] + [6.0] * 4
    skipped = [_value(c, "agent_nvml_reads_skipped_total", 3) for c in got[3:]]
    assert skipped[:3] == [11.0, 17.0, 30.0] and skipped == sorted(skipped)
    assert all(c.errors >= 1 for c in got[2:])  # the collector is not all well while a GPU is hung
    # the double-bit error injected on GPU 5 after GPU 3 hung: its events, and its ECC counters read at once
    dbe = [(e.kind, e.code) for c in got for e in c.events if e.gpu == 5]
    assert dbe == [("xid", 48), ("xid", 63), ("nvml-event", None)]
    assert _value(got[5], "ecc_dbe_volatile", 5) is not None
    assert runner.retired_workers == 1 and _collector_threads() == 2  # one left in GPU 3's call


def test_the_hung_gpu_is_read_again_when_its_call_returns(hung: tuple[FakeSource, CollectorRunner]) -> None:
    src, runner = hung
    for k in range(4):
        runner.run(T0 + k)
    assert _collector_threads() == 2
    src.release_hangs()
    deadline = time.monotonic() + 5
    while _collector_threads() > 1 and time.monotonic() < deadline:  # the stuck worker leaves once freed
        time.sleep(0.01)
    assert _collector_threads() == 1
    back = runner.run(T0 + 4).collected
    assert back is not None and _temps(back) == set(range(8))
    (ev,) = [e for e in back.events if e.gpu == 3]
    assert "temperature(gpu 3) returned after" in ev.message and "GPU 3 is read again" in ev.message
    assert _value(back, "agent_nvml_gpu_hung", 3) == 0.0
    after = runner.run(T0 + 5).collected
    assert after is not None and _temps(after) == set(range(8)) and after.errors == 0


def test_the_agent_shows_the_hung_gpu_on_metrics_and_keeps_the_others() -> None:
    """The agent's own loop: GPU 3 hung in /metrics (agent_nvml_gpu_hung), the collector not hung, the
    other GPUs' temperatures fresh, the DBE of GPU 5 counted."""
    src = _source()
    clock = [T0]
    seen: list[Collected] = []
    ag = Agent(
        AgentConfig(db=None, node="gpu-17", quiet=True, watchdog_s=LIMIT_S),
        [NvmlCollector(src, "gpu-17")],
        sink=seen.append,
        clock=lambda: clock[0],
    )
    try:
        ag.start()
        for _k in range(8):
            seen.clear()
            ag.tick()
            clock[0] += 1.0
        reg = CollectorRegistry()
        reg.register(AgentMetrics("gpu-17", lambda: dict(ag.latest), lambda: dict(ag.event_counts)))
        fams = {f.name: f for f in text_string_to_metric_families(generate_latest(reg).decode())}
    finally:
        src.release_hangs()
        for r in ag.runners.values():
            r.close()
    hung = {s.labels["gpu"]: s.value for s in fams["fleettool_agent_nvml_gpu_hung"].samples}
    assert hung == {"3": 1.0, "4": 0.0, "5": 0.0, "6": 0.0, "7": 0.0}  # 4-7: in the tick GPU 3 hung
    collector_hung = [s.value for s in fams["fleettool_agent_collector_hung"].samples]
    assert collector_hung == [0.0]
    temps = {s.labels["gpu"] for s in fams["fleettool_gpu_temp_celsius"].samples}
    assert temps == {str(g) for g in range(8)}
    # the last tick read every GPU but 3
    assert set().union(*(_temps(c) for c in seen)) == {0, 1, 2, 4, 5, 6, 7}
    assert ag.event_counts.get(("xid", 48)) == 1
    skipped = {
        s.labels["gpu"]: s.value
        for s in fams["fleettool_agent_nvml_reads_skipped"].samples
        if s.name.endswith("_total")
    }
    assert skipped["3"] > 6 and {g: skipped[g] for g in "4567"} == {g: 6.0 for g in "4567"}
