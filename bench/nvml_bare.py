"""The bare baseline of the agent benchmark: a plain nvidia-ml-py loop making the NVML collector's reads at its
rates, and nothing else (no fleettool import, no store, no /metrics, no threads).

The plan (--plan JSON, written by bench/agent_overhead.py from fleettool.sources.base.READS and
fleettool.collectors.nvml.DEFAULT_TIER_S) names each read and its period in seconds. Each tick (1 s) makes
the reads that are due for every GPU, converts each value to float and keeps the latest in a dict, as the
collector would before handing rows on; a read the GPU does not support is dropped for that GPU after its
first NOT_SUPPORTED, as the collector does. Every tick it also drains the XID event set without waiting, and
counts the devices when the 10 s tier is due, as the collector does.

--fake: the same loop without a GPU: each read spins the CPU for its measured H200 cost (the plan's costs_us,
fleettool.sources.fake.READ_COST_US), exactly as `fleettool agent --source fake --fake-costs` does, for the
plan's GPUs and only the reads the fake source answers. nvidia-ml-py is imported (not initialised) so that
the baseline holds the same Python modules as the live one.

Runs until SIGTERM or --seconds; prints one JSON line (ticks, reads, unsupported) at exit.

  python bench/nvml_bare.py --plan plan.json [--fake] [--seconds 60]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pynvml as nv

Reader = Callable[[int, Any], list[float]]


def _fields(h: Any, ids: list[int]) -> list[float]:
    vals = nv.nvmlDeviceGetFieldValues(h, ids)
    out = [float(v.value.ullVal if v.valueType != 0 else v.value.dVal) for v in vals if v.nvmlReturn == 0]
    if not out:
        raise nv.NVMLError(nv.NVML_ERROR_NOT_SUPPORTED)
    return out


def _clock_events(h: Any) -> list[float]:
    fn = (
        getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        or nv.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    return [float(fn(h))]


def _ecc(h: Any) -> list[float]:
    cur, _pending = nv.nvmlDeviceGetEccMode(h)
    out = [float(cur)]
    for e, c in (
        (nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC),
        (nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC),
        (nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_AGGREGATE_ECC),
        (nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_AGGREGATE_ECC),
    ):
        out.append(float(nv.nvmlDeviceGetTotalEccErrors(h, e, c)))
    return out


def _persistence(h: Any) -> list[float]:
    out = [float(nv.nvmlDeviceGetPersistenceMode(h))]
    with contextlib.suppress(nv.NVMLError):
        out.append(float(nv.nvmlDeviceGetPerformanceState(h)))
    return out


def _nvlink(h: Any) -> list[float]:
    out: list[float] = []
    for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
        try:
            out.append(float(nv.nvmlDeviceGetNvLinkState(h, link)))
        except nv.NVMLError:
            if link == 0:
                raise
            break
        for counter in range(4):
            try:
                out.append(float(nv.nvmlDeviceGetNvLinkErrorCounter(h, link, counter)))
            except nv.NVMLError:
                continue
    return out


def _limits(h: Any) -> list[float]:
    out: list[float] = []
    calls: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [
        (nv.nvmlDeviceGetTemperatureThreshold, (nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,)),
        (nv.nvmlDeviceGetTemperatureThreshold, (nv.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,)),
        (nv.nvmlDeviceGetTemperatureThreshold, (nv.NVML_TEMPERATURE_THRESHOLD_GPU_MAX,)),
        (nv.nvmlDeviceGetTemperatureThreshold, (nv.NVML_TEMPERATURE_THRESHOLD_MEM_MAX,)),
        (nv.nvmlDeviceGetMaxClockInfo, (nv.NVML_CLOCK_SM,)),
        (nv.nvmlDeviceGetMaxClockInfo, (nv.NVML_CLOCK_MEM,)),
        (nv.nvmlDeviceGetMaxPcieLinkGeneration, ()),
        (nv.nvmlDeviceGetMaxPcieLinkWidth, ()),
    ]
    for fn, args in calls:
        try:
            out.append(float(fn(h, *args)))
        except nv.NVMLError:
            continue
    if not out:
        raise nv.NVMLError(nv.NVML_ERROR_NOT_SUPPORTED)
    return out


# the NVML calls of each read of fleettool.sources.nvml.NvmlSource, in the same order
READERS: dict[str, Reader] = {
    "temperature": lambda i, h: [float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))],
    "power": lambda i, h: [nv.nvmlDeviceGetPowerUsage(h) / 1000.0],
    "utilization": lambda i, h: (lambda u: [float(u.gpu), float(u.memory)])(
        nv.nvmlDeviceGetUtilizationRates(h)
    ),
    "memory": lambda i, h: (lambda m: [float(m.used), float(m.total)])(nv.nvmlDeviceGetMemoryInfo(h)),
    "clocks": lambda i, h: [
        float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
        float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
    ],
    "clock_events": lambda i, h: _clock_events(h),
    "mem_temperature": lambda i, h: _fields(h, [82]),
    "power_limit": lambda i, h: [nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0],
    "ecc": lambda i, h: _ecc(h),
    "remapped_rows": lambda i, h: [float(x) for x in nv.nvmlDeviceGetRemappedRows(h)],
    "remap_histogram": lambda i, h: (
        lambda v: [float(getattr(v, k)) for k in ("max", "high", "partial", "low", "none")]
    )(nv.nvmlDeviceGetRowRemapperHistogram(h)),
    "retired_pages": lambda i, h: [
        float(
            len(nv.nvmlDeviceGetRetiredPages(h, nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS))
        ),
        float(len(nv.nvmlDeviceGetRetiredPages(h, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR))),
        float(bool(nv.nvmlDeviceGetRetiredPagesPendingStatus(h))),
    ],
    "pcie_link": lambda i, h: [
        float(nv.nvmlDeviceGetCurrPcieLinkGeneration(h)),
        float(nv.nvmlDeviceGetCurrPcieLinkWidth(h)),
    ],
    "persistence": lambda i, h: _persistence(h),
    "energy": lambda i, h: [nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0],
    "violations": lambda i, h: [
        nv.nvmlDeviceGetViolationStatus(h, nv.NVML_PERF_POLICY_POWER).violationTime / 1000.0,
        nv.nvmlDeviceGetViolationStatus(h, nv.NVML_PERF_POLICY_THERMAL).violationTime / 1000.0,
    ],
    "pcie_counters": lambda i, h: _fields(h, [94, 95, 169, 173, 179, 180, 230]),
    "nvlink": lambda i, h: _nvlink(h),
    "limits": lambda i, h: _limits(h),
}
_NOT_SUPPORTED = {3, 13}  # NVML_ERROR_NOT_SUPPORTED, FUNCTION_NOT_FOUND
_XID_EVENT = 0x8


def _spin(us: float) -> None:
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plan", required=True, help="JSON: {reads: {name: period_s}, gpus?, costs_us?}")
    ap.add_argument(
        "--fake", action="store_true", help="spin for each read's H200 cost instead of calling NVML"
    )
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--seconds", type=float, default=None, help="stop after this long (default: SIGTERM)")
    a = ap.parse_args()
    with open(a.plan) as f:
        plan = json.load(f)
    periods: dict[str, float] = {k: float(v) for k, v in plan["reads"].items()}
    costs: dict[str, float] = plan.get("costs_us", {})
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    events: Any = None
    if a.fake:
        n = int(plan["gpus"])
        handles: list[Any] = [None] * n
    else:
        nv.nvmlInit()
        n = nv.nvmlDeviceGetCount()
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        try:
            events = nv.nvmlEventSetCreate()
            for h in handles:
                try:
                    mask = nv.nvmlDeviceGetSupportedEventTypes(h) & _XID_EVENT
                    if mask:
                        nv.nvmlDeviceRegisterEvents(h, mask, events)
                except nv.NVMLError:
                    continue
        except nv.NVMLError:
            events = None

    latest: dict[tuple[int, str], list[float]] = {}
    unsupported: set[tuple[int, str]] = set()
    last: dict[str, float] = {}
    stats = {"ticks": 0, "reads": 0, "errors": 0, "xids": 0, "gpus": n}
    next_tick = time.monotonic()
    t_end = None if a.seconds is None else next_tick + a.seconds
    while not stop.is_set():
        now = time.monotonic()
        due = [r for r, p in periods.items() if r not in last or now - last[r] >= p - 1e-3]
        for r in due:
            last[r] = now
        if not a.fake and any(periods.get(r, 0) >= 10 for r in due):
            nv.nvmlDeviceGetCount()
        for i in range(n):
            for r in due:
                if (i, r) in unsupported:
                    continue
                if a.fake:
                    _spin(costs.get(r, 5.0))
                    latest[(i, r)] = [0.0]
                    stats["reads"] += 1
                    continue
                try:
                    latest[(i, r)] = READERS[r](i, handles[i])
                    stats["reads"] += 1
                except nv.NVMLError as e:
                    if getattr(e, "value", None) in _NOT_SUPPORTED:
                        unsupported.add((i, r))
                    else:
                        stats["errors"] += 1
        if events is not None:
            for _ in range(256):
                try:
                    data = nv.nvmlEventSetWait_v2(events, 0)
                except nv.NVMLError:
                    break
                if data.eventType & _XID_EVENT:
                    stats["xids"] += 1
        stats["ticks"] += 1
        if t_end is not None and time.monotonic() >= t_end:
            break
        next_tick += a.interval
        delay = next_tick - time.monotonic()
        if delay < 0:
            next_tick, delay = time.monotonic(), 0.0
        stop.wait(delay)
    if not a.fake:
        nv.nvmlShutdown()
    stats["unsupported"] = sorted(f"{r}(gpu {i})" for i, r in unsupported)
    print(json.dumps(stats), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
