"""NVML's event API delivered the moment an event arrives: a waiter thread, a queue and a wake fd.

`EventWaiter` runs a daemon thread that blocks in a wait function (for NVML, `nvmlEventSetWait_v2(set,
timeout_ms)`, so the thread sees its stop flag at least every `timeout_ms`) and hands each event to an
`EventQueue`. The queue writes one byte to a self-pipe when it goes from empty to non-empty, so its `fd` is
readable exactly while events wait; the agent loop `select()`s on it (the collector's `wait_fd`) and collects
at once instead of at the next tick. `drain()` takes the events and the byte under one lock, so a wake never
finds the queue empty and an event never waits without a wake.

The waiter never touches the source's `inflight`: its blocking wait is the normal state of an idle event
thread, not a hung call, and the agent's watchdog only looks at the collection thread. A wait that fails
(anything but the timeout) ends the thread with one `error` notice; the collector reports it once.

No pynvml here (sources/nvml.py is its only importer): the NVML side comes in as functions and the event
struct's field names (c_nvmlEventData_t: device, eventType, eventData, gpuInstanceId, computeInstanceId).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from fleettool.sources.base import GpuEventNotice, SourceError

# nvmlEventType* bits (pynvml 13.615.71 / nvml.h) -> fleettool's name for the event
EVENT_TYPES: dict[int, str] = {
    0x1: "sbe",  # SingleBitEccError
    0x2: "dbe",  # DoubleBitEccError
    0x4: "pstate",
    0x8: "xid",  # XidCriticalError: eventData is the XID
    0x10: "clock",
    0x80: "power-source-change",
    0x100: "mig-config-change",
    0x200: "sbe-storm",  # SingleBitEccErrorStorm
    0x400: "dram-retirement",
    0x800: "dram-retirement-failure",
    0x1000: "nonfatal-poison",
    0x2000: "fatal-poison",
    0x4000: "gpu-unavailable",  # GpuUnavailableError
    0x8000: "recovery-action",  # GpuRecoveryAction: eventData is NVML_GPU_RECOVERY_ACTION_*
}
NVML_NAMES: dict[int, str] = {
    0x1: "SingleBitEccError",
    0x2: "DoubleBitEccError",
    0x4: "PState",
    0x8: "XidCriticalError",
    0x10: "Clock",
    0x80: "PowerSourceChange",
    0x100: "MigConfigChange",
    0x200: "SingleBitEccErrorStorm",
    0x400: "DramRetirementEvent",
    0x800: "DramRetirementFailure",
    0x1000: "NonFatalPoisonError",
    0x2000: "FatalPoisonError",
    0x4000: "GpuUnavailableError",
    0x8000: "GpuRecoveryAction",
}
# What the source registers (ANDed with nvmlDeviceGetSupportedEventTypes per GPU). Single-bit ECC is left out:
# corrected errors need no action, can come in storms, and the ECC counters (read every 10 s) already count
# them; PState and Clock fire on every load change.
WANTED_MASK = 0x8 | 0x2 | 0x4000 | 0x8000
RECOVERY_ACTIONS = {
    0: "None",
    1: "GPU Reset",
    2: "Node Reboot",
    3: "Drain P2P",
    4: "Drain and Reset",
    5: "Recover IMEX Domain",
    6: "Bus Reset",
    7: "System Reboot",
}
NVML_ERROR_TIMEOUT = 10  # nvmlEventSetWait_v2 saw no event within its timeout
NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId / computeInstanceId when the event is not MIG-attributed
QUEUE_MAX = 4096  # events kept between two collections; beyond it the oldest go (and are counted)


def decode_mask(mask: int) -> list[str]:
    """An event-type mask as NVML's names (unknown bits as hex)."""
    names = [NVML_NAMES.get(1 << b, hex(1 << b)) for b in range(64) if mask >> b & 1]
    return sorted(names)


def handle_key(h: Any) -> int | None:
    """A device handle (a ctypes pointer, c_nvmlDevice_t) as its address; None for NULL. Two handles of one
    GPU are distinct Python objects with the same address."""
    if h is None:
        return None
    try:
        return ctypes.cast(h, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):  # not a ctypes pointer
        return id(h)


def register_events(
    nv: Any, es: Any, handles: dict[int, Any], call: Callable[..., Any], wanted: int = WANTED_MASK
) -> dict[int, int]:
    """Register the wanted types each GPU supports on event set `es`; GPU index -> the mask registered.
    `call(label, fn, *args)` is the source's NVML call (it names the call in flight, raises SourceError).
    A combined registration that fails is retried one type at a time, so one refused type costs no other."""
    registered: dict[int, int] = {}
    for i, h in handles.items():
        try:
            mask = int(
                call(f"nvmlDeviceGetSupportedEventTypes(gpu {i})", nv.nvmlDeviceGetSupportedEventTypes, h)
            )
        except SourceError:
            continue
        mask &= wanted
        if not mask:
            continue
        try:
            call(f"nvmlDeviceRegisterEvents(gpu {i})", nv.nvmlDeviceRegisterEvents, h, mask, es)
            registered[i] = mask
            continue
        except SourceError:
            pass
        got = 0
        for bit in (1 << b for b in range(64) if mask >> b & 1):
            with contextlib.suppress(SourceError):
                call(f"nvmlDeviceRegisterEvents(gpu {i}, {bit:#x})", nv.nvmlDeviceRegisterEvents, h, bit, es)
                got |= bit
        if got:
            registered[i] = got
    return registered


def notice_from_event(data: Any, index_of: Callable[[Any], int], ts: float) -> list[GpuEventNotice]:
    """One c_nvmlEventData_t as notices, one per type bit it carries (normally exactly one)."""
    etype, edata = int(data.eventType), int(data.eventData)
    gi, ci = (
        int(getattr(data, "gpuInstanceId", NO_INSTANCE)),
        int(getattr(data, "computeInstanceId", NO_INSTANCE)),
    )
    index = index_of(data.device)
    bits = [1 << b for b in range(64) if etype >> b & 1] or [0]
    return [
        GpuEventNotice(
            index,
            edata,
            ts,
            EVENT_TYPES.get(bit, f"nvml-event-{bit:#x}"),
            bit,
            None if gi == NO_INSTANCE else gi,
            None if ci == NO_INSTANCE else ci,
        )
        for bit in bits
    ]


def nvml_wait(nv: Any, es: Any, handles: dict[int, Any]) -> Callable[[int], list[GpuEventNotice]]:
    """The waiter's wait over pynvml module `nv` and event set `es`: [] on NVML_ERROR_TIMEOUT, the event's
    notices (stamped when the wait returned; the device matched by handle address) otherwise; any other NVML
    error raises SourceError, which ends the waiter."""
    keys = {handle_key(h): i for i, h in handles.items()}

    def index_of(h: Any) -> int:
        k = handle_key(h)
        return -1 if k is None else keys.get(k, -1)

    def wait(ms: int) -> list[GpuEventNotice]:
        try:
            data = nv.nvmlEventSetWait_v2(es, ms)
        except nv.NVMLError as e:
            if getattr(e, "value", None) == NVML_ERROR_TIMEOUT:
                return []
            raise SourceError(f"nvmlEventSetWait_v2: {e}") from e
        return notice_from_event(data, index_of, time.time())

    return wait


class EventQueue:
    """A thread-safe queue of notices with a wake fd: readable while (and only while) the queue holds any."""

    def __init__(self, maxlen: int = QUEUE_MAX) -> None:
        self._lock = threading.Lock()
        self._items: deque[GpuEventNotice] = deque()
        self._maxlen = maxlen
        self._signalled = False
        self.dropped = 0
        self._r, self._w = os.pipe()  # not inherited by children (PEP 446)
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._closed = False

    @property
    def fd(self) -> int | None:
        return None if self._closed else self._r

    def put(self, notices: list[GpuEventNotice]) -> None:
        if not notices:
            return
        with self._lock:
            if self._closed:
                return
            self._items.extend(notices)
            over = len(self._items) - self._maxlen
            for _ in range(max(over, 0)):
                self._items.popleft()
                self.dropped += 1
            if not self._signalled:
                with contextlib.suppress(BlockingIOError):  # a full pipe is readable already
                    os.write(self._w, b"!")
                self._signalled = True

    def drain(self) -> list[GpuEventNotice]:
        """Every notice waiting, oldest first, and the wake byte; a `dropped` notice (code = how many) when
        the queue overflowed since the last drain."""
        with self._lock:
            if self._closed:
                return []
            out = list(self._items)
            self._items.clear()
            if self.dropped:
                out.append(GpuEventNotice(-1, self.dropped, time.time(), "dropped", 0))
                self.dropped = 0
            if self._signalled:
                with contextlib.suppress(BlockingIOError):
                    while os.read(self._r, 4096):
                        pass
                self._signalled = False
            return out

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for fd in (self._r, self._w):
                with contextlib.suppress(OSError):
                    os.close(fd)


class EventWaiter:
    """A daemon thread calling `wait(timeout_ms)` until stopped; each call returns the notices it got (an
    empty list is a timeout: wait again). An exception from `wait` ends the thread with one `error` notice.
    `stop()` sets the flag and calls `interrupt` (if given) to cut a wait short; `close()` joins."""

    def __init__(
        self,
        wait: Callable[[int], list[GpuEventNotice]],
        queue: EventQueue,
        *,
        timeout_ms: int = 500,
        interrupt: Callable[[], None] | None = None,
        name: str = "nvml-events",
    ) -> None:
        self._wait = wait
        self.queue = queue
        self.timeout_ms = timeout_ms
        self._interrupt = interrupt
        self._stop = threading.Event()
        self.error: str | None = None
        self.waits = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> EventWaiter:
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                got = self._wait(self.timeout_ms)
            except Exception as e:  # the event path is gone; the collector says so once, the agent goes on
                self.error = str(e) or type(e).__name__
                if not self._stop.is_set():
                    self.queue.put([GpuEventNotice(-1, 0, time.time(), "error", 0, message=self.error)])
                return
            self.waits += 1
            if got and not self._stop.is_set():
                self.queue.put(got)

    def stop(self) -> None:
        self._stop.set()
        if self._interrupt is not None:
            self._interrupt()

    def close(self, grace_s: float | None = None) -> bool:
        """Stop and join for at most one wait timeout plus `grace_s` (default 1 s); True when the thread ended.
        A thread still inside the driver is left (daemon): the caller must not free what it waits on."""
        self.stop()
        if self._thread.ident is not None:
            self._thread.join(self.timeout_ms / 1000.0 + (1.0 if grace_s is None else grace_s))
        return not self._thread.is_alive()
