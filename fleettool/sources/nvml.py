"""The live NVML source (nvidia-ml-py). The only module in fleettool that imports pynvml.

Each read is one or a few NVML calls, converted to canonical units (mW -> W, mJ -> J, ns -> us). NVML errors
become NotSupported (only NOT_SUPPORTED and FUNCTION_NOT_FOUND: learned once per GPU), GpuLost or SourceError
(any other code, UNKNOWN and TIMEOUT included: counted, and the read made again at its next due time); a missing library or driver becomes SourceUnavailable.
The call in flight is kept in `inflight` so the agent's watchdog can name a hung call. Events (XIDs, double-bit
ECC, GPU unavailable, recovery action) come from NVML's event API through a waiter thread (sources/nvml_events.py)
whose fd wakes the agent; its blocking wait is not a call in flight.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from fleettool.sources.base import (
    DeviceInfo,
    FabricInfo,
    GpuEventNotice,
    GpuLost,
    GpuProcess,
    NotSupported,
    Row,
    SourceError,
    SourceUnavailable,
)
from fleettool.sources.nvml_events import EventQueue, EventWaiter, nvml_wait, register_events
from fleettool.sources.nvml_fabric import read_fabric

# NVML return codes (nvml.h)
_NOT_SUPPORTED = {3, 13}  # NOT_SUPPORTED, FUNCTION_NOT_FOUND
_LOST = {15, 16}  # GPU_IS_LOST, RESET_REQUIRED
_UNAVAILABLE = {9, 12, 4}  # DRIVER_NOT_LOADED, LIB_NOT_FOUND, NO_PERMISSION

# field ids (pynvml / nvml.h)
_FI_MEMORY_TEMP = 82
_FI_PCIE = [
    ("pcie_replay_total", 94),
    ("pcie_replay_rollover_total", 95),
    ("pcie_l0_to_recovery_total", 169),
    ("pcie_correctable_errors_total", 173),
    ("pcie_nonfatal_errors_total", 179),
    ("pcie_fatal_errors_total", 180),
    ("recovery_action", 230),
]
EVENT_WAIT_MS = 500  # the waiter's wait: the longest close() waits for it


class NvmlSource:
    name = "nvml"

    def __init__(self) -> None:
        self._nv: Any = None
        self._handles: dict[int, Any] = {}
        self._events: Any = None
        self._inflight: str | None = None
        self._queue: EventQueue | None = None
        self._waiter: EventWaiter | None = None
        self.registered_events: dict[int, int] = {}  # GPU index -> event-type mask registered

    # -- plumbing -----------------------------------------------------------------------------------------
    @property
    def inflight(self) -> str | None:
        return self._inflight

    def _call(self, label: str, fn: Callable[..., Any], *args: Any) -> Any:
        self._inflight = label
        try:
            return fn(*args)
        except self._nv.NVMLError as e:
            code = getattr(e, "value", None)
            if code in _NOT_SUPPORTED:
                raise NotSupported(f"{label}: {e}") from e
            if code in _LOST:
                raise GpuLost(f"{label}: {e}") from e
            raise SourceError(f"{label}: {e}") from e
        finally:
            self._inflight = None

    def _h(self, index: int) -> Any:
        h = self._handles.get(index)
        if h is None:
            h = self._call(f"nvmlDeviceGetHandleByIndex({index})", self._nv.nvmlDeviceGetHandleByIndex, index)
            self._handles[index] = h
        return h

    # -- lifecycle ----------------------------------------------------------------------------------------
    def open(self) -> None:
        try:
            import pynvml
        except ImportError as e:  # pragma: no cover - nvidia-ml-py is a core dependency
            raise SourceUnavailable(f"nvidia-ml-py is not installed: {e}") from e
        self._nv = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            raise SourceUnavailable(f"NVML could not start: {e}") from e
        except OSError as e:
            raise SourceUnavailable(f"NVML library could not load: {e}") from e
        self._handles = {}
        self._start_events()

    def _start_events(self) -> None:
        """An event set with every wanted type each GPU supports, and the waiter thread on it."""
        nv = self._nv
        try:
            self._events = self._call("nvmlEventSetCreate", nv.nvmlEventSetCreate)
            handles: dict[int, Any] = {}
            for i in range(self.device_count()):
                with contextlib.suppress(SourceError):  # a lost GPU has no handle: no events from it
                    handles[i] = self._h(i)
        except SourceError:
            self._events = None
            return
        self.registered_events = register_events(nv, self._events, handles, self._call)
        if not self.registered_events:
            return
        self._queue = EventQueue()
        wait = nvml_wait(nv, self._events, handles)
        self._waiter = EventWaiter(wait, self._queue, timeout_ms=EVENT_WAIT_MS).start()

    def close(self) -> None:
        if self._nv is None:
            return
        joined = self._waiter.close() if self._waiter is not None else True
        try:
            # a waiter still inside nvmlEventSetWait_v2 keeps its set: freeing it under the call would crash
            if self._events is not None and joined:
                self._nv.nvmlEventSetFree(self._events)
            self._nv.nvmlShutdown()
        except self._nv.NVMLError:
            pass
        if self._queue is not None:
            self._queue.close()
        self._events, self._waiter, self._queue = None, None, None
        self._handles = {}

    # -- inventory ----------------------------------------------------------------------------------------
    def driver_version(self) -> str | None:
        v = self._call("nvmlSystemGetDriverVersion", self._nv.nvmlSystemGetDriverVersion)
        return v.decode() if isinstance(v, bytes) else str(v)

    def device_count(self) -> int:
        return int(self._call("nvmlDeviceGetCount", self._nv.nvmlDeviceGetCount))

    def device_info(self, index: int) -> DeviceInfo:
        nv = self._nv
        h = self._h(index)

        def s(x: Any) -> str:
            return x.decode() if isinstance(x, bytes) else str(x)

        uuid = s(self._call(f"nvmlDeviceGetUUID(gpu {index})", nv.nvmlDeviceGetUUID, h))
        name = s(self._call(f"nvmlDeviceGetName(gpu {index})", nv.nvmlDeviceGetName, h))
        pci = self._call(f"nvmlDeviceGetPciInfo(gpu {index})", nv.nvmlDeviceGetPciInfo, h)
        try:
            serial: str | None = s(self._call(f"nvmlDeviceGetSerial(gpu {index})", nv.nvmlDeviceGetSerial, h))
        except SourceError:
            serial = None
        return DeviceInfo(index, uuid, name, s(pci.busId), serial)

    # -- reads --------------------------------------------------------------------------------------------
    def read(self, index: int, what: str, now: float) -> list[Row]:
        fn = getattr(self, f"_read_{what}")
        return fn(index, self._h(index))  # type: ignore[no-any-return]

    def _c(self, index: int, name: str, *args: Any) -> Any:
        return self._call(f"{name}(gpu {index})", getattr(self._nv, name), *args)

    def _read_temperature(self, i: int, h: Any) -> list[Row]:
        return [
            (
                "gpu_temp_c",
                "",
                float(self._c(i, "nvmlDeviceGetTemperature", h, self._nv.NVML_TEMPERATURE_GPU)),
            )
        ]

    def _read_power(self, i: int, h: Any) -> list[Row]:
        return [("power_w", "", self._c(i, "nvmlDeviceGetPowerUsage", h) / 1000.0)]

    def _read_utilization(self, i: int, h: Any) -> list[Row]:
        u = self._c(i, "nvmlDeviceGetUtilizationRates", h)
        return [("gpu_util_pct", "", float(u.gpu)), ("mem_util_pct", "", float(u.memory))]

    def _read_memory(self, i: int, h: Any) -> list[Row]:
        m = self._c(i, "nvmlDeviceGetMemoryInfo", h)
        return [("fb_used_bytes", "", float(m.used)), ("fb_total_bytes", "", float(m.total))]

    def _read_clocks(self, i: int, h: Any) -> list[Row]:
        nv = self._nv
        return [
            ("sm_clock_mhz", "", float(self._c(i, "nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_SM))),
            ("mem_clock_mhz", "", float(self._c(i, "nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_MEM))),
        ]

    def _read_clock_events(self, i: int, h: Any) -> list[Row]:
        name = (
            "nvmlDeviceGetCurrentClocksEventReasons"
            if hasattr(self._nv, "nvmlDeviceGetCurrentClocksEventReasons")
            else "nvmlDeviceGetCurrentClocksThrottleReasons"
        )
        return [("clock_event_reasons", "", float(self._c(i, name, h)))]

    def _fields(self, i: int, h: Any, ids: list[tuple[str, int]]) -> list[Row]:
        """A field-value batch: the fields that answered. Only when every field says not supported is the read
        NotSupported; a field lost, timed out or failing otherwise (and none answered) fails this read only,
        to be made again at its next due time."""
        label = f"nvmlDeviceGetFieldValues(gpu {i})"
        vals = self._c(i, "nvmlDeviceGetFieldValues", h, [fid for _, fid in ids])
        out: list[Row] = []
        failed: list[int] = []
        for (metric, _), v in zip(ids, vals, strict=True):
            if v.nvmlReturn != 0:
                failed.append(int(v.nvmlReturn))
                continue
            out.append((metric, "", float(_field_value(v))))
        if out:
            return out
        if failed and all(code in _NOT_SUPPORTED for code in failed):
            raise NotSupported(f"{label}: no field supported")
        worst = next((code for code in failed if code not in _NOT_SUPPORTED), None)
        if worst in _LOST:
            raise GpuLost(f"{label}: field returned NVML error {worst}")
        raise SourceError(f"{label}: field returned NVML error {worst}")

    def _read_mem_temperature(self, i: int, h: Any) -> list[Row]:
        return self._fields(i, h, [("mem_temp_c", _FI_MEMORY_TEMP)])

    def _read_power_limit(self, i: int, h: Any) -> list[Row]:
        return [("power_limit_w", "", self._c(i, "nvmlDeviceGetEnforcedPowerLimit", h) / 1000.0)]

    def _read_ecc(self, i: int, h: Any) -> list[Row]:
        nv = self._nv
        cur, _pending = self._c(i, "nvmlDeviceGetEccMode", h)
        rows: list[Row] = [("ecc_mode", "", float(cur))]
        for metric, etype, ctype in (
            ("ecc_sbe_volatile", nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC),
            ("ecc_dbe_volatile", nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC),
            ("ecc_sbe_aggregate", nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_AGGREGATE_ECC),
            ("ecc_dbe_aggregate", nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_AGGREGATE_ECC),
        ):
            rows.append((metric, "", float(self._c(i, "nvmlDeviceGetTotalEccErrors", h, etype, ctype))))
        return rows

    def _read_remapped_rows(self, i: int, h: Any) -> list[Row]:
        corr, unc, pending, failure = self._c(i, "nvmlDeviceGetRemappedRows", h)
        return [
            ("remap_correctable_rows", "", float(corr)),
            ("remap_uncorrectable_rows", "", float(unc)),
            ("remap_pending", "", float(bool(pending))),
            ("remap_failure", "", float(bool(failure))),
        ]

    def _read_remap_histogram(self, i: int, h: Any) -> list[Row]:
        v = self._c(i, "nvmlDeviceGetRowRemapperHistogram", h)
        return [
            (f"remap_bank_{k}", "", float(getattr(v, k))) for k in ("max", "high", "partial", "low", "none")
        ]

    def _read_retired_pages(self, i: int, h: Any) -> list[Row]:
        nv = self._nv
        sbe = self._c(
            i, "nvmlDeviceGetRetiredPages", h, nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
        )
        dbe = self._c(i, "nvmlDeviceGetRetiredPages", h, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        pend = self._c(i, "nvmlDeviceGetRetiredPagesPendingStatus", h)
        return [
            ("retired_pages_sbe", "", float(len(sbe))),
            ("retired_pages_dbe", "", float(len(dbe))),
            ("retired_pages_pending", "", float(bool(pend))),
        ]

    def _read_pcie_link(self, i: int, h: Any) -> list[Row]:
        return [
            ("pcie_link_gen", "", float(self._c(i, "nvmlDeviceGetCurrPcieLinkGeneration", h))),
            ("pcie_link_width", "", float(self._c(i, "nvmlDeviceGetCurrPcieLinkWidth", h))),
        ]

    def _read_persistence(self, i: int, h: Any) -> list[Row]:
        rows: list[Row] = [("persistence_mode", "", float(self._c(i, "nvmlDeviceGetPersistenceMode", h)))]
        with contextlib.suppress(NotSupported):
            rows.append(("pstate", "", float(self._c(i, "nvmlDeviceGetPerformanceState", h))))
        return rows

    def _read_energy(self, i: int, h: Any) -> list[Row]:
        return [("energy_j", "", self._c(i, "nvmlDeviceGetTotalEnergyConsumption", h) / 1000.0)]

    def _read_violations(self, i: int, h: Any) -> list[Row]:
        nv = self._nv
        p = self._c(i, "nvmlDeviceGetViolationStatus", h, nv.NVML_PERF_POLICY_POWER)
        t = self._c(i, "nvmlDeviceGetViolationStatus", h, nv.NVML_PERF_POLICY_THERMAL)
        return [
            ("violation_power_us", "", p.violationTime / 1000.0),
            ("violation_thermal_us", "", t.violationTime / 1000.0),
        ]

    def _read_pcie_counters(self, i: int, h: Any) -> list[Row]:
        return self._fields(i, h, _FI_PCIE)

    def _read_nvlink(self, i: int, h: Any) -> list[Row]:
        nv = self._nv
        rows: list[Row] = []
        counters = (
            ("nvlink_replay_errors_total", 0),
            ("nvlink_recovery_errors_total", 1),
            ("nvlink_crc_flit_errors_total", 2),
            ("nvlink_crc_data_errors_total", 3),
        )
        for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
            try:
                up = self._c(i, "nvmlDeviceGetNvLinkState", h, link)
            except NotSupported:  # only NVML's not-supported codes: any other error fails this read
                if link == 0:
                    raise NotSupported(f"nvmlDeviceGetNvLinkState(gpu {i}): no NVLink") from None
                break  # past the GPU's last link
            sub = f"link={link}"
            rows.append(("nvlink_link_up", sub, float(up)))
            for metric, counter in counters:
                try:
                    rows.append(
                        (metric, sub, float(self._c(i, "nvmlDeviceGetNvLinkErrorCounter", h, link, counter)))
                    )
                except NotSupported:
                    continue
        return rows

    def _read_limits(self, i: int, h: Any) -> list[Row]:
        nv = self._nv
        rows: list[Row] = []
        for metric, fn, args in (
            (
                "temp_slowdown_c",
                "nvmlDeviceGetTemperatureThreshold",
                (nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,),
            ),
            (
                "temp_shutdown_c",
                "nvmlDeviceGetTemperatureThreshold",
                (nv.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,),
            ),
            ("temp_gpu_max_c", "nvmlDeviceGetTemperatureThreshold", (nv.NVML_TEMPERATURE_THRESHOLD_GPU_MAX,)),
            ("temp_mem_max_c", "nvmlDeviceGetTemperatureThreshold", (nv.NVML_TEMPERATURE_THRESHOLD_MEM_MAX,)),
            ("sm_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", (nv.NVML_CLOCK_SM,)),
            ("mem_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", (nv.NVML_CLOCK_MEM,)),
            ("pcie_link_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration", ()),
            ("pcie_link_width_max", "nvmlDeviceGetMaxPcieLinkWidth", ()),
        ):
            try:
                rows.append((metric, "", float(self._c(i, fn, h, *args))))
            except NotSupported:
                continue
        if not rows:
            raise NotSupported(f"limits(gpu {i}): none supported")
        return rows

    def fabric_info(self, index: int) -> FabricInfo:
        if self._nv is None:
            raise SourceUnavailable("NVML is not open")
        return read_fabric(self._nv, self._call, index, self._h(index))

    # -- processes ----------------------------------------------------------------------------------------
    def running_processes(self, index: int, now: float) -> list[GpuProcess]:
        """Processes with a compute (C) or graphics (G) context on the GPU, one per PID, with NVML's memory."""
        h, kinds, mem = self._h(index), dict[int, str](), dict[int, int | None]()
        for letter, kind in (("C", "Compute"), ("G", "Graphics")):
            for p in self._c(index, f"nvmlDeviceGet{kind}RunningProcesses", h):
                pid, used = int(p.pid), getattr(p, "usedGpuMemory", None)
                kinds[pid] = kinds[pid] + "+" + letter if pid in kinds else letter
                mem[pid] = max(mem.get(pid) or 0, int(used)) if used is not None else mem.get(pid)
        return [GpuProcess(pid, kinds[pid], mem[pid]) for pid in sorted(kinds)]

    # -- events -------------------------------------------------------------------------------------------
    def wait_fd(self) -> int | None:
        return self._queue.fd if self._queue is not None else None

    def poll_events(self, now: float) -> list[GpuEventNotice]:
        """What the waiter thread got since the last call (never waits)."""
        return self._queue.drain() if self._queue is not None else []

    def poll_xids(self, now: float) -> list[GpuEventNotice]:
        """The XIDs among poll_events (other events are dropped): kept for bench/nvml_probe.py."""
        return [x for x in self.poll_events(now) if x.type == "xid"]


def _field_value(v: Any) -> float:
    t = v.valueType
    val = v.value
    return {
        0: lambda: val.dVal,
        1: lambda: val.uiVal,
        2: lambda: val.ulVal,
        3: lambda: val.ullVal,
        4: lambda: val.sllVal,
        5: lambda: val.siVal,
        6: lambda: val.usVal,
    }.get(t, lambda: val.ullVal)()
