"""NotSupported is learned only from NVML's not-supported codes; a transient NVML error is counted and retried.

NVML cannot run here (no GPU): NvmlSource is given a stand-in pynvml module with pynvml's shapes (NVMLError
with `.value`, field values with a per-field `nvmlReturn`), whose calls fail with the NVML codes a test names.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from fleettool.collectors.nvml import NvmlCollector
from fleettool.model import EventKind
from fleettool.sources.base import GpuLost, NotSupported, SourceError, Tier
from fleettool.sources.nvml import NvmlSource

NOT_SUPPORTED, TIMEOUT, UNKNOWN, GPU_IS_LOST, FUNCTION_NOT_FOUND = 3, 10, 999, 15, 13


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


class StandIn(types.ModuleType):
    """pynvml for one GPU: the calls in `fail` raise their queued codes first (a code per call), then answer;
    any call not defined raises NOT_SUPPORTED, as a driver without the feature does."""

    def __init__(self) -> None:
        super().__init__("pynvml")
        self.NVMLError = NVMLError
        self.NVML_NVLINK_MAX_LINKS = 2
        self.fail: dict[str, list[int]] = {}
        self.field_codes: list[int] = []  # per-field nvmlReturn of the next field batches (one list per call)
        self.calls: dict[str, int] = {}

    def _answer(self, name: str, value: Any) -> Any:
        self.calls[name] = self.calls.get(name, 0) + 1
        if self.fail.get(name):
            raise NVMLError(self.fail[name].pop(0))
        return value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("NVML_"):  # a constant the reads pass (NVML_TEMPERATURE_GPU, ...)
            return 0
        if not name.startswith("nvml"):
            raise AttributeError(name)
        answers: dict[str, Any] = {
            "nvmlInit": None,
            "nvmlShutdown": None,
            "nvmlDeviceGetCount": 1,
            "nvmlDeviceGetHandleByIndex": "h0",
            "nvmlSystemGetDriverVersion": "580.159.04",
            "nvmlDeviceGetUUID": "GPU-5a1e0000-0000-4000-8000-000000000000",
            "nvmlDeviceGetName": "NVIDIA H200",
            "nvmlDeviceGetPciInfo": SimpleNamespace(busId="00000000:18:00.0"),
            "nvmlDeviceGetSerial": "1653724000000",
            "nvmlDeviceGetNvLinkState": 1,
            "nvmlDeviceGetNvLinkErrorCounter": 0,
        }
        if name == "nvmlDeviceGetFieldValues":
            return self._fields
        if name not in answers:
            return lambda *a: self._answer(name, None) if self.fail.get(name) else _raise(name, self)
        return lambda *a: self._answer(name, answers[name])

    def _fields(self, h: Any, ids: list[int]) -> list[Any]:
        self._answer("nvmlDeviceGetFieldValues", None)
        codes = self.field_codes.pop(0) if self.field_codes else [0] * len(ids)
        return [
            SimpleNamespace(nvmlReturn=c, valueType=1, value=SimpleNamespace(uiVal=40 + k))
            for k, c in zip(range(len(ids)), codes, strict=False)
        ]


def _raise(name: str, nv: StandIn) -> Any:
    nv.calls[name] = nv.calls.get(name, 0) + 1
    raise NVMLError(NOT_SUPPORTED)


@pytest.fixture
def nv(monkeypatch: pytest.MonkeyPatch) -> Iterator[StandIn]:
    m = StandIn()
    monkeypatch.setitem(sys.modules, "pynvml", m)
    yield m


def _source(nv: StandIn) -> NvmlSource:
    src = NvmlSource()
    src.open()
    return src


@pytest.mark.parametrize("code", [UNKNOWN, TIMEOUT])
def test_a_transient_nvlink_state_error_is_an_error_not_not_supported(nv: StandIn, code: int) -> None:
    src = _source(nv)
    nv.fail["nvmlDeviceGetNvLinkState"] = [code]
    with pytest.raises(SourceError) as got:
        src.read(0, "nvlink", 0.0)
    assert not isinstance(got.value, NotSupported)
    assert ("nvlink_link_up", "link=0", 1.0) in src.read(0, "nvlink", 1.0)  # answered the next time


def test_a_lost_gpu_on_nvlink_state_is_lost_not_not_supported(nv: StandIn) -> None:
    src = _source(nv)
    nv.fail["nvmlDeviceGetNvLinkState"] = [GPU_IS_LOST]
    with pytest.raises(GpuLost):
        src.read(0, "nvlink", 0.0)


def test_nvlink_not_supported_and_function_not_found_are_not_supported(nv: StandIn) -> None:
    src = _source(nv)
    for code in (NOT_SUPPORTED, FUNCTION_NOT_FOUND):
        nv.fail["nvmlDeviceGetNvLinkState"] = [code]
        with pytest.raises(NotSupported):
            src.read(0, "nvlink", 0.0)


def test_a_transient_error_past_link_0_fails_the_read_instead_of_dropping_the_links(nv: StandIn) -> None:
    src = _source(nv)
    assert {s for _, s, _ in src.read(0, "nvlink", 0.0)} == {"link=0", "link=1"}
    real = nv.__getattr__("nvmlDeviceGetNvLinkState")

    def link_1_times_out(h: Any, link: int) -> Any:
        if link == 1:
            raise NVMLError(TIMEOUT)
        return real(h, link)

    nv.nvmlDeviceGetNvLinkState = link_1_times_out  # type: ignore[attr-defined]
    with pytest.raises(SourceError) as e:
        src.read(0, "nvlink", 1.0)
    assert not isinstance(e.value, NotSupported)


@pytest.mark.parametrize("code", [UNKNOWN, TIMEOUT])
def test_a_field_batch_with_transient_errors_is_an_error_not_not_supported(nv: StandIn, code: int) -> None:
    src = _source(nv)
    nv.field_codes = [[code]]
    with pytest.raises(SourceError) as got:
        src.read(0, "mem_temperature", 0.0)
    assert not isinstance(got.value, NotSupported)
    assert src.read(0, "mem_temperature", 1.0) == [("mem_temp_c", "", 40.0)]


def test_a_field_batch_of_not_supported_fields_is_not_supported_and_lost_is_lost(nv: StandIn) -> None:
    src = _source(nv)
    nv.field_codes = [[NOT_SUPPORTED] * 7, [GPU_IS_LOST] * 7]
    with pytest.raises(NotSupported):
        src.read(0, "pcie_counters", 0.0)
    with pytest.raises(GpuLost):
        src.read(0, "pcie_counters", 1.0)
    # some fields answered, others not supported: the answered ones, no error
    nv.field_codes = [[0, NOT_SUPPORTED, 0, NOT_SUPPORTED, 0, 0, 0]]
    assert len(src.read(0, "pcie_counters", 2.0)) == 5


def test_the_collector_retries_a_transiently_failing_read_at_its_next_due_time(nv: StandIn) -> None:
    """One UNKNOWN on NvLinkState and one TIMEOUT in a field batch: counted as errors, and both reads are
    made again at the next DEAR deadline (neither learned as NotSupported)."""
    src = NvmlSource()
    c = NvmlCollector(src, "gpu-17", tier_s={Tier.MEDIUM: 10, Tier.DEAR: 60, Tier.STATIC: 600})
    assert c.start()
    nv.fail["nvmlDeviceGetNvLinkState"] = [UNKNOWN]
    nv.field_codes = [[TIMEOUT] * 1, [0] * 7]  # mem_temperature (MEDIUM) then pcie_counters (DEAR)
    t0 = 1_800_000_000.0
    first = c.collect(t0)
    assert first.errors >= 2
    errs = [e.message for e in first.events if e.kind == EventKind.NVML_ERROR.value]
    assert any("NvLinkState" in m for m in errs) and any("FieldValues" in m for m in errs)
    assert (0, "nvlink") not in c.unsupported and (0, "mem_temperature") not in c.unsupported
    got: set[str] = set()
    for k in range(1, 61):
        got |= {s.metric for s in c.collect(t0 + k).samples}
    assert "nvlink_link_up" in got and "mem_temp_c" in got
    c.close()
