"""A fake GPU source fed by recorded real data, with fault injection and the measured cost of each call.

It plays a recording (fleettool's OpenMetrics names, e.g. data/demo/h200-gemm) back in a loop as if NVML
answered, for any number of GPUs, so the agent, the rules and the TUI can be exercised without a GPU and
alerts can be drilled on healthy hardware (`fleettool agent --source fake --inject xid:79@gpu=3`).

`costs=True` spins the CPU for as long as the same calls took on a real H200 (us_second in
samples/h200-recording/nvml_report.json, driver 580.159.04), so agent overhead can be measured for 8 GPUs.

Injected XIDs and double-bit errors arrive the way NVML's events do: through an event queue whose fd wakes the
agent. On the wall clock (no `clock` given) a thread delivers each one when it falls due, and `inject_now`
delivers one at once; on a test's own clock they are delivered when a collection's `now` reaches them.
"""

from __future__ import annotations

import bisect
import threading
import time
from pathlib import Path

from fleettool.sources.base import (
    READS,
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
from fleettool.sources.fake_costs import READ_COST_US
from fleettool.sources.fake_inject import (
    BUSY_MEMORY_BYTES,
    KINDS,
    Injection,
    fabric_unhealthy,
    nvlink_rows,
    parse_injection,
)
from fleettool.sources.nvml_events import EventQueue, EventWaiter

__all__ = ["KINDS", "READ_COST_US", "FakeSource", "Injection", "parse_injection"]


NVML_ERRORS = {
    3: "Not Supported",
    10: "Timeout",
    13: "Function Not Found",
    15: "GPU is lost",
    999: "Unknown Error",
}


def _nvml_error(label: str, code: int | None) -> SourceError:
    """What the live source raises for an NVML return code (sources/nvml.py's mapping)."""
    code = 999 if code is None else code
    msg = f"{label}: {NVML_ERRORS.get(code, f'NVML error {code}')}"
    if code in (3, 13):
        return NotSupported(msg)
    if code in (15, 16):
        return GpuLost(msg)
    return SourceError(msg)


class Frames:
    """A recorded GPU as (t_rel, {metric/sub: value}) frames; lookup by time modulo the recording's length."""

    def __init__(self, times: list[float], frames: list[dict[tuple[str, str], float]]) -> None:
        self.times = times
        self.frames = frames
        self.span = (times[-1] - times[0]) if len(times) > 1 else 1.0

    def at(self, t_rel: float) -> dict[tuple[str, str], float]:
        t = self.times[0] + (t_rel % max(self.span, 1e-9))
        i = bisect.bisect_right(self.times, t) - 1
        return self.frames[max(i, 0)]


def load_frames(path: Path) -> tuple[Frames, dict[str, str]]:
    """Read a fleettool OpenMetrics recording of one GPU into frames (carry-forward of slow metrics)."""
    from fleettool.recording.own import read_own_openmetrics

    rows, info = read_own_openmetrics(path)
    if not rows:
        raise ValueError(f"{path}: no fleettool samples to play back")
    by_t: dict[float, dict[tuple[str, str], float]] = {}
    gpu0 = min(r[1] for r in rows if r[1] is not None)
    for ts, gpu, metric, sub, value in rows:
        if gpu != gpu0:
            continue
        by_t.setdefault(round(ts, 1), {})[(metric, sub)] = value
    times = sorted(by_t)
    frames = []
    cur: dict[tuple[str, str], float] = {}
    for t in times:
        cur = {**cur, **by_t[t]}
        frames.append(cur)
    return Frames(times, frames), info


DEFAULT_RECORDING = Path(__file__).resolve().parent.parent / "data" / "demo" / "h200-gemm" / "nvml.om.gz"


class FakeSource:
    name = "fake"

    def __init__(
        self,
        gpus: int = 8,
        recording: Path | None = None,
        inject: list[Injection] | None = None,
        costs: bool = False,
        clock: float | None = None,
        fabric: FabricInfo | int | None = None,
        nvlinks: int = 0,
    ) -> None:
        self.n = gpus
        # NVLinks per GPU the nvlink read answers with (all active, no errors) where the recording has none
        self.nvlinks = nvlinks
        # what fabric_info answers: recorded fabric info, an NVML error code to fail with, or (None) what a
        # GPU outside an NVLink fabric answers (a real H100 80GB HBM3, driver 580.159.04: state 0, UUID zeros)
        self.fabric = FabricInfo("0" * 32, 0, 0, 0) if fabric is None else fabric
        self.recording = recording or DEFAULT_RECORDING
        self.inject = inject or []
        self.costs = costs
        self._t0 = clock
        self._now = clock  # the latest time a read was asked at (what device_info judges injections by)
        self._inflight: str | None = None
        self._frames: Frames | None = None
        self._info: dict[str, str] = {}
        self._lost: set[int] = set()
        self._extra: dict[tuple[int, str], float] = {}
        self._live = clock is None  # on the wall clock: a thread delivers injected events when they fall due
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._unhang = threading.Event()
        self._queue: EventQueue | None = None
        self._waiter: EventWaiter | None = None

    @property
    def inflight(self) -> str | None:
        return self._inflight

    def open(self) -> None:
        try:
            self._frames, self._info = load_frames(self.recording)
        except (OSError, ValueError) as e:  # ParseError is a ValueError
            raise SourceUnavailable(f"fake source cannot play {self.recording}: {e}") from e
        if self._t0 is None:
            self._t0 = time.time()
        if self._now is None:
            self._now = self._t0
        self._queue = EventQueue()
        if self._live:
            self._wake.clear()
            self._waiter = EventWaiter(
                self._event_wait, self._queue, timeout_ms=5000, interrupt=self._wake.set, name="fake-events"
            ).start()

    def close(self) -> None:
        self._frames = None
        if self._waiter is not None:
            self._waiter.close()
        if self._queue is not None:
            self._queue.close()
        self._waiter, self._queue = None, None

    def driver_version(self) -> str | None:
        return self._info.get("driver", "580.159.04")

    def fabric_info(self, index: int) -> FabricInfo:
        if isinstance(self.fabric, int):
            raise _nvml_error(f"nvmlDeviceGetGpuFabricInfoV(gpu {index})", self.fabric)
        now = self._now if self._now is not None and not self._live else time.time()
        if any(j.kind == "fabric-unhealthy" for j in self._active(now, index)):
            return fabric_unhealthy(self.fabric)
        return self.fabric

    def _active(self, now: float, gpu: int | None = None) -> list[Injection]:
        t = now - (self._t0 or now)
        return [j for j in self.inject if t >= j.after_s and (j.gpu is None or gpu is None or j.gpu == gpu)]

    def device_count(self) -> int:
        missing = any(j.kind == "missing-gpu" for j in self._active(time.time()))
        return self.n - 1 if missing else self.n

    def _lost_now(self, now: float, index: int, xid: bool = True) -> bool:
        """A lost injection in force (for its `for=`), or (`xid`) an XID 79 delivered: GPU_IS_LOST."""
        t = now - (self._t0 or now)
        for j in self._active(now, index):
            if j.kind == "lost" and (j.hold_s is None or t < j.after_s + j.hold_s):
                return True
            if xid and j.kind == "xid" and j.code == 79 and j.fired:
                return True
        return False

    def device_info(self, index: int) -> DeviceInfo:
        now = self._now if self._now is not None and not self._live else time.time()
        if self._lost_now(now, index, xid=False):  # the inventory of a GPU lost by an XID 79 stays readable
            raise GpuLost(f"nvmlDeviceGetUUID(gpu {index}): GPU is lost")
        return DeviceInfo(
            index,
            f"GPU-fa4e0000-0000-4000-8000-{index:012x}",
            self._info.get("model", "NVIDIA H200"),
            f"00000000:{0x18 + index * 0x10:02X}:00.0",
            f"16537240{index:05d}",
        )

    def _spin(self, what: str) -> None:
        if not self.costs:
            return
        end = time.perf_counter() + READ_COST_US.get(what, 5.0) * 1e-6
        while time.perf_counter() < end:
            pass

    def read(self, index: int, what: str, now: float) -> list[Row]:
        assert self._frames is not None, "open() first"
        label = f"{what}(gpu {index})"
        self._inflight = label
        self._now = now
        try:
            self._spin(what)
            active = self._active(now, index)
            for j in active:
                if j.kind == "hang" and not j.fired and (j.read or "energy") == what:
                    # a driver call that does not return (for hold_s, or until release_hangs()); the watchdog
                    # must notice
                    self._unhang.wait(j.hold_s)
                    j.fired = True
                if (
                    j.kind == "error"
                    and (j.read or "power") == what
                    and (j.count is None or j.raised < j.count)
                ):
                    j.raised += 1
                    raise _nvml_error(label, j.code)
            if self._lost_now(now, index):
                raise GpuLost(f"{label}: GPU is lost")
            frame = self._frames.at(now - (self._t0 or now))
            metrics = READS[what][1]
            rows: list[Row] = [(m, sub, v) for (m, sub), v in frame.items() if m in metrics]
            if not rows and what == "nvlink":
                rows = nvlink_rows(self.nvlinks)
            if not rows:
                raise NotSupported(f"{label}: Not Supported")
            return self._apply(index, what, rows, active, now)
        finally:
            self._inflight = None

    def _apply(
        self, index: int, what: str, rows: list[Row], active: list[Injection], now: float
    ) -> list[Row]:
        vals = {(m, s): v for m, s, v in rows}
        for j in active:
            k = j.kind
            if k == "thermal":
                if ("clock_event_reasons", "") in vals:
                    vals[("clock_event_reasons", "")] = float(int(vals[("clock_event_reasons", "")]) | 0x60)
                if ("gpu_temp_c", "") in vals:
                    vals[("gpu_temp_c", "")] = 92.0
                if ("sm_clock_mhz", "") in vals:
                    vals[("sm_clock_mhz", "")] = 1005.0
            elif k == "power-brake":
                if ("clock_event_reasons", "") in vals:
                    vals[("clock_event_reasons", "")] = float(int(vals[("clock_event_reasons", "")]) | 0x88)
                if ("sm_clock_mhz", "") in vals:
                    vals[("sm_clock_mhz", "")] = 690.0
            elif k == "dbe":
                for m, add in (
                    ("ecc_dbe_volatile", 1.0),
                    ("ecc_dbe_aggregate", 1.0),
                    ("remap_uncorrectable_rows", 1.0),
                ):
                    if (m, "") in vals:
                        vals[(m, "")] += add
                if ("remap_pending", "") in vals:
                    vals[("remap_pending", "")] = 1.0
            elif k == "remap-failure":
                if ("remap_failure", "") in vals:
                    vals[("remap_failure", "")] = 1.0
            elif k == "pcie-width":
                if ("pcie_link_width", "") in vals:
                    vals[("pcie_link_width", "")] = 8.0
            elif k == "nvlink-crc" and what == "nvlink":
                t = now - (self._t0 or now) - j.after_s
                vals[("nvlink_link_up", "link=0")] = 1.0
                vals[("nvlink_crc_flit_errors_total", "link=0")] = float(int(500 * t))
            elif k == "nvlink-down" and what == "nvlink":
                links = sorted(int(s.split("=")[1]) for m, s in vals if m == "nvlink_link_up")
                for link in links[len(links) - (j.count or 1) :]:
                    vals[("nvlink_link_up", f"link={link}")] = 0.0
        return [(m, s, v) for (m, s), v in vals.items()]

    def release_hangs(self) -> None:
        """Every hung read returns now, and the hang injections are spent (the GPU answers again)."""
        for j in self.inject:
            if j.kind == "hang":
                j.fired = True
        self._unhang.set()

    def running_processes(self, index: int, now: float) -> list[GpuProcess]:
        """The busy:PID injections active on this GPU, as NVML's running-process lists would show them."""
        pids = {j.code for j in self._active(now, index) if j.kind == "busy" and j.code is not None}
        return [GpuProcess(pid, "C", BUSY_MEMORY_BYTES) for pid in sorted(pids)]

    # -- events, as NVML's event API delivers them ----------------------------------------------------------
    def wait_fd(self) -> int | None:
        return self._queue.fd if self._queue is not None else None

    def _fire_due(self, now: float) -> list[GpuEventNotice]:
        """The event injections due at `now` and not yet delivered, as NVML would report them (once each)."""
        out: list[GpuEventNotice] = []
        with self._lock:
            for j in self._active(now):
                if j.fired:
                    continue
                notices: list[tuple[str, int, int]] = []  # (type, NVML event bit, eventData)
                if j.kind == "xid" and j.code is not None:
                    notices = [("xid", 0x8, j.code)]
                elif j.kind == "dbe":
                    notices = [("xid", 0x8, 48), ("xid", 0x8, 63), ("dbe", 0x2, 0)]
                elif j.kind == "remap-failure":
                    notices = [("xid", 0x8, 64)]
                if not notices:
                    continue
                j.fired = True
                gpus = [j.gpu] if j.gpu is not None else list(range(self.n))
                out.extend(GpuEventNotice(g, c, now, t, bit) for g in gpus for t, bit, c in notices)
        return out

    def _event_wait(self, timeout_ms: int) -> list[GpuEventNotice]:
        """The waiter thread's 'nvmlEventSetWait_v2': sleeps until the next injection is due (or inject_now,
        or close, wakes it), at most `timeout_ms`; returns what fell due."""
        now = time.time()
        if got := self._fire_due(now):
            return got
        t = now - (self._t0 or now)
        pending = [j.after_s - t for j in self.inject if not j.fired and j.after_s > t]
        self._wake.wait(min([timeout_ms / 1000.0, *pending]))
        self._wake.clear()
        return self._fire_due(time.time())

    def inject_now(self, spec: str | Injection) -> Injection:
        """Add a fault that starts now ('xid:79@gpu=3'); an event fault is delivered through the event queue
        at once on the wall clock, or at the next collection on a test's clock."""
        inj = parse_injection(spec) if isinstance(spec, str) else spec
        inj.after_s = time.time() - (self._t0 or time.time()) if self._live else inj.after_s
        with self._lock:
            self.inject.append(inj)
        self._wake.set()
        return inj

    def poll_events(self, now: float) -> list[GpuEventNotice]:
        """The events delivered since the last call (those due at `now` included), without waiting."""
        if self._queue is None:
            return []
        self._queue.put(self._fire_due(now))
        return self._queue.drain()
