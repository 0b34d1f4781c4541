"""The NVLink domain as the NVML collector samples it: fabric info per GPU, and the count of its active links.

- `fabric`: a read of its own in the slow tier (Tier.DEAR, every 60 s by default: the fabric's state, probe
  status, clique and health mask change on a fault or a fabric manager restart, not by the second). It goes
  through sources/nvml_fabric.fabric_reading, so the agent's topology refresh takes the same reading instead of
  calling the driver again. A GPU outside a multi-node NVLink fabric gives no samples and no alert: state 0
  (an H100 80GB HBM3 on driver 580.159.04) is NotSupported, learned once and not asked again; a completed,
  successful probe with an all-zero cluster UUID (meta-pytorch/torchcomms#1385) is asked again each period.
  Samples: nvlink_fabric_state (1 not started, 2 in progress, 3 completed), and once completed
  nvlink_fabric_status (the probe's NVML return code), nvlink_fabric_health_mask (where the driver's struct has
  one) and nvlink_fabric_clique_id.
- `nvlink`: besides nvlink_link_up per link, nvlink_links_active: how many of the GPU's links are active now,
  the figure the link-count rule compares with the GPU's own count before (never a table per SKU: gpud#295).
"""

from __future__ import annotations

from fleettool.sources.base import (
    FABRIC_COMPLETED,
    READS,
    FabricInfo,
    FabricReader,
    GpuSource,
    NotSupported,
    Row,
    Tier,
)
from fleettool.sources.nvml_fabric import fabric_reading, in_fabric

FABRIC_READ = "fabric"
FABRIC_TIER = Tier.DEAR


def plan_reads(due: list[Tier]) -> list[str]:
    """The reads of one collection: READS' reads of the due tiers, and the fabric read with its tier."""
    reads = [name for name, (tier, _) in READS.items() if tier in due]
    if FABRIC_TIER in due:
        reads.append(FABRIC_READ)
    return reads


def fabric_rows(info: FabricInfo) -> list[Row]:
    """One GPU's fabric info as rows: NotSupported for state 0 (never in a fabric: not asked again); none for
    a completed, successful probe with an all-zero UUID (outside a multi-node fabric now, asked again: on an HGX
    H100 the fabric manager's registration can fall back to in progress, NVSentinel#889)."""
    if info.state == 0:
        raise NotSupported(f"NVLink fabric: {info.state_name} (no fabric on this GPU)")
    if not in_fabric(info):
        return []
    rows: list[Row] = [("nvlink_fabric_state", "", float(info.state))]
    if info.state == FABRIC_COMPLETED:  # nvml.h: status "must be checked only if state returns complete"
        rows.append(("nvlink_fabric_status", "", float(info.status)))
        rows.append(("nvlink_fabric_clique_id", "", float(info.clique_id)))
        if info.health_mask is not None:
            rows.append(("nvlink_fabric_health_mask", "", float(info.health_mask)))
    return rows


def links_active(rows: list[Row]) -> list[Row]:
    """nvlink_links_active from one nvlink read's per-link states ([] when it named no link)."""
    ups = [v for m, _, v in rows if m == "nvlink_link_up"]
    return [("nvlink_links_active", "", float(sum(1 for v in ups if v >= 1.0)))] if ups else []


def read_gpu(source: GpuSource, index: int, what: str, now: float) -> list[Row]:
    """One read of GPU `index` (raises as source.read does): the fabric read through the shared reading,
    the nvlink read with its active-link count."""
    if what == FABRIC_READ:
        if not isinstance(source, FabricReader):
            raise NotSupported(f"nvmlDeviceGetGpuFabricInfoV(gpu {index}): this source has no fabric info")
        return fabric_rows(fabric_reading(source, index))
    rows = source.read(index, what, now)
    if what == "nvlink":
        rows = rows + links_active(rows)
    return rows
