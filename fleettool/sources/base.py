"""What a GPU source offers the NVML collector: named reads that return canonical (metric, sub, value) rows.

Three sources implement it: the live NVML (sources/nvml.py), and the fake (sources/fake.py), which plays a
recording back as if it were NVML and can inject faults. The read names, their metrics and their sampling
tier live here so that every source answers the same questions.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


class SourceError(Exception):
    """A read failed (the NVML error text is the message)."""


class NotSupported(SourceError):
    """The GPU or driver does not support this read; ask once per GPU, then stop asking."""


class GpuLost(SourceError):
    """NVML_ERROR_GPU_IS_LOST (after XID 79) or RESET_REQUIRED: the GPU no longer answers."""


class SourceUnavailable(SourceError):
    """No NVML library, no driver, or no permission: the source cannot start."""


class Tier(enum.IntEnum):
    """How often a read is made, chosen by its measured cost on an H200 (samples/h200-recording)."""

    FAST = 0  # every interval (default 1 s): 1-20 us getters
    MEDIUM = 1  # every 10 s: cheap counters that change rarely
    DEAR = 2  # every 60 s: energy (~5 ms), violation status (~1 ms each), field-value batches (~7.6 ms/40)
    STATIC = 3  # every 10 min: thresholds, maxima


# read name -> (tier, metrics it yields). Order within a tier is the order of the calls.
READS: dict[str, tuple[Tier, tuple[str, ...]]] = {
    "temperature": (Tier.FAST, ("gpu_temp_c",)),
    "power": (Tier.FAST, ("power_w",)),
    "utilization": (Tier.FAST, ("gpu_util_pct", "mem_util_pct")),
    "memory": (Tier.FAST, ("fb_used_bytes", "fb_total_bytes")),
    "clocks": (Tier.FAST, ("sm_clock_mhz", "mem_clock_mhz")),
    "clock_events": (Tier.FAST, ("clock_event_reasons",)),
    "mem_temperature": (Tier.MEDIUM, ("mem_temp_c",)),
    "power_limit": (Tier.MEDIUM, ("power_limit_w",)),
    "ecc": (
        Tier.MEDIUM,
        ("ecc_mode", "ecc_sbe_volatile", "ecc_dbe_volatile", "ecc_sbe_aggregate", "ecc_dbe_aggregate"),
    ),
    "remapped_rows": (
        Tier.MEDIUM,
        ("remap_correctable_rows", "remap_uncorrectable_rows", "remap_pending", "remap_failure"),
    ),
    "remap_histogram": (
        Tier.MEDIUM,
        ("remap_bank_max", "remap_bank_high", "remap_bank_partial", "remap_bank_low", "remap_bank_none"),
    ),
    "retired_pages": (Tier.MEDIUM, ("retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending")),
    "pcie_link": (Tier.MEDIUM, ("pcie_link_gen", "pcie_link_width")),
    "persistence": (Tier.MEDIUM, ("persistence_mode", "pstate")),
    "energy": (Tier.DEAR, ("energy_j",)),
    "violations": (Tier.DEAR, ("violation_power_us", "violation_thermal_us")),
    "pcie_counters": (
        Tier.DEAR,
        (
            "pcie_replay_total",
            "pcie_replay_rollover_total",
            "pcie_l0_to_recovery_total",
            "pcie_correctable_errors_total",
            "pcie_nonfatal_errors_total",
            "pcie_fatal_errors_total",
            "recovery_action",
        ),
    ),
    "nvlink": (
        Tier.DEAR,
        (
            "nvlink_link_up",
            "nvlink_replay_errors_total",
            "nvlink_recovery_errors_total",
            "nvlink_crc_flit_errors_total",
            "nvlink_crc_data_errors_total",
        ),
    ),
    "limits": (
        Tier.STATIC,
        (
            "temp_slowdown_c",
            "temp_shutdown_c",
            "temp_gpu_max_c",
            "temp_mem_max_c",
            "sm_clock_max_mhz",
            "mem_clock_max_mhz",
            "pcie_link_gen_max",
            "pcie_link_width_max",
        ),
    ),
}

Row = tuple[str, str, float]  # metric, sub, value


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    index: int
    uuid: str
    name: str
    pci_bus_id: str
    serial: str | None = None


@dataclass(frozen=True)
class GpuEventNotice:
    """An event delivered by NVML's event API (or played by the fake the same way).

    `type` is one of EVENT_TYPES' names: xid (nvmlEventTypeXidCriticalError; `code` is the XID), dbe (a
    double-bit ECC error), sbe, gpu-unavailable, recovery-action (`code` is the NVML_GPU_RECOVERY_ACTION_*
    number), another NVML type by its name, or `error`: the event wait stopped (`message` says why).
    `index` is -1 when the event named no device or one that is not in the source's handle map: such an event
    is kept with the GPU unknown, never dropped. MIG attribution is None when NVML reports 0xFFFFFFFF."""

    index: int
    code: int
    ts: float
    type: str = "xid"
    event_type: int = 0x8
    gpu_instance: int | None = None
    compute_instance: int | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process holding a context on a GPU, as NVML's running-process lists name it
    (nvmlDeviceGetComputeRunningProcesses / nvmlDeviceGetGraphicsRunningProcesses: pid, usedGpuMemory).
    `kind` is nvidia-smi's letter: C (compute), G (graphics) or C+G. The PID is in NVML's PID namespace (the
    host's), which inside a container is not the container's own."""

    pid: int
    kind: str
    used_memory_bytes: int | None = None


@runtime_checkable
class ProcessLister(Protocol):
    """A GPU source that can say which processes hold a context on a GPU (the burn-in's busy check)."""

    def running_processes(self, index: int, now: float) -> list[GpuProcess]: ...


class GpuSource(Protocol):
    name: str

    def open(self) -> None: ...

    def close(self) -> None: ...

    def driver_version(self) -> str | None: ...

    def device_count(self) -> int: ...

    def device_info(self, index: int) -> DeviceInfo: ...

    def read(self, index: int, what: str, now: float) -> list[Row]: ...

    def poll_events(self, now: float) -> list[GpuEventNotice]:
        """The events that arrived since the last call, without waiting (drains the wake fd too)."""
        ...

    def wait_fd(self) -> int | None:
        """An fd that is readable while events wait in poll_events (None: no event path, poll each tick)."""
        ...

    @property
    def inflight(self) -> str | None:
        """The call in progress, for the watchdog's report ('nvmlDeviceGetTotalEnergyConsumption(gpu 3)')."""
        ...


# nvmlGpuFabricState_t (nvml.h): the GPU's registration with the NVLink fabric
FABRIC_STATES = {0: "not-supported", 1: "not-started", 2: "in-progress", 3: "completed"}
FABRIC_COMPLETED = 3


@dataclass(frozen=True, slots=True)
class FabricInfo:
    """What nvmlDeviceGetGpuFabricInfoV says of a GPU's NVLink fabric (multi-node NVLink: GB200 NVL72 and
    later): the cluster UUID and clique ID of its NVLink domain, the probe `state` (FABRIC_STATES) and the
    probe's error `status` (an NVML return code, 0 success; to be read only once the state is completed).

    A GPU outside such a fabric answers with state 0 (not supported) and an all-zero UUID: an H100 80GB HBM3
    on driver 580.159.04 does so (the call succeeds; it raises nothing). Some H100s report state completed
    with an all-zero UUID (meta-pytorch/torchcomms#1385): no domain either."""

    cluster_uuid: str  # 32 hex digits as NVML gives the 16 bytes; `uuid` prints it 8-4-4-4-12
    clique_id: int
    state: int
    status: int = 0
    health_mask: int | None = None  # nvmlGpuFabricInfo_v2's healthMask (None: the older struct has none)

    @property
    def uuid(self) -> str:
        h = self.cluster_uuid.lower()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}" if len(h) == 32 else h

    @property
    def domain(self) -> str | None:
        """The NVLink domain: the cluster UUID, 8-4-4-4-12, or None: the probe is not completed, it failed, or
        the UUID is all zeros. The same value as the kubectl reader's `nvlink_domain` for this node."""
        if self.state != FABRIC_COMPLETED or self.status != 0 or not self.cluster_uuid.strip("0-"):
            return None
        return self.uuid

    @property
    def clique(self) -> str | None:
        """`<clusterUuid>.<cliqueId>`, as GPU Feature Discovery writes the node label nvidia.com/gpu.clique (a
        clique is a partition of the domain: NCCL treats two GPUs as NVLink peers only when both match)."""
        return None if self.domain is None else f"{self.uuid}.{self.clique_id}"

    @property
    def state_name(self) -> str:
        name = FABRIC_STATES.get(self.state, f"state {self.state}")
        return f"{name} (status {self.status})" if self.state == FABRIC_COMPLETED and self.status else name


@runtime_checkable
class FabricReader(Protocol):
    """A GPU source that can read a GPU's fabric info (raises NotSupported, SourceError like any read)."""

    def fabric_info(self, index: int) -> FabricInfo: ...
