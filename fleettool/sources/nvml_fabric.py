"""A GPU's NVLink fabric info through NVML: nvmlDeviceGetGpuFabricInfoV with the v2 struct (clusterUuid,
status, cliqueId, state, healthMask; pynvml 13.615.71's `c_nvmlGpuFabricInfoV_t`), else the older
nvmlDeviceGetGpuFabricInfo (no version field) on drivers before it. Part of the live source (sources/nvml.py)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from fleettool.sources.base import FabricInfo, NotSupported


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
    return FabricInfo(bytes(info.clusterUuid).hex(), int(info.cliqueId), int(info.state), int(info.status))
