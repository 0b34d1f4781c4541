"""DCGM's field ids and error codes, the few fleettool reads from `dcgmi` output, as DCGM's public headers define
them (NVIDIA/DCGM @ 72fa3feaa67d716a75323a8f47c34ff3ee73f824):

- FIELDS: `dcgmlib/dcgm_fields.h` (`#define DCGM_FI_DEV_GPU_TEMP_CELSIUS 150`, ..., and the compatibility names
  `DCGM_FI_DEV_GPU_TEMP` = 150, `DCGM_FI_DEV_XID_ERRORS` = 230 the exporter still uses) with the short column
  name `dcgmi dmon` prints for each (`dcgmlib/src/dcgm_fields.cpp`, DcgmFieldsPopulateOneFieldWithFormatting).
  The name given is the one fleettool.metrics maps (dcgm-exporter's), so a dmon column and an exporter series of
  the same field are the same metric.
- ERRORS: `dcgmlib/dcgm_errors.h`, `dcgmError_t` (`DCGM_FR_PENDING_ROW_REMAP = 85`, ...) with its message format
  (`DCGM_FR_PENDING_ROW_REMAP_MSG "GPU %u had memory errors and row remappings are pending"`): `dcgmi health`
  prints only the messages, so a message is matched back to its code by its format.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# field id -> (dcgm-exporter's DCGM_FI_* name, dmon's short column name or "" where fleettool did not take it)
FIELDS: dict[int, tuple[str, str]] = {
    100: ("DCGM_FI_DEV_SM_CLOCK", "SMCLK"),
    101: ("DCGM_FI_DEV_MEM_CLOCK", "MMCLK"),
    112: ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DVCCTR"),
    140: ("DCGM_FI_DEV_MEMORY_TEMP", "MMTMP"),
    150: ("DCGM_FI_DEV_GPU_TEMP", "TMPTR"),
    155: ("DCGM_FI_DEV_POWER_USAGE", "POWER"),
    156: ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", ""),
    202: ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "RPCTR"),
    203: ("DCGM_FI_DEV_GPU_UTIL", "GPUTL"),
    204: ("DCGM_FI_DEV_MEM_COPY_UTIL", "MCUTL"),
    230: ("DCGM_FI_DEV_XID_ERRORS", "XIDER"),
    240: ("DCGM_FI_DEV_POWER_VIOLATION", ""),
    241: ("DCGM_FI_DEV_THERMAL_VIOLATION", ""),
    252: ("DCGM_FI_DEV_FB_USED", "FBUSD"),
    310: ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "ESVTL"),
    311: ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "EDVTL"),
    312: ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", ""),
    313: ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", ""),
    393: ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", ""),
    394: ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", ""),
    395: ("DCGM_FI_DEV_ROW_REMAP_FAILURE", ""),
    396: ("DCGM_FI_DEV_ROW_REMAP_PENDING", ""),
}
XID_FIELD = 230  # DCGM_FI_DEV_XID_ERRORS: the GPU's last XID (0 until the first)
FIELD_OF_SHORT_NAME = {short: fid for fid, (_, short) in FIELDS.items() if short}


@dataclass(frozen=True)
class DcgmError:
    code: int
    name: str
    message: str  # the printf format of its _MSG
    # its _NEXT: the advice `dcgmi health` prints after the message, where a real paste shows it
    next: str = ""


ERRORS: tuple[DcgmError, ...] = (
    DcgmError(3, "DCGM_FR_PCI_REPLAY_RATE", "Detected more than %u PCIe replays per minute for GPU %u : %d"),
    DcgmError(4, "DCGM_FR_VOLATILE_DBE_DETECTED", "Detected %d volatile double-bit ECC error(s) in GPU %u."),
    DcgmError(
        5,
        "DCGM_FR_VOLATILE_SBE_DETECTED",
        "More than %u single-bit ECC error(s) detected in GPU %u Volatile SBEs: %lld",
    ),
    DcgmError(6, "DCGM_FR_PENDING_PAGE_RETIREMENTS", "A pending retired page has been detected in GPU %u."),
    DcgmError(7, "DCGM_FR_RETIRED_PAGES_LIMIT", "%u or more retired pages have been detected in GPU %u."),
    DcgmError(9, "DCGM_FR_CORRUPT_INFOROM", "A corrupt InfoROM has been detected in GPU %u."),
    DcgmError(
        10, "DCGM_FR_CLOCKS_EVENT_THERMAL", "Detected clocks event due to thermal violation in GPU %u."
    ),
    DcgmError(
        12,
        "DCGM_FR_CLOCKS_EVENT_POWER",
        "Detected clocks event due to power violation in GPU %u.",
        "Monitor the power conditions. This GPU can still perform workload.",
    ),
    DcgmError(14, "DCGM_FR_NVLINK_DOWN", "GPU %u's NvLink link %d is currently down"),
    DcgmError(51, "DCGM_FR_CUDA_API", "Error using CUDA API %s"),
    DcgmError(
        71, "DCGM_FR_NVLINK_ERROR_CRITICAL", "Detected %ld %s NvLink errors on GPU %u's NVLink (should be 0)"
    ),
    DcgmError(
        80, "DCGM_FR_ROW_REMAP_FAILURE", "GPU %u had uncorrectable memory errors and row remapping failed."
    ),
    DcgmError(81, "DCGM_FR_UNCONTAINED_ERROR", "GPU had an uncontained error (XID 95)"),
    DcgmError(85, "DCGM_FR_PENDING_ROW_REMAP", "GPU %u had memory errors and row remappings are pending"),
    DcgmError(101, "DCGM_FR_XID_ERROR", "Detected XID %u for GPU %u"),
    DcgmError(109, "DCGM_FR_SXID_ERROR", "Detected fatal NvSwitch SXID %u"),
    DcgmError(
        110,
        "DCGM_FR_GFLOPS_THRESHOLD_VIOLATION",
        "Detected %.2f %s for GPU %u which is below the threshold %.2f",
    ),
)
ERROR_BY_CODE = {e.code: e for e in ERRORS}

_CONV = {
    "u": r"(\d+)",
    "d": r"(-?\d+)",
    "ld": r"(-?\d+)",
    "lld": r"(-?\d+)",
    "s": r"(\S+?)",
    ".2f": r"([\d.]+)",
}


def _pattern(fmt: str, next_step: str = "") -> re.Pattern[str]:
    out, pos = [], 0
    for m in re.finditer(r"%(lld|ld|\.2f|[uds])", fmt):
        out.append(re.escape(fmt[pos : m.start()]))
        out.append(_CONV[m.group(1)])
        pos = m.end()
    out.append(re.escape(fmt[pos:].rstrip(". ")))
    if next_step:  # the advice is part of the incident, never an incident of its own
        out.append(r"(?:\.?\ " + re.escape(next_step.rstrip(". ")) + ")?")
    return re.compile("".join(out).replace(r"\ ", r"\s+"))


_PATTERNS = [(e, _pattern(e.message, e.next)) for e in ERRORS]


@dataclass(frozen=True)
class MatchedError:
    error: DcgmError | None  # None: a message of no code fleettool knows
    text: str
    args: tuple[str, ...]


def match_errors(text: str) -> list[MatchedError]:
    """The DCGM error messages in `text` (dcgmi joins a system's incidents with ', '), each with its code; text
    no known format matches is one MatchedError without a code."""
    hits: list[tuple[int, int, DcgmError, tuple[str, ...]]] = []
    for err, rx in _PATTERNS:
        for m in rx.finditer(text):
            hits.append((m.start(), m.end(), err, m.groups()))
    hits.sort(key=lambda h: (h[0], -h[1]))
    out: list[MatchedError] = []
    pos = 0
    for start, end, err, args in hits:
        if start < pos:
            continue
        gap = text[pos:start].strip(" ,.")
        if gap:
            out.append(MatchedError(None, gap, ()))
        out.append(MatchedError(err, text[start:end].strip(), args))
        pos = end
    rest = text[pos:].strip(" ,.")
    if rest:
        out.append(MatchedError(None, rest, ()))
    return out
