"""The input side of a promtool case: series as promtool takes them (a name, labels, values in its expanding
notation), event entities as the engine keys them, and the identity labels dcgm-exporter puts on a GPU's series."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from fleettool.engine.kinds._promql import NODE, num

# what dcgm-exporter puts on every GPU series besides gpu and Hostname (fixtures/samples/nvml-dcgm-facts.md, sec. 11)
DCGM_MODEL = "NVIDIA H200"
DCGM_DRIVER = "550.54.15"


@dataclass
class Series:
    metric: str  # canonical (fleettool.metrics) name, or "" for the event series
    name: str  # the series name in the name set
    labels: dict[str, str]
    values: list[float | None]
    raw: str | None = None  # the case's own notation, when the values are unchanged

    def text(self) -> str:
        lab = ", ".join(f'{k}="{v}"' for k, v in self.labels.items())
        return f"{self.name}{{{lab}}}"


@dataclass(frozen=True)
class Entity:
    """An event entity as the engine keys it (node, GPU, kind, code), with its lines."""

    node: str
    gpu: int | None
    kind: str
    code: int | None
    lines: tuple[dict[str, Any], ...]


def dcgm_identity(node: str, gpu: str) -> dict[str, str]:
    """The labels dcgm-exporter puts on a GPU's series (made up, stable per node and GPU)."""
    g = int(gpu)
    return {
        "gpu": gpu,
        "UUID": f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}.gpu{g}')}",
        "pci_bus_id": f"00000000:{0x18 + g:02X}:00.0",
        "device": f"nvidia{g}",
        "modelName": DCGM_MODEL,
        NODE: node,
        "DCGM_FI_DRIVER_VERSION": DCGM_DRIVER,
    }


def values_text(vals: list[float | None]) -> str:
    """promtool's expanding notation, run-length coded: '_x5 1x10' (note '_xN' is N blanks, 'axN' is N+1 a's)."""
    out: list[str] = []
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[i]:
            j += 1
        k = j - i + 1
        v = vals[i]
        if v is None:
            out.append("_" if k == 1 else f"_x{k}")
        else:
            out.append(num(v) if k == 1 else f"{num(v)}x{k - 1}")
        i = j + 1
    return " ".join(out)
