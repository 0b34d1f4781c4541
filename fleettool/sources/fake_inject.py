"""The fake source's injected faults: their kinds and the `--inject` spec (`xid:79@gpu=3,after=10`)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from fleettool.sources.base import READS, FabricInfo


@dataclass
class Injection:
    """One fault: kind, the GPU it hits (None = all), when it starts (seconds after the source opens)."""

    kind: str
    gpu: int | None = None
    after_s: float = 0.0
    code: int | None = None
    read: str | None = None
    hold_s: float | None = None  # hang: how long the read hangs (None: until release_hangs()); lost: how long
    count: int | None = None  # error: how many reads fail (None: every one)
    fired: bool = field(default=False, compare=False)
    raised: int = field(default=0, compare=False)


KINDS = {
    "xid": "an XID through the event API (xid:79 loses the GPU)",
    "thermal": "SW+HW thermal slowdown, 92 C, clocks down",
    "power-brake": "HW slowdown + power brake (0x88), clocks down",
    "dbe": "a double-bit ECC error with a pending row remap (XID 48 and 63)",
    "remap-failure": "a failed row remap (XID 64)",
    "pcie-width": "PCIe link trained at x8",
    "nvlink-crc": "NVLink CRC flit errors at 500/s on link 0",
    "nvlink-down": "NVLinks go down (count=N: the GPU's last N links, default 1; needs a source with NVLinks)",
    "fabric-unhealthy": "the NVLink fabric reports its route unhealthy (health mask), on a source in a fabric",
    "lost": "the GPU stops answering (GPU_IS_LOST; for=30s: answers again after that; after=0: lost at start)",
    "missing-gpu": "the node sees one GPU fewer",
    "hang": "a read does not return (read=NAME, default energy; for=20s: returns after that, once)",
    "error": "a read fails with an NVML error (error:CODE, default 999 UNKNOWN; read=NAME, default power; "
    "count=N: the first N reads only)",
    "busy": "another process holds a compute context on the GPU (busy:PID), as NVML's process list shows",
}
BUSY_MEMORY_BYTES = 512 << 20  # what the fake reports a busy:PID process to hold


def parse_injection(spec: str) -> Injection:
    """'xid:79@gpu=3,after=10' -> Injection. Raises ValueError with the accepted kinds."""
    head, _, tail = spec.partition("@")
    kind, _, code = head.partition(":")
    kind = kind.strip()
    if kind not in KINDS:
        raise ValueError(f"unknown fault {kind!r}; known: {', '.join(sorted(KINDS))}")
    inj = Injection(kind=kind, code=int(code) if code else None)
    for part in filter(None, tail.split(",")):
        k, _, v = part.partition("=")
        k = k.strip()
        if k == "gpu":
            inj.gpu = int(v)
        elif k == "after":
            inj.after_s = float(v.rstrip("s"))
        elif k == "read":
            if v not in READS:
                raise ValueError(f"unknown read {v!r}; known: {', '.join(READS)}")
            inj.read = v
        elif k == "for":
            inj.hold_s = float(v.rstrip("s"))
        elif k == "count":
            inj.count = int(v)
        else:
            raise ValueError(f"unknown option {k!r} in {spec!r} (gpu=, after=, read=, for=, count=)")
    if kind in ("xid", "busy") and inj.code is None:
        raise ValueError("xid needs a code: xid:79" if kind == "xid" else "busy needs a PID: busy:4242")
    return inj


def load_fabric(path: Path) -> FabricInfo | int:
    """Recorded fabric info for the fake (fixtures/fabric/*.json): {"clusterUuid": 32 hex digits or a dashed
    UUID, "cliqueId", "state", "status", optionally "healthMask"}, or {"error": NVML return code} for a call
    that fails. ValueError naming what is wrong."""
    doc = json.loads(path.read_text())
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    if "error" in doc:
        return int(doc["error"])
    try:
        uuid = str(doc["clusterUuid"]).replace("-", "").lower()
        mask = doc.get("healthMask")
        info = FabricInfo(
            uuid,
            int(doc["cliqueId"]),
            int(doc["state"]),
            int(doc.get("status", 0)),
            None if mask is None else int(mask),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"needs clusterUuid, cliqueId and state: {e}") from None
    if len(uuid) != 32 or any(c not in "0123456789abcdef" for c in uuid):
        raise ValueError(f"clusterUuid {doc['clusterUuid']!r} is not 16 bytes of hex")
    return info


def nvlink_rows(links: int) -> list[tuple[str, str, float]]:
    """What the nvlink read answers for a GPU with `links` NVLinks, all active and without errors."""
    out = []
    for link in range(links):
        sub = f"link={link}"
        out.append(("nvlink_link_up", sub, 1.0))
        out.extend((m, sub, 0.0) for m in READS["nvlink"][1] if m != "nvlink_link_up")
    return out


def fabric_unhealthy(info: FabricInfo) -> FabricInfo:
    """The fabric info with its route reported unhealthy (nvml.h: ROUTE_UNHEALTHY TRUE, 1 at shift 4; the other
    fields as they were, FALSE where the mask had none)."""
    mask = info.health_mask if info.health_mask is not None else 0xAA | (1 << 8)
    return dataclasses.replace(info, health_mask=(mask & ~(0x3 << 4)) | (1 << 4))
