"""The NVML collector tells the truth about itself: a GPU lost when the agent starts is reported and identified
once it answers; a read that keeps failing is one event when it starts and one when it answers again (with the
count), not one per collection. Over the fake source fed by the real H200 recording."""

from __future__ import annotations

from fleettool.collectors.nvml import NvmlCollector
from fleettool.model import EventKind
from fleettool.sources.base import GpuEventNotice, SourceError, Tier
from fleettool.sources.fake import FakeSource, parse_injection
from tests.conftest import H200

REC = H200 / "nvml.om.gz"
T0 = 1_800_000_000.0


def test_a_gpu_lost_at_start_gets_its_event_and_its_identity_when_it_answers() -> None:
    src = FakeSource(gpus=2, recording=REC, inject=[parse_injection("lost@gpu=1,for=5s")], clock=T0)
    c = NvmlCollector(src, "gpu-17")
    assert c.start()
    runs = [c.collect(T0 + k) for k in range(10)]
    lost = [e for r in runs for e in r.events if e.kind == EventKind.NVML_ERROR.value]
    assert [(e.ts, e.gpu, e.code) for e in lost] == [(T0, 1, 15)] and "lost" in lost[0].message
    back = [e for r in runs for e in r.events if "answers NVML again" in e.message]
    assert [(e.ts, e.gpu) for e in back] == [(T0 + 5, 1)] and "after 5 failed collections" in back[0].message
    uuid = src.device_info(1).uuid
    assert back[0].uuid == uuid
    assert any(g.gpu == 1 and g.uuid == uuid and g.serial for g in runs[5].gpus)  # the inventory learns it
    gpu1 = [s for r in runs for s in r.samples if s.gpu == 1 and s.metric == "gpu_temp_c"]
    assert [s.ts for s in gpu1] == [T0 + k for k in range(5, 10)]
    assert {s.uuid for s in gpu1} == {uuid}


def test_a_read_that_keeps_failing_is_one_event_then_one_when_it_answers_with_the_count() -> None:
    src = FakeSource(
        gpus=1, recording=REC, inject=[parse_injection("error:999@read=power,count=300")], clock=T0
    )
    c = NvmlCollector(src, "gpu-17")
    assert c.start()
    runs = [c.collect(T0 + k) for k in range(305)]
    assert sum(r.errors for r in runs) == 300  # every failure counted (the health gauge)
    evs = [e for r in runs for e in r.events]
    failing = [e for e in evs if e.kind == EventKind.NVML_ERROR.value]
    assert [(e.ts, e.gpu) for e in failing] == [(T0, 0)] and "power(gpu 0): Unknown Error" in failing[
        0
    ].message
    back = [e for e in evs if "answers again" in e.message]
    assert [(e.ts, e.gpu) for e in back] == [(T0 + 300, 0)] and "after 300 failed tries" in back[0].message
    assert len(evs) == 2


def test_an_error_injection_raises_the_nvml_code_it_names() -> None:
    src = FakeSource(gpus=1, recording=REC, inject=[parse_injection("error:3@read=power,count=1")], clock=T0)
    c = NvmlCollector(src, "gpu-17")
    assert c.start()
    c.collect(T0)
    assert (0, "power") in c.unsupported  # NVML_ERROR_NOT_SUPPORTED is learned


class Broken(FakeSource):
    """NVML's event wait and device count fail the next `left[...]` times they are asked."""

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.left = {"events": 0, "count": 0}

    def _fail(self, what: str, msg: str) -> None:
        if self.left[what] > 0:
            self.left[what] -= 1
            raise SourceError(msg)

    def poll_events(self, now: float) -> list[GpuEventNotice]:
        self._fail("events", "nvmlEventSetWait_v2: Unknown Error")
        return super().poll_events(now)

    def device_count(self) -> int:
        self._fail("count", "nvmlDeviceGetCount: Unknown Error")
        return super().device_count()


def test_a_failing_event_wait_and_device_count_are_events_on_state_changes_only() -> None:
    src = Broken(gpus=1, recording=REC, clock=T0)
    c = NvmlCollector(src, "gpu-17", tier_s={Tier.MEDIUM: 1, Tier.DEAR: 60, Tier.STATIC: 600})
    assert c.start()
    src.left = {"events": 100, "count": 100}
    runs = [c.collect(T0 + k) for k in range(110)]
    assert all(r.errors >= 1 for r in runs[:100]) and all(r.errors == 0 for r in runs[100:])
    msgs = [e.message for r in runs for e in r.events]
    assert msgs == [
        "event wait: nvmlEventSetWait_v2: Unknown Error",
        "nvmlDeviceGetCount: nvmlDeviceGetCount: Unknown Error",
        "NVML's event wait answers again after 100 failed tries",
        "nvmlDeviceGetCount answers again after 100 failed tries",
    ]
