"""The NVML collector: every GPU's gauges and counters, tiered by measured cost, and XIDs from NVML events.

Reads come from an injected GpuSource (live NVML, or the fake fed by a recording). A read the GPU does not
support (NVML_ERROR_NOT_SUPPORTED, FUNCTION_NOT_FOUND) is learned once per GPU and not asked again; any other
error is counted and the read made again at its next due time, reported when it starts failing and when it
answers again (with the count in between), never once per collection. A lost GPU (GPU_IS_LOST /
RESET_REQUIRED), at start or later, is reported once as an event and skipped until it answers again; then its
identity (UUID, serial, PCI id) is read again. Without NVML the collector stays down and retries every minute.
"""

from __future__ import annotations

import time

from fleettool.collectors.base import Collected
from fleettool.collectors.nvml_fabric_samples import plan_reads, read_gpu
from fleettool.collectors.nvml_failures import Streaks, recovered
from fleettool.collectors.nvml_hung import Abandoned, GpuGuard
from fleettool.collectors.nvml_schedule import TierSchedule
from fleettool.collectors.registry import CollectorConfig
from fleettool.model import Event, EventKind, GpuInfo, Sample, normalize_pci_bus_id
from fleettool.sources.base import (
    GpuLost,
    GpuSource,
    NotSupported,
    SourceError,
    SourceUnavailable,
    Tier,
)
from fleettool.sources.nvml_events import RECOVERY_ACTIONS

DEFAULT_TIER_S = {Tier.FAST: 1.0, Tier.MEDIUM: 10.0, Tier.DEAR: 60.0, Tier.STATIC: 600.0}
RETRY_OPEN_S = 60.0
SKIPPED = "agent_nvml_periods_skipped_total"
# NVML event types (sources/nvml_events.EVENT_TYPES names) -> the store's event kind, message, code
EVENT_TEXT: dict[str, tuple[EventKind, str, int | None]] = {
    "xid": (EventKind.XID, "", None),
    "dbe": (EventKind.NVML_EVENT, "double-bit ECC error reported through NVML events", None),
    "gpu-unavailable": (EventKind.FELL_OFF_BUS, "GPU unavailable (NVML event GpuUnavailableError)", None),
    "recovery-action": (EventKind.NVML_EVENT, "", None),
    "error": (EventKind.NVML_ERROR, "", None),
    "dropped": (EventKind.AGENT, "", None),
}


class NvmlCollector:
    id = "nvml"
    availability_metric = "agent_nvml_available"  # the agent also reports NVML's presence under this name

    def __init__(
        self,
        source: GpuSource,
        node: str,
        *,
        interval_s: float = 1.0,
        tier_s: dict[Tier, float] | None = None,
        expected_gpus: int | None = None,
        known_gpus: int = 0,
    ) -> None:
        self.source = source
        self.node = node
        self.tier_s = dict(tier_s or DEFAULT_TIER_S)
        self.tier_s[Tier.FAST] = interval_s
        # what gpu_count_expected reports: --expect-gpus, else set at the first open from NVML's count and the
        # GPUs the store knew (a restart after a GPU fell off must still miss it), and kept across reopens
        self.expected_gpus = expected_gpus
        self.known_gpus = known_gpus
        self._reason: str | None = None
        self._open = False
        self._last_open_try = -1e18
        self.schedule = TierSchedule(self.tier_s, interval_s)
        self.unsupported: set[tuple[int, str]] = set()
        self._lost: set[int] = set()
        self.streaks = Streaks()  # failing reads, device count, event wait: events on state changes only
        # GPUs lost when opened: reported at the next collection
        self._lost_at_start: list[tuple[int, str]] = []
        self._devices: dict[int, GpuInfo] = {}
        self._driver: str | None = None
        self._count = 0
        self.guard = GpuGuard()  # the GPU whose read is in flight; the GPUs set aside as hung
        self._skips_reported: dict[Tier, int] = {}
        self._skipped_reads: dict[int, int] = {}  # per GPU, reads not made because a call was stuck
        self._plan: list[str] = []  # the reads of the collection in progress

    # -- lifecycle ----------------------------------------------------------------------------------------
    @property
    def reason(self) -> str | None:
        return self._reason

    def inflight(self) -> str | None:
        return self.source.inflight

    def start(self) -> bool:
        self._last_open_try = time.monotonic()
        try:
            self.source.open()
        except SourceUnavailable as e:
            self._reason = str(e)
            self._open = False
            return False
        self._open = True
        self._reason = None
        self.schedule.restart()
        self._inventory()
        return True

    def close(self) -> None:
        if self._open:
            self.source.close()
        self._open = False

    def _inventory(self) -> None:
        try:
            self._driver = self.source.driver_version()
        except SourceError:
            self._driver = None
        self._count = self.source.device_count()
        if self.expected_gpus is None:
            self.expected_gpus = max(self._count, self.known_gpus)
        for i in range(self._count):
            try:
                self._identify(i)
            except GpuLost as e:
                if i not in self._lost:
                    self._lost.add(i)
                    self._lost_at_start.append((i, str(e)))
            except SourceError:
                continue

    def _identify(self, i: int) -> GpuInfo:
        """GPU i's identity from NVML (raises as device_info does), kept for its samples and events."""
        d = self.source.device_info(i)
        info = GpuInfo(
            self.node, i, d.uuid, normalize_pci_bus_id(d.pci_bus_id), d.name, self._driver, d.serial
        )
        self._devices[i] = info
        return info

    # -- collection ---------------------------------------------------------------------------------------
    def collect(self, now: float) -> Collected:
        out = Collected()
        if not self._open:
            if time.monotonic() - self._last_open_try >= RETRY_OPEN_S and self.start():
                out.events.append(
                    Event(now, self.node, EventKind.AGENT.value, "NVML is available again", source="nvml")
                )
            else:
                return out
        gen = self.guard.begin(out, now)
        try:
            self._collect(now, out, gen)
        except Abandoned:  # the watchdog gave this collection up while it was stuck in a GPU's read
            return Collected()
        finally:
            self.guard.end(gen)
        return out

    def _collect(self, now: float, out: Collected, gen: int) -> None:
        for i, why in self._lost_at_start:
            out.events.append(self._event(now, i, EventKind.NVML_ERROR, f"GPU is lost: {why}", code=15))
            out.errors += 1
        self._lost_at_start = []
        self._events(now, out)
        due = self.schedule.due(now)
        health = Tier.MEDIUM in due or Tier.STATIC in due
        if health:
            out.gpus = list(self._devices.values())
            try:
                count = self.source.device_count()
            except SourceError as e:
                count = 0
                out.errors += 1
                if self.streaks.fail("count"):
                    out.events.append(
                        self._event(now, None, EventKind.NVML_ERROR, f"nvmlDeviceGetCount: {e}")
                    )
            else:
                if n := self.streaks.ok("count"):
                    out.events.append(
                        self._event(now, None, EventKind.AGENT, recovered("nvmlDeviceGetCount", n))
                    )
            out.samples.append(Sample(now, self.node, None, None, "gpu_count", float(count)))
            if self.expected_gpus is not None:
                out.samples.append(
                    Sample(now, self.node, None, None, "gpu_count_expected", float(self.expected_gpus))
                )
        self._report_skips(now, out, health)
        reads = self._plan = plan_reads(due)
        for i in range(self._count):
            if self._set_aside(now, i, reads, out, health):
                continue
            dev = self._devices.get(i)
            uuid = dev.uuid if dev else None
            identify = dev is None  # unidentified (lost at start): its identity is read once it answers
            for what in reads:
                if (i, what) in self.unsupported:
                    continue
                self.guard.enter(gen, i, what)
                try:
                    rows = read_gpu(self.source, i, what, now)
                except NotSupported:
                    self.guard.leave(gen, i)
                    self.unsupported.add((i, what))
                    continue
                except GpuLost as e:
                    self.guard.leave(gen, i)
                    self.streaks.fail(("lost", i))
                    if i not in self._lost:
                        self._lost.add(i)
                        out.events.append(
                            self._event(now, i, EventKind.NVML_ERROR, f"GPU is lost: {e}", code=15)
                        )
                    out.errors += 1
                    break
                except SourceError as e:
                    self.guard.leave(gen, i)
                    out.errors += 1
                    if self.streaks.fail((i, what)):
                        out.events.append(self._event(now, i, EventKind.NVML_ERROR, str(e)))
                    continue
                except BaseException:
                    self.guard.leave(gen, i)
                    raise
                self.guard.leave(gen, i)
                if i in self._lost or identify:
                    identify = False
                    dev = self._answers_again(now, i, out)
                    uuid = dev.uuid if dev else None
                if n := self.streaks.ok((i, what)):
                    out.events.append(self._event(now, i, EventKind.AGENT, recovered(f"NVML read {what}", n)))
                for metric, sub, value in rows:
                    out.samples.append(Sample(now, self.node, i, uuid, metric, value, sub))

    def _answers_again(self, now: float, i: int, out: Collected) -> GpuInfo | None:
        """GPU i answered a read after being lost (or unidentified): its identity is read again (another GPU may
        sit at the index now), reported in the inventory; the UUID its samples carry from here on."""
        was_lost = i in self._lost
        self._lost.discard(i)
        n = self.streaks.ok(("lost", i))
        try:
            dev: GpuInfo | None = self._identify(i)
        except SourceError:
            dev = self._devices.get(i)
        if dev is not None:
            out.gpus.append(dev)
        if was_lost:
            msg = f"GPU answers NVML again after {n} failed collection{'' if n == 1 else 's'}"
            out.events.append(self._event(now, i, EventKind.AGENT, msg))
        return dev

    # -- late ticks and hung GPUs -------------------------------------------------------------------------
    def _report_skips(self, now: float, out: Collected, health: bool) -> None:
        """agent_nvml_periods_skipped_total per tier: with the count, and at once when it grew."""
        skipped = self.schedule.skipped
        if health or skipped != self._skips_reported:
            self._skips_reported = dict(skipped)
            out.samples.extend(
                Sample(now, self.node, None, None, SKIPPED, float(n), f"tier={tier.name.lower()}")
                for tier, n in skipped.items()
            )

    def _set_aside(self, now: float, i: int, reads: list[str], out: Collected, health: bool) -> bool:
        """True while a call on GPU i is stuck (its reads are skipped and counted); a stuck call that has
        returned is reported and the GPU is read again."""
        stuck = self.guard.hung.get(i)
        if stuck is None:
            return False
        back = self.guard.returned(i)
        if back is not None and back.returned is not None:
            took = back.returned - back.since
            msg = (
                f"NVML call {back.call} returned after {took:.1f}s: GPU {i} is read again "
                f"({back.skipped} reads skipped meanwhile)"
            )
            out.events.append(self._event(now, i, EventKind.AGENT, msg))
            self._hung_samples(now, i, 0.0, out)
            return False
        n = sum(1 for what in reads if (i, what) not in self.unsupported)
        stuck.skipped += n
        self._skipped_reads[i] = self._skipped_reads.get(i, 0) + n
        out.errors += 1
        self._hung_samples(now, i, 1.0, out)
        return True

    def _hung_samples(self, now: float, i: int, hung: float, out: Collected) -> None:
        uuid = self._devices[i].uuid if i in self._devices else None
        skipped = float(self._skipped_reads.get(i, 0))
        out.samples.append(Sample(now, self.node, i, uuid, "agent_nvml_gpu_hung", hung))
        out.samples.append(Sample(now, self.node, i, uuid, "agent_nvml_reads_skipped_total", skipped))

    def abandon(self) -> Collected | None:
        """The watchdog gives up a collection stuck past its limit. Inside a GPU's read: that GPU is set aside
        as hung (an event naming the call, agent_nvml_gpu_hung 1) and what the collection gathered before is
        returned, so the next collection, on a fresh thread, reads the other GPUs. None when the collection is
        stuck outside a GPU's read (the whole collector is hung, as before)."""
        got = self.guard.abandon(self.source.inflight)
        if got is None:
            return None
        out, stuck = got
        now, i = stuck.ts, stuck.gpu
        took = time.monotonic() - stuck.since
        msg = (
            f"GPU {i} hung: NVML call {stuck.call} has not returned after {took:.1f}s; its reads are set "
            "aside until it does, the other GPUs are read on"
        )
        out.events.append(self._event(now, i, EventKind.AGENT, msg))
        # what the given-up collection had still to read: the hung GPU's other reads, the GPUs after it
        plan = self._plan
        left = {i: plan[plan.index(stuck.read) + 1 :] if stuck.read in plan else []}
        left.update((g, plan) for g in range(i + 1, self._count) if g not in self.guard.hung)
        for g, reads in left.items():
            n = sum(1 for what in reads if (g, what) not in self.unsupported)
            self._skipped_reads[g] = self._skipped_reads.get(g, 0) + n
            if g == i:
                stuck.skipped += n
            else:
                self._hung_samples(now, g, 0.0, out)
        self._hung_samples(now, i, 1.0, out)
        out.errors += 1
        return out

    def wait_fd(self) -> int | None:
        """Readable while NVML events wait (the agent loop wakes on it and collects at once)."""
        return self.source.wait_fd() if self._open else None

    def _events(self, now: float, out: Collected) -> None:
        """NVML's events since the last collection, as the store's events. A double-bit ECC error, a GPU
        gone unavailable or a recovery action also makes the ECC/remap tier due now, so the counters the
        instant rules judge are read in this same collection."""
        try:
            notices = self.source.poll_events(now)
        except SourceError as e:
            out.errors += 1
            if self.streaks.fail("events"):
                out.events.append(self._event(now, None, EventKind.NVML_ERROR, f"event wait: {e}"))
            return
        if n := self.streaks.ok("events"):
            out.events.append(self._event(now, None, EventKind.AGENT, recovered("NVML's event wait", n)))
        for x in notices:
            gpu = x.index if x.index >= 0 else None
            kind, msg, code = EVENT_TEXT.get(x.type, (EventKind.NVML_EVENT, "", None))
            if x.type == "xid":
                code = x.code
                msg = f"Xid {x.code} reported through NVML events"
            elif x.type == "recovery-action":
                code = x.code
                msg = f"NVML GpuRecoveryAction: {RECOVERY_ACTIONS.get(x.code, x.code)}"
            elif x.type == "error":
                msg = f"NVML event wait stopped ({x.message}); XIDs come from the kernel log only"
                out.errors += 1
            elif x.type == "dropped":
                msg = f"{x.code} NVML events dropped: the event queue was full"
            elif not msg:
                msg = f"NVML event {x.type} (eventData {x.code})"
            if x.gpu_instance is not None:
                msg += f" on MIG GPU instance {x.gpu_instance}" + (
                    f"/{x.compute_instance}" if x.compute_instance is not None else ""
                )
            out.events.append(self._event(x.ts, gpu, kind, msg, code=code))
            if x.type in ("dbe", "gpu-unavailable", "recovery-action"):
                self.schedule.force(Tier.MEDIUM)

    def _event(self, ts: float, gpu: int | None, kind: EventKind, msg: str, code: int | None = None) -> Event:
        dev = self._devices.get(gpu) if gpu is not None else None
        return Event(
            ts,
            self.node,
            kind.value,
            msg,
            gpu=gpu,
            uuid=dev.uuid if dev else None,
            pci_bus_id=dev.pci_bus_id if dev else None,
            code=code,
            source="nvml",
        )


def from_config(cfg: CollectorConfig) -> NvmlCollector | None:
    """The registry's factory: the run's GPU source, tiered by cost (or every tier each `all_tiers_every_s`)."""
    if cfg.gpu_source is None:
        return None
    tiers = None
    if (every := cfg.all_tiers_every_s) is not None:
        tiers = {Tier.FAST: cfg.interval_s, Tier.MEDIUM: every, Tier.DEAR: every, Tier.STATIC: every}
    return NvmlCollector(
        cfg.gpu_source,
        cfg.node,
        interval_s=cfg.interval_s,
        tier_s=tiers,
        expected_gpus=cfg.expected_gpus,
        known_gpus=cfg.known_gpus,
    )
