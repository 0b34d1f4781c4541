"""`nvidia-smi -q` text as people paste it: the lines around and inside the dump that are not nvidia-smi's own.

A paste in an issue, a chat or a write-up carries the shell prompt line it was run from
(`my-user@gpu-node-a:~$ nvidia-smi -i 1 -q -d ECC`, `# nvidia-smi -q -d ECC,ROW_REMAPPER -i 52:00.0`), Markdown
fences, the author's comments (`# output (excerpt)`), elisions (`[...]`), annotations after a value
(`Pending : Yes   <===`, `No   # <- the terminal flag`), and may start at a `-d` section with no `NVSMI LOG`
banner, or indented as a whole. This module tells those lines apart (pure, no I/O) for the parser
(formats.nvidia_smi) and for the sniffer (recording.identify).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# a Markdown fence, ``` or ~~~ with an optional info string
_RE_FENCE = re.compile(r"^\s*(?:```|~~~)[\w+.-]*\s*$")
# an author's elision of part of the dump
_RE_ELISION = re.compile(r"^\s*(?:\[\s*(?:\.\.\.|…)\s*\]|\.\.\.|…|<snip>|\[snip\])\s*$", re.I)
# the shell prompt a command was typed at, then the command: `user@host:~$`, `[user@host ~]$`, `root@host:/#`,
# `(venv) user@host$`, a bare `$` or `#`; `sudo` before it
_RE_PROMPT = re.compile(
    r"^\s*(?:\([^)]*\)\s*)?"
    r"(?:\[?(?P<user>[\w.-]+)@(?P<host>[A-Za-z0-9][\w.-]*)(?:[:\s][^$#\]]*)?\]?\s*[$#%]|[$#%>])?"
    r"\s*(?:sudo\s+(?:-\S+\s+)*)?nvidia-smi(?:\.exe)?(?P<args>(?:\s.*)?)$"
)
# an annotation after a value: `<===`, `<--`, `<-`, `# comment`, `// comment`
_RE_ANNOTATION = re.compile(r"(?<!\s)\s+(?:<[=-]+|#\s|//\s|#$|←).*$")
_RE_GPU_HEADER = re.compile(r"^\s*GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\s*$")
# `Key   : value`: nvidia-smi pads each key before its colon (words one space apart: linear, no backtracking)
_RE_KV = re.compile(r"^\s*[A-Za-z][\w.()/+\-]*(?: [\w.()/+\-]+)*\s+:(?:\s.*)?$")
_RE_SECTION = re.compile(r"^\s*[A-Z][\w.()/+\-]*(?: [\w.()/+\-]+){0,5}\s*$")
BANNER = "==============NVSMI LOG=============="


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# section and key names of `nvidia-smi -q` (normalised: lower case, `_` for other characters), enough of them that
# a paste of any one `-d` section names several
WORDS = _words(
    """
    product_name product_brand product_architecture gpu_uuid serial_number minor_number vbios_version
    ecc_mode ecc_errors volatile aggregate sram_correctable sram_uncorrectable dram_correctable dram_uncorrectable
    sram_uncorrectable_parity sram_uncorrectable_sec_ded sram_threshold_exceeded single_bit double_bit
    device_memory register_file l1_cache l2_cache texture_memory total channel_repair_pending unrepairable_memory
    aggregate_uncorrectable_sram_sources retired_pages single_bit_ecc double_bit_ecc pending_page_blacklist
    remapped_rows correctable_error uncorrectable_error pending remapping_failure_occurred
    bank_remap_availability_histogram max high partial low none current
    temperature gpu_current_temp gpu_t.limit_temp gpu_shutdown_temp gpu_slowdown_temp memory_current_temp
    clocks_event_reasons clocks_throttle_reasons idle sw_power_cap hw_slowdown hw_thermal_slowdown
    hw_power_brake_slowdown sw_thermal_slowdown sync_boost gpu_power_readings power_readings power_draw
    fb_memory_usage bar1_memory_usage used free reserved performance_state utilization gpu memory pci bus_id
    gpu_link_info pcie_generation link_width replays_since_reset replay_number_rollovers clocks max_clocks sm
    gpu_reset_status reset_required drain_and_reset_recommended attached_gpus driver_version cuda_version timestamp
    """
)

# the section heads that only nvidia-smi writes: one of them anchors a paste with no prompt line and no GPU header
SECTIONS = _words(
    """
    ecc_mode ecc_errors retired_pages remapped_rows bank_remap_availability_histogram clocks_event_reasons
    clocks_throttle_reasons fb_memory_usage bar1_memory_usage gpu_power_readings power_readings gpu_reset_status
    aggregate_uncorrectable_sram_sources gpu_link_info product_name gpu_uuid
    """
)


@dataclass(frozen=True)
class Prompt:
    """A `nvidia-smi` command line with the prompt it was typed at."""

    host: str | None  # from `user@host`
    gpus: tuple[int, ...]  # `-i 1`, `--id=0,1`: the GPU indices asked for, when given as indices
    query: bool  # `-q` / `--query` (the text this parser reads), not the table or `--query-gpu` CSV


def norm_key(key: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "_", key.strip().lower()).strip("_")


def is_fence(line: str) -> bool:
    return bool(_RE_FENCE.match(line))


def is_elision(line: str) -> bool:
    return bool(_RE_ELISION.match(line))


def prompt(line: str) -> Prompt | None:
    """The `nvidia-smi` command line on `line`, with or without a prompt before it, or None."""
    m = _RE_PROMPT.match(line)
    if m is None:
        return None
    args = m.group("args").split()
    gpus: tuple[int, ...] = ()
    for i, a in enumerate(args):
        val = None
        if a in ("-i", "--id") and i + 1 < len(args):
            val = args[i + 1]
        elif a.startswith(("--id=", "-i=")):
            val = a.split("=", 1)[1]
        elif a.startswith("-i") and a[2:].isdigit():
            val = a[2:]
        if val is not None:
            parts = val.split(",")
            gpus = tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else ()
    query = any(
        a in ("-q", "--query") or (a.startswith("-") and not a.startswith("--") and "q" in a) for a in args
    )
    return Prompt(m.group("host"), gpus, query)


def split_kv(line: str) -> tuple[str, str] | None:
    """`Key   : value` at the first colon (by search, not a regex: a long line without one stays linear)."""
    at = line.find(":")
    key = line[:at].strip() if at > 0 else ""
    if not key:
        return None
    val = line[at + 1 :]
    return key, val[1:] if val.startswith(" ") else val


def strip_annotation(value: str) -> str:
    """A value without the author's mark after it: `Yes   <===` -> `Yes`, `No   # <- the flag` -> `No`."""
    return _RE_ANNOTATION.sub("", value).strip()


def gpu_header(line: str) -> str | None:
    """The PCI id of a `GPU 00000000:55:00.0` line (nvidia-smi's header of one GPU's block), or None."""
    m = _RE_GPU_HEADER.match(line)
    return m.group(1) if m else None


def sniff(lines: list[str]) -> str | None:
    """The shape of pasted `nvidia-smi -q` text ('nvidia-smi -q (pasted: ...)'), or None when `lines` are not
    one: most lines are nvidia-smi's own (key : value, section heads, GPU headers) or a paste's (prompt, fence,
    comment, elision), at least three name nvidia-smi's keys, and a `-q` prompt line, a GPU header or a section
    head only nvidia-smi writes (`Remapped Rows`, `ECC Errors`, ...) anchors them."""
    content = [ln for ln in lines if ln.strip()]
    if not content:
        return None
    own = known = 0
    marks: list[str] = []
    anchored = False
    for ln in content:
        p = prompt(ln)
        if p is not None:
            own += 1
            if p.query:
                anchored = True
                if "prompt line" not in marks:
                    marks.append("prompt line")
            continue
        if is_fence(ln):
            own += 1
            if "Markdown fence" not in marks:
                marks.append("Markdown fence")
            continue
        if is_elision(ln) or ln.lstrip().startswith("#") or ln.strip() == BANNER:
            own += 1
            continue
        if gpu_header(ln):
            own += 1
            anchored = True
            continue
        body = ln.split(":", 1)[0] if _RE_KV.match(ln) else ln if _RE_SECTION.match(ln) else None
        if body is None:
            continue
        own += 1
        word = norm_key(body)
        if word in WORDS:
            known += 1
        anchored = anchored or word in SECTIONS
    if known < 3 or own * 10 < len(content) * 9 or not anchored:
        return None
    if not any(BANNER in ln for ln in content):
        marks.append("no banner")
    return "nvidia-smi -q (pasted: " + ", ".join(marks) + ")" if marks else "nvidia-smi -q"


# a key that only one section of `-q` has, and that section's keys: a block pasted without its head
# (`Remapping Failure Occurred : No` at the top) is put back under it
_ONLY_IN = {"remapping_failure_occurred": "remapped_rows", "pending_page_blacklist": "retired_pages"}
_SECTION_KEYS = {
    "remapped_rows": ("correctable_error", "uncorrectable_error", "pending", "remapping_failure_occurred"),
    "retired_pages": ("single_bit_ecc", "double_bit_ecc", "pending_page_blacklist"),
}


def adopt_orphans(values: dict[str, str], lines: dict[str, int]) -> None:
    """Put a section's keys pasted without the section's head back under it (in place), where a key only that
    section has is among them: `Pending : Yes` beside `Remapping Failure Occurred` is the remap's pending."""
    for only, section in _ONLY_IN.items():
        if only not in values:
            continue
        for k in _SECTION_KEYS[section]:
            if k in values and f"{section}/{k}" not in values:
                values[f"{section}/{k}"] = values.pop(k)
                if k in lines:
                    lines[f"{section}/{k}"] = lines.pop(k)


def xml_document(text: str) -> tuple[str, int, Prompt | None]:
    """The `nvidia-smi -q -x` document inside pasted text (a prompt line and a fence around it): the text from
    `<?xml` (or `<nvidia_smi_log`) to `</nvidia_smi_log>`, how many lines come before it, and the prompt line
    among them. Text that is the document alone comes back as it is."""
    root = text.find("<nvidia_smi_log")
    decl = text.rfind("<?xml", 0, root) if root >= 0 else text.find("<?xml")
    start = decl if decl >= 0 else max(root, 0)
    close = text.rfind("</nvidia_smi_log>")
    end = close + len("</nvidia_smi_log>") if close > start else len(text)
    before = text[:start]
    said = None
    for ln in before.splitlines():
        said = prompt(ln) or said
    return text[start:end], before.count("\n"), said
