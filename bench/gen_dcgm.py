"""A dense synthetic dcgm-exporter recording: N GPUs x 20 DCGM_FI_* fields x 1 Hz x H hours, OpenMetrics with
timestamps, grouped by metric family as OpenMetrics wants (and as the scenario recordings in
fixtures/scenarios/*/dcgm-exporter.om.gz are): HELP/TYPE, then each GPU's series in time order, `# EOF` last.

The label set is the real scrape's (fixtures/scenarios/thermal-throttle): gpu, UUID, pci_bus_id, device,
modelName, Hostname, DCGM_FI_DRIVER_VERSION; values are printed as dcgm-exporter prints them (integers for
clocks, temperatures, utilisation and counters, six decimals for power and ratios), with per-GPU noise.
promtool reads the plain file (`promtool tsdb create-blocks-from openmetrics`); fleettool reads it plain or
gzipped.

  python bench/gen_dcgm.py --gpus 8 --hours 1 --out /tmp/dense-8g-1h.om [--gzip]
"""

from __future__ import annotations

import argparse
import gzip
import zlib
from pathlib import Path
from typing import IO

import numpy as np

START = 1796000000  # 2026-11-29T00:53:20Z, the scenario recordings' era
HOST = "gpu-node-017"
MODEL = "NVIDIA H100 80GB HBM3"
DRIVER = "550.54.15"
PCI = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]

# name, HELP text, how a value is printed ("i" integer, "f" six decimals); the values come from _values
FIELDS: list[tuple[str, str, str]] = [
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", "i"),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", "i"),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "i"),
    ("DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).", "i"),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "f"),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "i"),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active.", "f"),
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "Current clock event reasons (bitmask).", "i"),
    ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", "i"),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.", "i"),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.", "i"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for correctable errors", "i"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for uncorrectable errors", "i"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed", "i"),
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", "Whether remapping of rows is pending", "i"),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "Total number of NVLink flow-control CRC errors.", "i"),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.", "i"),
    ("DCGM_FI_DEV_PCIE_LINK_GEN", "PCIe current link generation.", "i"),
    ("DCGM_FI_DEV_PCIE_LINK_WIDTH", "PCIe current link width.", "i"),
    ("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", "PCIe maximum link width.", "i"),
]


def _uuid(gpu: int) -> str:
    r = np.random.default_rng(1000 + gpu).integers(0, 16, 32)
    h = "".join("0123456789abcdef"[int(x)] for x in r)
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def series_text(name: str, gpu: int) -> str:
    return (
        f'{name}{{gpu="{gpu}",UUID="{_uuid(gpu)}",pci_bus_id="00000000:{PCI[gpu % 8]}:00.0",'
        f'device="nvidia{gpu}",modelName="{MODEL}",Hostname="{HOST}",DCGM_FI_DRIVER_VERSION="{DRIVER}"}}'
    )


def _values(name: str, gpu: int, n: int) -> np.ndarray:
    """n one-second readings of a field on one GPU: a busy training node, with noise."""
    rng = np.random.default_rng(zlib.crc32(f"{name}/{gpu}".encode()))
    t = np.arange(n)
    load = 0.85 + 0.1 * np.sin(t / 600.0 + gpu)  # slow drift of the job's load
    if name == "DCGM_FI_DEV_SM_CLOCK":
        return np.round(1980 - 300 * (load > 0.9) - rng.integers(0, 4, n) * 15)
    if name == "DCGM_FI_DEV_MEM_CLOCK":
        return np.full(n, 2619.0)
    if name == "DCGM_FI_DEV_GPU_TEMP":
        return np.round(55 + 20 * load + rng.normal(0, 1, n))
    if name == "DCGM_FI_DEV_MEMORY_TEMP":
        return np.round(60 + 18 * load + rng.normal(0, 1, n))
    if name == "DCGM_FI_DEV_POWER_USAGE":
        return np.round(500 + 200 * load + rng.normal(0, 15, n), 3)
    if name == "DCGM_FI_DEV_GPU_UTIL":
        return np.clip(np.round(100 * load + rng.normal(0, 3, n)), 0, 100)
    if name == "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE":
        return np.clip(np.round(0.9 * load + rng.normal(0, 0.02, n), 6), 0, 1)
    if name == "DCGM_FI_DEV_CLOCKS_EVENT_REASONS":
        return np.where(load > 0.9, 4.0, 0.0)  # 0x4: power cap
    if name == "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL":
        return np.floor(t / 1800.0) * (gpu == 3)
    if name == "DCGM_FI_DEV_PCIE_REPLAY_COUNTER":
        return np.floor(t / 900.0)
    if name == "DCGM_FI_DEV_PCIE_LINK_GEN":
        return np.full(n, 5.0)
    if name in ("DCGM_FI_DEV_PCIE_LINK_WIDTH", "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH"):
        return np.full(n, 16.0)
    return np.zeros(n)


def write(f: IO[str], gpus: int, seconds: int, start: int = START) -> int:
    """Write the recording to a text stream; returns the number of samples."""
    stamps = [f"{start + i}.000" for i in range(seconds)]
    n = 0
    for name, help_text, kind in FIELDS:
        f.write(f"# HELP {name} {help_text}\n# TYPE {name} gauge\n")
        for g in range(gpus):
            prefix = series_text(name, g) + " "
            vals = _values(name, g, seconds)
            shown = (
                [str(int(v)) for v in vals.tolist()] if kind == "i" else [f"{v:.6f}" for v in vals.tolist()]
            )
            f.write("".join(f"{prefix}{v} {ts}\n" for v, ts in zip(shown, stamps, strict=True)))
            n += seconds
    f.write("# EOF\n")
    return n


def generate(out: Path, gpus: int, hours: float, *, gz: bool = False) -> int:
    seconds = int(round(hours * 3600))
    out.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        with gzip.open(out, "wt", compresslevel=6, encoding="utf-8") as f:
            return write(f, gpus, seconds)
    with open(out, "w", encoding="utf-8", buffering=1 << 20) as f:
        return write(f, gpus, seconds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--gzip", action="store_true", help="write gzip (fleettool reads it; promtool does not)")
    a = ap.parse_args()
    n = generate(a.out, a.gpus, a.hours, gz=a.gzip)
    print(f"{a.out}: {n} samples, {a.out.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
