"""The NVML collector over the fake source fed by the real H200 recording, and over the live NVML
(which, on a machine without a driver, must report itself unavailable instead of crashing)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from fleettool.agent.watchdog import CollectorRunner
from fleettool.collectors.nvml import NvmlCollector
from fleettool.sources.base import Tier
from fleettool.sources.fake import FakeSource, parse_injection
from fleettool.sources.nvml import NvmlSource
from tests.conftest import H200

REC = H200 / "nvml.om.gz"


class Counting(FakeSource):
    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.calls: dict[tuple[int, str], int] = {}

    def read(self, index: int, what: str, now: float):  # type: ignore[no-untyped-def]
        self.calls[(index, what)] = self.calls.get((index, what), 0) + 1
        return super().read(index, what, now)


def _collector(src: FakeSource, **kw: object) -> NvmlCollector:
    c = NvmlCollector(src, "gpu-17", **kw)  # type: ignore[arg-type]
    assert c.start()
    return c


def test_values_follow_the_recorded_h200_under_gemm() -> None:
    t0 = 1_800_000_000.0
    src = FakeSource(gpus=1, recording=REC, clock=t0)
    c = _collector(src)
    series: dict[str, list[float]] = {}
    for k in range(50):
        for s in c.collect(t0 + k).samples:
            if s.gpu == 0:
                series.setdefault(s.metric, []).append(s.value)
    assert max(series["power_w"]) > 680 and min(series["power_w"]) < 150  # idle -> 700 W cap -> idle
    assert {int(v) & 0x4 for v in series["clock_event_reasons"]} == {0, 4}
    assert min(series["sm_clock_mhz"]) < 1600 and max(series["sm_clock_mhz"]) == 1980
    assert series["temp_slowdown_c"] == [89.0] and series["pcie_link_width_max"] == [16.0]
    assert series["remap_bank_max"][0] == 3072.0
    # tiers: energy is sampled at most once a minute, the FAST gauges every tick
    assert len(series["energy_j"]) == 1 and len(series["gpu_temp_c"]) == 50


def test_not_supported_is_learned_once_per_gpu() -> None:
    src = Counting(gpus=2, recording=REC)
    c = _collector(src, tier_s={Tier.FAST: 1, Tier.MEDIUM: 1, Tier.DEAR: 1, Tier.STATIC: 1})
    now = time.time()
    for k in range(5):
        c.collect(now + k)
    # the H200 has no NVLink and no retired pages: asked once per GPU, then never again
    assert src.calls[(0, "nvlink")] == 1 and src.calls[(1, "nvlink")] == 1
    assert src.calls[(0, "retired_pages")] == 1
    assert src.calls[(0, "temperature")] == 5
    assert (0, "nvlink") in c.unsupported


def test_xid_79_is_an_event_then_the_gpu_is_lost_once() -> None:
    t0 = 1_800_000_000.0
    src = FakeSource(gpus=4, recording=REC, inject=[parse_injection("xid:79@gpu=3,after=2")], clock=t0)
    c = _collector(src)
    events = []
    gpu3 = 0
    for k in range(6):
        got = c.collect(t0 + k)
        events += got.events
        gpu3 += sum(1 for s in got.samples if s.gpu == 3)
    xids = [e for e in events if e.kind == "xid"]
    assert [(e.gpu, e.code) for e in xids] == [(3, 79)]
    assert xids[0].uuid == src.device_info(3).uuid and xids[0].pci_bus_id == "0000:48:00"
    lost = [e for e in events if e.kind == "nvml-error"]
    assert len(lost) == 1 and lost[0].gpu == 3 and "lost" in lost[0].message
    assert gpu3 > 0  # it answered before the XID


def test_nvml_error_is_reported_once_per_change_and_counted() -> None:
    src = FakeSource(gpus=1, recording=REC, inject=[parse_injection("error@read=power")])
    c = _collector(src)
    now = time.time()
    results = [c.collect(now + k) for k in range(3)]
    errs = [e for r in results for e in r.events if e.kind == "nvml-error"]
    assert len(errs) == 1 and "power(gpu 0)" in errs[0].message
    assert all(r.errors == 1 for r in results)
    assert all(any(s.metric == "gpu_temp_c" for s in r.samples) for r in results)  # other reads carry on


def test_missing_gpu_shows_as_count_below_expected() -> None:
    src = FakeSource(gpus=8, recording=REC, inject=[parse_injection("missing-gpu")])
    c = _collector(src, expected_gpus=8)
    got = {s.metric: s.value for s in c.collect(time.time()).samples if s.gpu is None}
    assert got["gpu_count"] == 7 and got["gpu_count_expected"] == 8


class CountHangs(FakeSource):
    """nvmlDeviceGetCount blocks once released is not set: a call outside any one GPU's read."""

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.released = threading.Event()
        self.hang_count = False

    def device_count(self) -> int:
        if self.hang_count:
            self._inflight = "nvmlDeviceGetCount"
            self.released.wait()
        return super().device_count()


def test_watchdog_marks_a_hung_call_and_names_it() -> None:
    """A GPU's read that hangs sets that GPU aside (the collection comes back, naming the call); a call that
    is no GPU's (the device count) hangs the whole collector, still-hung until it returns."""
    src = FakeSource(gpus=1, recording=REC, inject=[parse_injection("hang@read=energy")])
    c = _collector(src)
    runner = CollectorRunner(c, limit_s=0.3)
    t = time.monotonic()
    res = runner.run(time.time())
    assert res.status == "ok" and res.detail == "set aside: energy(gpu 0)" and res.collected is not None
    assert [e.gpu for e in res.collected.events if "energy(gpu 0)" in e.message] == [0]
    assert time.monotonic() - t < 2
    assert runner.run(time.time()).status == "ok"
    src.release_hangs()
    runner.close()

    src2 = CountHangs(gpus=1, recording=REC)
    c2 = _collector(src2)
    runner2 = CollectorRunner(c2, limit_s=0.3)
    src2.hang_count = True
    res = runner2.run(time.time())
    assert res.status == "hung" and res.detail == "nvmlDeviceGetCount"
    assert runner2.run(time.time()).status == "still-hung"
    src2.hang_count = False
    src2.released.set()
    deadline = time.monotonic() + 5
    while (res := runner2.run(time.time())).status == "still-hung" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert res.status == "recovered"
    runner2.close()


def test_live_nvml_without_a_driver_is_unavailable_not_a_crash() -> None:
    src = NvmlSource()
    c = NvmlCollector(src, "ci")
    try:
        ok = c.start()
    finally:
        c.close()
    if ok:  # a machine with a GPU: the collector must produce samples instead
        assert c.collect(time.time()).samples
    else:
        assert c.reason and "NVML" in c.reason
        assert c.collect(time.time()).samples == []


def test_unknown_injection_is_refused_with_the_list() -> None:
    import pytest

    with pytest.raises(ValueError, match="known: .*thermal"):
        parse_injection("meteor@gpu=1")
    assert parse_injection("thermal@gpu=2,after=30s").after_s == 30.0


def test_recording_path_missing_makes_fake_unavailable(tmp_path: Path) -> None:
    c = NvmlCollector(FakeSource(gpus=1, recording=tmp_path / "none.om"), "n")
    assert not c.start() and "none.om" in (c.reason or "")


def _gauge_reads(c: NvmlCollector, times: list[float]) -> tuple[dict[int, int], list[dict[str, float]]]:
    """gpu_temp_c samples per GPU over collections at `times`, and each collection's skip counters by tier
    (the last one: the latest value each tier's counter was reported with, as /metrics shows it)."""
    temps: dict[int, int] = {}
    skips = []
    for t in times:
        got = c.collect(t).samples
        for s in got:
            if s.metric == "gpu_temp_c" and s.gpu is not None:
                temps[s.gpu] = temps.get(s.gpu, 0) + 1
        skips.append({s.sub: s.value for s in got if s.metric == "agent_nvml_periods_skipped_total"})
    latest = {k: v for d in skips for k, v in d.items()}
    return temps, [*skips, latest]


def test_late_ticks_skip_no_gauge() -> None:
    """Ticks that start late (1.002 s apart, or 3 ms late every other second as beside a busy CLI) take
    every 1 s gauge: none is skipped, and no skip is counted."""
    t0 = 1_800_000_000.0
    c = _collector(FakeSource(gpus=2, recording=REC, clock=t0))
    jitter = [t0 + k + (0.003 if k % 2 else 0.0) for k in range(60)]
    temps, skips = _gauge_reads(c, jitter)
    assert temps == {0: 60, 1: 60}
    assert all(s.get("tier=fast", 0) == 0 for s in skips) and skips[-1]["tier=fast"] == 0
    drift = [jitter[-1] + 1 + 1.002 * k for k in range(120)]
    temps, skips = _gauge_reads(c, drift)
    assert temps == {0: 120, 1: 120}
    assert skips[-1]["tier=fast"] == 0 and skips[-1]["tier=medium"] == 0


def test_a_missed_period_is_a_counted_skip() -> None:
    """A tick that never came (the loop stalled 3 s) is a skip, counted per tier and reported at once; a
    wall clock stepped a day forward or an hour back is not lateness and counts nothing."""
    t0 = 1_800_000_000.0
    c = _collector(FakeSource(gpus=2, recording=REC, clock=t0))
    times = [t0 + k for k in range(5)] + [t0 + 7.0, t0 + 8.0]  # ticks at +5 s and +6 s never ran
    temps, skips = _gauge_reads(c, times)
    assert temps == {0: 7, 1: 7}
    assert skips[5]["tier=fast"] == 2 and skips[5]["tier=medium"] == 0  # reported in the late collection
    assert c.schedule.skipped[Tier.FAST] == 2
    # ticks 1.002 s apart for 600 s: the 600th period really has no tick of its own
    _gauge_reads(c, [t0 + 9 + 1.002 * k for k in range(600)])
    assert c.schedule.skipped[Tier.FAST] == 3
    # a clock set a day ahead, then an hour back: every tier read at once, nothing counted as skipped
    temps, skips = _gauge_reads(c, [t0 + 86_400 + k for k in range(3)] + [t0 + 82_800 + k for k in range(3)])
    assert temps == {0: 6, 1: 6}
    assert c.schedule.skipped == {Tier.FAST: 3, Tier.MEDIUM: 0, Tier.DEAR: 0, Tier.STATIC: 0}
