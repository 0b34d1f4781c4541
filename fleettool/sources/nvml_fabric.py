"""A GPU's NVLink fabric info through NVML: nvmlDeviceGetGpuFabricInfoV with the v2 struct (clusterUuid,
status, cliqueId, state, healthMask; pynvml 13.615.71's `c_nvmlGpuFabricInfoV_t`), else the older
nvmlDeviceGetGpuFabricInfo (no version field, no health mask) on drivers before it. Part of the live source
(sources/nvml.py).

One reading serves both of its readers: the NVML collector reads it each period of its slow tier and the
agent's topology refresh (agent/topology.py, every 10 minutes) takes that reading when it is recent enough
(`fabric_reading`), so the driver is asked once per period, not twice.

The health mask (nvml.h, NVIDIA/go-nvml gen/nvml/nvml.h @2f9e261, the NVML_GPU_FABRIC_HEALTH_MASK_* block):
two-bit fields, each 0 not supported, 1 TRUE, 2 FALSE (so a field is TRUE exactly when its low bit is set):
DEGRADED_BW at shift 0 ("Bandwidth degraded"), ROUTE_RECOVERY at 2 ("Route Recovery in progress"),
ROUTE_UNHEALTHY at 4 ("Route is unhealthy"), ACCESS_TIMEOUT_RECOVERY at 6 ("Access Timeout Recovery in
progress"); INCORRECT_CONFIGURATION, four bits at shift 8 (1 NONE: correct; 2 SysGUID, 3 chassis serial, 4 no
partition, 5 insufficient NVLinks, 6 incompatible GPU firmware, 7 invalid location, 8 GPU state invalid);
PARTITION_ASSIGNED at 12 (tri-state, not a fault by itself).
"""

from __future__ import annotations

import ctypes
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from fleettool.sources.base import FABRIC_COMPLETED, FabricInfo, FabricReader, NotSupported

# two-bit TRUE fields: name -> shift
HEALTH_FLAGS = {
    "degraded-bandwidth": 0,
    "route-recovery": 2,
    "route-unhealthy": 4,
    "access-timeout-recovery": 6,
}
CONFIG_SHIFT, CONFIG_WIDTH = 8, 0xF
CONFIG_ERRORS = {
    2: "incorrect SysGUID",
    3: "incorrect chassis serial number",
    4: "no partition",
    5: "insufficient NVLinks",
    6: "incompatible GPU firmware",
    7: "invalid location",
    8: "GPU state invalid",
}
# the rules' masks (bitmask_any): a TRUE field has its low bit set; an incorrect configuration (2..15) sets one
# of the config field's upper three bits (1, NONE, sets only its lowest)
MASK_UNHEALTHY = (1 << HEALTH_FLAGS["route-unhealthy"]) | (0xE << CONFIG_SHIFT)  # 0xE10
MASK_DEGRADED = sum(
    1 << HEALTH_FLAGS[f] for f in ("degraded-bandwidth", "route-recovery", "access-timeout-recovery")
)


def health_problems(mask: int) -> list[str]:
    """What a health mask reports as wrong, in nvml.h's words ([] for a healthy or unsupported mask)."""
    out = [name for name, shift in HEALTH_FLAGS.items() if (mask >> shift) & 0x3 == 1]
    cfg = (mask >> CONFIG_SHIFT) & CONFIG_WIDTH
    if cfg >= 2:
        out.append("incorrect configuration: " + CONFIG_ERRORS.get(cfg, f"code {cfg}"))
    return out


def read_fabric(nv: Any, call: Callable[..., Any], index: int, handle: Any) -> FabricInfo:
    """GPU `index`'s fabric info; NotSupported where the library has neither call (raised by `call` for
    NVML's NOT_SUPPORTED and FUNCTION_NOT_FOUND, like every read)."""
    if hasattr(nv, "nvmlDeviceGetGpuFabricInfoV") and hasattr(nv, "c_nvmlGpuFabricInfoV_t"):
        name, info = "nvmlDeviceGetGpuFabricInfoV", nv.c_nvmlGpuFabricInfoV_t()
    elif hasattr(nv, "nvmlDeviceGetGpuFabricInfo") and hasattr(nv, "c_nvmlGpuFabricInfo_t"):
        name, info = "nvmlDeviceGetGpuFabricInfo", nv.c_nvmlGpuFabricInfo_t()
    else:
        raise NotSupported(f"nvmlDeviceGetGpuFabricInfoV(gpu {index}): not in this nvidia-ml-py")
    call(f"{name}(gpu {index})", getattr(nv, name), handle, ctypes.byref(info))
    mask = getattr(info, "healthMask", None)
    return FabricInfo(
        bytes(info.clusterUuid).hex(),
        int(info.cliqueId),
        int(info.state),
        int(info.status),
        None if mask is None else int(mask),
    )


def in_fabric(info: FabricInfo) -> bool:
    """The GPU takes part in a multi-node NVLink fabric: not state 0 (not supported: an H100 80GB HBM3 on
    driver 580.159.04), and not a completed, successful probe with an all-zero cluster UUID (an H100 outside
    a multi-node NVLink fabric, meta-pytorch/torchcomms#1385)."""
    if info.state == 0:
        return False
    zero = not info.cluster_uuid.strip("0-")
    return not (info.state == FABRIC_COMPLETED and info.status == 0 and zero)


_MEMO: weakref.WeakKeyDictionary[Any, dict[int, tuple[float, FabricInfo]]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def fabric_reading(
    source: FabricReader, index: int, max_age_s: float = 0.0, clock: Callable[[], float] = time.monotonic
) -> FabricInfo:
    """GPU `index`'s fabric info: the source's last answer when it is at most `max_age_s` old, else a fresh
    call (kept for the next reader). Raises as `source.fabric_info` does; a failed call keeps nothing."""
    now = clock()
    with _LOCK:
        got = _MEMO.get(source, {}).get(index)
    if got is not None and now - got[0] <= max_age_s:
        return got[1]
    info = source.fabric_info(index)
    with _LOCK:
        _MEMO.setdefault(source, {})[index] = (clock(), info)
    return info
