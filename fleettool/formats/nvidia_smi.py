"""Parse `nvidia-smi -q` text and `nvidia-smi -q -x` XML into per-GPU samples and identity.

Both forms are first flattened to paths of normalised keys ("ecc_errors/volatile/dram_uncorrectable"), by
indentation depth for text (never by column: the colon moved from column 37 to 43 across drivers) and by tag for
XML; then one table maps the paths of every driver generation onto the store's metrics: "Clocks Throttle
Reasons" (before R535) and "Clocks Event Reasons" (after), Volta's Single/Double Bit ECC tree and the SRAM/DRAM
layout of A100/H100, Remapped Rows as a block or `N/A`, the legacy "Retired pages". On H100/H200 the
"GPU T.Limit Temp" is the margin below the slowdown limit, not a temperature: it becomes `temp_margin_c`.
"""

from __future__ import annotations

import calendar
import re
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass, field

from fleettool.formats import nvidia_smi_paste as paste
from fleettool.formats.errors import ParseIssue
from fleettool.model import normalize_pci_bus_id

_RE_NUM = re.compile(r"^\s*(-?\d+(?:\.\d+)?)")
# what nvidia-smi writes where NVML gave no value (bare or in brackets): absent, not an unreadable value
_NONE = ("N/A", "Unknown Error", "Not Supported", "Insufficient Permissions", "Not Available")
NO_VALUE = frozenset(("", "Requested functionality has been deprecated", *_NONE, *(f"[{w}]" for w in _NONE)))


@dataclass
class SmiGpu:
    index: int | None
    pci_bus_id: str | None
    values: dict[str, str] = field(default_factory=dict)  # normalised path -> raw value
    lines: dict[str, int] = field(default_factory=dict)  # normalised path -> its line in the file

    def find(self, *paths: str) -> tuple[str, str] | None:
        """The first of `paths` with a value (not one of nvidia-smi's words for none), and the value."""
        for p in paths:
            v = self.values.get(p)
            if v is not None and v.strip() not in NO_VALUE:
                return p, v.strip()
        return None

    def get(self, *paths: str) -> str | None:
        hit = self.find(*paths)
        return hit[1] if hit else None


@dataclass
class SmiReport:
    timestamp: float | None
    driver: str | None
    cuda: str | None
    gpus: list[SmiGpu]
    issues: list[ParseIssue]
    host: str | None = None  # from a pasted prompt line (`user@host:~$ nvidia-smi ...`)


_norm = paste.norm_key


def _smi_time(s: str | None) -> float | None:
    """'Wed Dec  2 10:08:16 2026' (local time of the host; taken as UTC, which is what fleet hosts run)."""
    if not s:
        return None
    try:
        return float(calendar.timegm(time.strptime(" ".join(s.split()), "%a %b %d %H:%M:%S %Y")))
    except ValueError:
        return None


def parse_text(lines: Iterable[str], *, path: str = "<input>") -> SmiReport:
    """`nvidia-smi -q` text, whole or as pasted (formats.nvidia_smi_paste): a prompt line names the host and the
    GPU index (`-i 1`), a `-d` section may stand alone, fences, comments, elisions and annotations are read past."""
    gpus: list[SmiGpu] = []
    issues: list[ParseIssue] = []
    head: dict[str, str] = {}
    head_line: dict[str, int] = {}
    cur: SmiGpu | None = None
    stack: list[tuple[int, str]] = []  # (indent, normalised key)
    host: str | None = None
    asked: list[int] = []  # the GPU indices the last prompt line asked for (-i), in order
    base: int | None = None  # the indentation of the dump's first line: a paste indented as a whole
    for lineno, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n").expandtabs(4)
        if not line.strip() or paste.is_fence(line) or paste.is_elision(line):
            continue
        p = paste.prompt(line)
        if p is not None:  # another command's output begins: another GPU's, or this one's other sections
            host = p.host or host
            asked = list(p.gpus)
            cur, stack, base = None, [], None
            continue
        if line.lstrip().startswith(("#", "===")):
            if cur is not None and cur.pci_bus_id is None:
                cur = None  # a separator between excerpts: the next lines are another GPU
            continue
        indent = len(line) - len(line.lstrip(" "))
        if base is None:
            base = indent
        indent = max(0, indent - base)
        pci = paste.gpu_header(line)
        if pci is not None:
            cur = SmiGpu(_next_index(gpus, asked), normalize_pci_bus_id(pci))
            gpus.append(cur)
            stack = []
            continue
        kv = paste.split_kv(line)
        if kv:
            key, val = _norm(kv[0]), paste.strip_annotation(kv[1])
        else:
            key, val = _norm(paste.strip_annotation(line)), None
        if indent == 0 and cur is None and kv:
            head[key] = val or ""
            head_line[key] = lineno
            continue
        if cur is None:  # an excerpt without the GPU header line
            cur = SmiGpu(_next_index(gpus, asked), None)
            gpus.append(cur)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        full = "/".join([k for _, k in stack] + [key])
        if val is not None:
            cur.values[full] = val
            cur.lines[full] = lineno
        stack.append((indent, key))
    for g in gpus:
        paste.adopt_orphans(g.values, g.lines)
    ts = _smi_time(head.get("timestamp"))
    if ts is None and head.get("timestamp", "").strip() not in ("", "N/A"):
        issues.append(ParseIssue(path, head_line["timestamp"], f"Timestamp not read: {head['timestamp']!r}"))
    return SmiReport(ts, head.get("driver_version"), head.get("cuda_version"), gpus, issues, host)


def _next_index(gpus: list[SmiGpu], asked: list[int]) -> int:
    """The index of the next GPU block: the next one the prompt's `-i` asked for, else its ordinal."""
    return asked.pop(0) if asked else len(gpus)


def parse_xml(text: str, *, path: str = "<input>") -> SmiReport:
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        line = e.position[0] if hasattr(e, "position") else 0
        return SmiReport(None, None, None, [], [ParseIssue(path, line, f"not nvidia-smi XML: {e}")])
    gpus: list[SmiGpu] = []
    for i, g in enumerate(root.findall("gpu")):
        sg = SmiGpu(i, normalize_pci_bus_id(g.get("id", "")) if g.get("id") else None)

        def walk(el: ET.Element, prefix: str, sg: SmiGpu = sg) -> None:
            for child in el:
                p = f"{prefix}/{child.tag}" if prefix else child.tag
                if len(child):
                    walk(child, p)
                elif child.text is not None:
                    sg.values[p] = child.text

        walk(g, "")
        gpus.append(sg)
    return SmiReport(
        _smi_time(root.findtext("timestamp")),
        root.findtext("driver_version"),
        root.findtext("cuda_version"),
        gpus,
        [],
    )


# metric -> candidate paths (text form first, then XML), first present wins
_PATHS: dict[str, tuple[str, ...]] = {
    "gpu_temp_c": ("temperature/gpu_current_temp", "temperature/gpu_temp"),
    "mem_temp_c": ("temperature/memory_current_temp", "temperature/memory_temp"),
    "temp_margin_c": ("temperature/gpu_t.limit_temp", "temperature/gpu_temp_tlimit"),
    "temp_slowdown_c": ("temperature/gpu_slowdown_temp", "temperature/gpu_temp_slow_threshold"),
    "temp_shutdown_c": ("temperature/gpu_shutdown_temp", "temperature/gpu_temp_max_threshold"),
    "power_w": (
        "gpu_power_readings/instantaneous_power_draw",
        "gpu_power_readings/average_power_draw",
        "gpu_power_readings/power_draw",
        "power_readings/power_draw",
        "gpu_power_readings/instant_power_draw",
        "power_readings/instant_power_draw",
    ),
    "power_limit_w": (
        "gpu_power_readings/current_power_limit",
        "power_readings/enforced_power_limit",
        "power_readings/power_limit",
        "power_readings/current_power_limit",
    ),
    "sm_clock_mhz": ("clocks/sm", "clocks/sm_clock"),
    "mem_clock_mhz": ("clocks/memory", "clocks/mem_clock"),
    "sm_clock_max_mhz": ("max_clocks/sm", "max_clocks/sm_clock"),
    "mem_clock_max_mhz": ("max_clocks/memory", "max_clocks/mem_clock"),
    "gpu_util_pct": ("utilization/gpu", "utilization/gpu_util"),
    "mem_util_pct": ("utilization/memory", "utilization/memory_util"),
    "pcie_link_gen": (
        "pci/gpu_link_info/pcie_generation/current",
        "pci/pci_gpu_link_info/pcie_gen/current_link_gen",
    ),
    "pcie_link_gen_max": (
        "pci/gpu_link_info/pcie_generation/max",
        "pci/pci_gpu_link_info/pcie_gen/max_link_gen",
    ),
    "pcie_link_width": (
        "pci/gpu_link_info/link_width/current",
        "pci/pci_gpu_link_info/link_widths/current_link_width",
    ),
    "pcie_link_width_max": (
        "pci/gpu_link_info/link_width/max",
        "pci/pci_gpu_link_info/link_widths/max_link_width",
    ),
    "pcie_replay_total": ("pci/replays_since_reset", "pci/replay_counter"),
    "pcie_replay_rollover_total": ("pci/replay_number_rollovers", "pci/replay_rollover_counter"),
    "remap_correctable_rows": ("remapped_rows/correctable_error", "remapped_rows/remapped_row_corr"),
    "remap_uncorrectable_rows": ("remapped_rows/uncorrectable_error", "remapped_rows/remapped_row_unc"),
    "remap_pending": ("remapped_rows/pending", "remapped_rows/remapped_row_pending"),
    "remap_failure": ("remapped_rows/remapping_failure_occurred", "remapped_rows/remapped_row_failure"),
    "remap_bank_max": (
        "remapped_rows/bank_remap_availability_histogram/max",
        "remapped_rows/remapped_row_histogram/row_remap_histogram_max",
    ),
    "remap_bank_high": (
        "remapped_rows/bank_remap_availability_histogram/high",
        "remapped_rows/remapped_row_histogram/row_remap_histogram_high",
    ),
    "remap_bank_partial": (
        "remapped_rows/bank_remap_availability_histogram/partial",
        "remapped_rows/remapped_row_histogram/row_remap_histogram_partial",
    ),
    "remap_bank_low": (
        "remapped_rows/bank_remap_availability_histogram/low",
        "remapped_rows/remapped_row_histogram/row_remap_histogram_low",
    ),
    "remap_bank_none": (
        "remapped_rows/bank_remap_availability_histogram/none",
        "remapped_rows/remapped_row_histogram/row_remap_histogram_none",
    ),
    "retired_pages_sbe": (
        "retired_pages/single_bit_ecc",
        "retired_pages/multiple_single_bit_retirement/retired_count",
    ),
    "retired_pages_dbe": (
        "retired_pages/double_bit_ecc",
        "retired_pages/double_bit_retirement/retired_count",
    ),
    "retired_pages_pending": (
        "retired_pages/pending_page_blacklist",
        "retired_pages/pending_blacklist",
        "retired_pages/pending_retirement",
    ),
    "ecc_mode": ("ecc_mode/current", "ecc_mode/current_ecc"),
    "fb_total_bytes": ("fb_memory_usage/total",),
    "fb_used_bytes": ("fb_memory_usage/used",),
    "pstate": ("performance_state",),
}

# ECC: (metric, which half, kinds summed); layouts of every generation
_ECC_KEYS = {
    "sbe": ("dram_correctable", "sram_correctable", "single_bit/total", "single_bit/device_memory"),
    "dbe": (
        "dram_uncorrectable",
        "sram_uncorrectable",
        "sram_uncorrectable_parity",
        "sram_uncorrectable_secded",
        "double_bit/total",
        "double_bit/device_memory",
    ),
}

# clock-event reason rows -> NVML bit
_REASONS = {
    "idle": 0x1,
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
    "display_clocks_setting": 0x100,
}


def _value(metric: str, raw: str) -> float | None:
    s = raw.strip()
    low = s.lower()
    if low in ("yes", "enabled", "active"):
        return 1.0
    if low in ("no", "disabled", "not active"):
        return 0.0
    if metric == "pstate" and s.upper().startswith("P") and s[1:].isdigit():
        return float(s[1:])
    m = _RE_NUM.match(s)
    if not m:
        return None
    v = float(m.group(1))
    if metric.endswith("_bytes") and "MiB" in s:
        v *= 1 << 20
    return v


def gpu_samples(g: SmiGpu, issues: list[ParseIssue] | None = None, path: str = "<input>") -> dict[str, float]:
    """One GPU's values -> canonical metric -> value (what the dump shows; absent when N/A). A value present but
    not readable (`Pending : Yes?`) is no sample, and, given `issues`, one `path:line` issue naming it."""
    out: dict[str, float] = {}

    def unread(key: str, raw: str, metric: str) -> None:
        if issues is not None:
            where = g.pci_bus_id or f"index {g.index}"
            msg = f"GPU {where}: {key} = {raw!r} is not a value fleettool reads; no {metric} stored"
            issues.append(ParseIssue(path, g.lines.get(key, 0), msg))

    for metric, paths in _PATHS.items():
        hit = g.find(*paths)
        if hit is None:
            continue
        v = _value(metric, hit[1])
        if v is not None:
            out[metric] = v
        else:
            unread(hit[0], hit[1], metric)
    for half, suffix in (("volatile", "volatile"), ("aggregate", "aggregate")):
        for kind, keys in _ECC_KEYS.items():
            total = None
            for k in keys:
                key = f"ecc_errors/{half}/{k}"
                raw = g.get(key)
                if raw is None:
                    continue
                v = _value("x", raw)
                if v is not None:
                    total = (total or 0.0) + v
                else:
                    unread(key, raw, f"ecc_{kind}_{suffix}")
                if k.endswith("/total") and total is not None:
                    break  # Volta's tree gives a total; do not add its parts again
            if total is not None:
                out[f"ecc_{kind}_{suffix}"] = total
    mask = None
    for section in ("clocks_event_reasons", "clocks_throttle_reasons"):
        for key, bit in _REASONS.items():
            hit = g.find(
                f"{section}/{key}",
                f"{section}/clocks_event_reason_{key}",
                f"{section}/clocks_throttle_reason_{key}",
                f"{section}/hw_slowdown/{key}",
            )
            if hit is None:
                continue
            state = hit[1].lower()
            if state not in ("active", "not active"):
                unread(hit[0], hit[1], "clock_event_reasons")
                continue
            mask = mask or 0
            if state == "active":
                mask |= bit
    if mask is not None:
        out["clock_event_reasons"] = float(mask)
    return out


def gpu_identity(g: SmiGpu) -> dict[str, str | None]:
    return {
        "uuid": g.get("gpu_uuid", "uuid"),
        "model": g.get("product_name"),
        "serial": g.get("serial_number", "serial"),
        "pci_bus_id": _pci(g.get("pci/bus_id", "pci/pci_bus_id")) or g.pci_bus_id,
        "minor": g.get("minor_number"),
    }


def _pci(raw: str | None) -> str | None:
    return normalize_pci_bus_id(raw) if raw else None
