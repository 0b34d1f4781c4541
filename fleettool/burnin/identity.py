"""Which NVML GPU is `cuda:i`? Not NVML's GPU i in general: CUDA numbers the devices it can see (a subset under
CUDA_VISIBLE_DEVICES, renumbered from 0) in its own order (CUDA_DEVICE_ORDER=FASTEST_FIRST by default, not
PCI bus order), while NVML numbers every GPU of the node by PCI bus id. A verdict filed against the wrong
index sends the wrong GPU to repair.

So each CUDA device is matched to an NVML GPU by UUID (torch's `get_device_properties(i).uuid` prints it
without NVML's `GPU-` prefix); where a side gives no UUID, by PCI domain:bus:device (`pci_domain_id`,
`pci_bus_id`, `pci_device_id`), saying so; otherwise it is left unmatched (NVML index None, CUDA's UUID kept),
never taken to be NVML's index i. Pure: `read_cuda` and `read_nvml` do the reading, `match` the matching.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleettool.model import normalize_pci_bus_id

if TYPE_CHECKING:
    from fleettool.sources.base import GpuSource


@dataclass(frozen=True)
class CudaId:
    ordinal: int  # cuda:ordinal, as this process's CUDA numbers it
    uuid: str | None  # GPU-xxxxxxxx-..., or None where torch gave none
    pci_bus_id: str | None  # dddd:bb:dd (model.normalize_pci_bus_id), or None


@dataclass(frozen=True)
class NvmlId:
    index: int
    uuid: str | None
    pci_bus_id: str | None  # any spelling NVML or nvidia-smi gives


@dataclass(frozen=True)
class Match:
    ordinal: int
    index: int | None  # the NVML index, None where unmatched
    uuid: str | None  # NVML's where matched, else CUDA's
    pci_bus_id: str | None
    by: str | None  # "uuid", "pci" or None (unmatched)
    note: str = ""  # why PCI, or why unmatched

    def evidence(self) -> dict[str, Any]:
        """What a result measured on this device says about where it was measured."""
        ev: dict[str, Any] = {
            "cuda_device": f"cuda:{self.ordinal}",
            "nvml_index": self.index,
            "uuid": self.uuid,
            "pci_bus_id": self.pci_bus_id,
            "matched_by": self.by,
        }
        if self.note:
            ev["note"] = self.note
        return ev


def norm_uuid(raw: object) -> str | None:
    """NVML's `GPU-...` (or `MIG-...`) spelling, lower case; torch's bare UUID gets the `GPU-` prefix."""
    if raw is None:
        return None
    s = str(raw).strip().lower()
    if not s or s.strip("0-") == "":  # empty, or the all-zero UUID a driver gives when it has none
        return None
    if s.startswith("gpu-"):
        return "GPU-" + s[4:]
    if s.startswith("mig-"):
        return "MIG-" + s[4:]
    return "GPU-" + s


def _pci(raw: str | None) -> str | None:
    return normalize_pci_bus_id(raw) if raw else None


def match(cuda: list[CudaId], nvml: list[NvmlId], why_no_nvml: str = "") -> list[Match]:
    """Each CUDA device's NVML GPU: by UUID; by PCI bus id where CUDA's or that GPU's UUID is missing; else
    unmatched, with why. One NVML GPU is matched to one CUDA device at most."""
    by_uuid = {u: n for n in nvml if (u := norm_uuid(n.uuid))}
    by_pci = {p: n for n in nvml if (p := _pci(n.pci_bus_id))}
    taken: dict[int, int] = {}
    out = []
    for c in cuda:
        uuid, pci = norm_uuid(c.uuid), _pci(c.pci_bus_id)
        hit: NvmlId | None = None
        by: str | None = None
        note = ""
        if not nvml:
            note = f"no NVML GPU list ({why_no_nvml or 'no NVML'}): the NVML index is unknown"
        elif uuid is not None and uuid in by_uuid:
            hit, by = by_uuid[uuid], "uuid"
        elif pci is not None and pci in by_pci and (uuid is None or norm_uuid(by_pci[pci].uuid) is None):
            hit, by = by_pci[pci], "pci"
            side = "CUDA gave none" if uuid is None else f"NVML gave none for GPU {by_pci[pci].index}"
            note = f"matched by PCI bus id {pci}: no UUID to match by ({side})"
        elif uuid is not None:
            note = f"NVML lists no GPU with UUID {uuid}"
            if pci is not None and pci in by_pci:
                other = by_pci[pci]
                note += f" (NVML GPU {other.index} at the same PCI bus id {pci} is {norm_uuid(other.uuid)})"
        else:
            note = "no UUID from CUDA" + (
                f" and no NVML GPU at PCI bus id {pci}" if pci else " and no PCI bus id"
            )
        if hit is not None and hit.index in taken:
            note = f"NVML GPU {hit.index} is already matched to cuda:{taken[hit.index]}"
            hit, by = None, None
        if hit is None:
            out.append(Match(c.ordinal, None, uuid, pci, None, note))
            continue
        taken[hit.index] = c.ordinal
        out.append(Match(c.ordinal, hit.index, norm_uuid(hit.uuid) or uuid, _pci(hit.pci_bus_id), by, note))
    return out


def read_cuda(torch: Any) -> list[CudaId]:
    """Every CUDA device this process sees, with the UUID and PCI location torch gives (older torch: none)."""
    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        pci = None
        loc = [getattr(p, a, None) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
        if all(isinstance(x, int) for x in loc):
            pci = normalize_pci_bus_id(f"{loc[0]:04x}:{loc[1]:02x}:{loc[2]:02x}")
        out.append(CudaId(i, norm_uuid(getattr(p, "uuid", None)), pci))
    return out


def read_nvml(source: GpuSource | None) -> tuple[list[NvmlId], str]:
    """Every GPU NVML lists (whatever CUDA_VISIBLE_DEVICES says), or none and why."""
    if source is None:
        return [], "NVML did not open"
    try:
        count = source.device_count()
    except Exception as e:
        return [], f"NVML could not count the GPUs ({e})"
    out = []
    for k in range(count):
        with contextlib.suppress(Exception):
            info = source.device_info(k)
            out.append(NvmlId(k, info.uuid, info.pci_bus_id))
    return out, "" if out else "NVML gave no GPU's identity"
