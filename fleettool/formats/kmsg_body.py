"""The NVIDIA driver's kernel messages, after the `NVRM:` (or the NVSwitch device name): XIDs with their process,
MIG instance, NVLink5 unit and root cause; NVSwitch SXids; "fallen off the bus"; GSP RPC timeouts and their rate
limiting; and the announcement lines that map a PCI id to a GPU UUID and board serial.

Each pattern below shows the real lines it matches (fixtures/samples/kmsg/xid-lines.txt, sources in
fixtures/samples/kmsg/SOURCES.md). The driver's own format strings, from NVIDIA/open-gpu-kernel-modules:

    src/nvidia/src/kernel/gpu/rc/kernel_rc.c:
      "NVRM: Xid (" attr "): %d, pid=%s, name=%s, %s%s\\n"    when a process is known
      "NVRM: Xid (" attr "): %d, %s%s\\n"                      otherwise
      attr = "PCI:%04x:%02x:%02x" [" GPU-I:%02u" [" GPU-CI:%02u"]]
    src/common/nvswitch/kernel/inc/common_nvswitch.h:
      "nvidia-%s: SXid (PCI:" NVLINK_PCI_DEV_FMT "): %05d, " fmt

XID meanings are NVIDIA's (https://docs.nvidia.com/deploy/xid-errors/); fleettool's reading of each is in
fleettool/xid_catalog.py. `BodyReader` holds the state that spans lines: the announcement before a serial line,
the "The NVIDIA GPU x" line before its "fallen off the bus", and caches for XID storms.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fleettool.model import normalize_pci_bus_id


@dataclass(slots=True)
class KernelRecord:
    """One GPU-relevant kernel message. kind: xid, sxid, fell-off-bus, gsp-timeout, gsp-rate-limit,
    gpu-announce, boot."""

    kind: str
    lineno: int
    raw: str
    ts: float | None = None  # wall time, unix seconds UTC
    uptime: float | None = None  # seconds since boot, when the line carries it
    host: str | None = None
    pci_bus_id: str | None = None  # dddd:bb:dd; None when the line names none or redacts it ("PCI:...")
    code: int | None = None
    message: str = ""
    uuid: str | None = None
    serial: str | None = None
    detail: dict[str, object] = field(default_factory=dict)


# -- XID (matched on the text after "NVRM: ") ----------------------------------------------------------------
# The attribution, the code, the optional process, the message:
#   Xid (PCI:0000:44:00): 79, GPU has fallen off the bus
#   Xid (0000:01:00): 13, 0005 00000000 0000502d 00000104 00000000 00000100          (old drivers: no "PCI:")
#   Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, errorString CTX SWITCH TIMEOUT, ...
#   Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
#   Xid (PCI:0002:00:00): 119, pid=1582259, name=nvc:[driver], Timeout after 6s of waiting for RPC response ...
#   Xid (PCI:0000:00:06): 31, pid=2708, Ch 0000003d, intr 10000000. MMU Fault: ...                (pid, no name)
#   Xid (PCI:...): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 11 (...)                          (PCI id redacted)
# groups: attribution, code, pid, process name, message
_RE_XID = re.compile(
    r"Xid \(([^)]*)\):\s*(\d+)(?:,\s*(?:pid=('<unknown>'|<unknown>|[^,\s]*)(?:,\s*name=(.*?))?(?:,\s+|$))?(.*))?$"
)

# The MIG instance in the attribution (kernel_rc.c; from the driver's own doc-comment in
# kern_gpu_error_cont_ga100.c):
#   Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No
_RE_ATTR_MIG = re.compile(r"GPU-I:(\d+)(?:\s+GPU-CI:(\d+))?")

# Xid 45 (preemptive removal) names the XID that caused it: kernel_rc.c appends " caused by previous Xid %d"
# (its rootCauseXidStr, the last %s of the format above) to Xid 45 only, when it knows the root cause.
_RE_ROOT = re.compile(r"\s*caused by previous Xid (\d+)\.?\s*$")

# NVLink5 XIDs 144..150 (GB200): unit, severity, XC, instance, link and six registers, with irregular spacing:
#   Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 ...)
#   Xid (PCI:0009:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000 ...)
#   Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 ...)          (no single link)
# groups: unit, severity, XC, instance, link, registers
_RE_NVLINK5 = re.compile(
    r"^([A-Z][A-Z0-9_]*)\s+(Fatal|Nonfatal|Non-fatal|NonFatal)\s+(XC\d)\s+i(\d+)\s+Link\s+(-?\d+)\s*\(([^)]*)\)"
)

# A link number in an NVLink XID (74, 137, 144..150) or an SXid:
#   Xid (PCI:0003:00:00): 74, ..., NVLink: fatal error detected on link 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)
#   Xid (PCI:...): 137, RLW_RXPIPE interrupt hit on link 11 on GPU0: PRIV Error
#   nvidia-nvswitch2: SXid (PCI:0000:85:00.0): 12028, Non-fatal, Link 61 egress non-posted PRIV error (First)
_RE_LINK = re.compile(r"\b[Ll]ink\s*(\d+)")

# Xid 13 from an SM: where on the chip (NVIDIA's catalog: hardware only if it repeats on the same GPC/TPC):
#   Xid (PCI:0000:cb:00): 13, ..., Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter
_RE_GPC = re.compile(r"\(GPC (\d+), TPC (\d+)(?:, SM (\d+))?\)")

# Xid 154: the recovery action the driver now asks for:
#   Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)
# groups: old code, old name, new code, new name
_RE_154 = re.compile(
    r"recovery action changed from (0x[0-9a-fA-F]+) \(([^)]*)\) to (0x[0-9a-fA-F]+) \(([^)]*)\)"
)

# -- NVSwitch SXid (matched from the device name on) -------------------------------------------------------------
#   nvidia-nvswitch2: SXid (PCI:0000:85:00.0): 12028, Non-fatal, Link 61 egress non-posted PRIV error (First)
# (the SXid's PCI id has a function, ".0", where the XID's has none) groups: device, PCI id, code, the rest (severity, link, text)
_RE_SXID = re.compile(r"(nvidia-nvswitch\d*|nvidia-\w+):\s*SXid \(([^)]*)\):\s*(\d+)(?:,\s*(.*))?$")

# The driver prints one SXid error as a first line (its severity, link and text) and follow-on lines with the
# same device, PCI id and code, interleaved with other switches' lines (leptonai/gpud,
# components/accelerator/nvidia/sxid/README.md, captured from real nodes):
#   nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 63 LTSSM Fault Up
#   nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Data {0x10000000, 0x10000000, 0x00000000, ...}
#   nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Severity 1 Engine instance 62 Sub-engine instance 00
# groups: severity level, engine instance, sub-engine instance
_RE_SXID_SEVERITY = re.compile(
    r"^Severity\s+(\d+)(?:\s+Engine instance\s+(\d+))?(?:\s+Sub-engine instance\s+(\d+))?"
)
_RE_SXID_DATA = re.compile(r"^Data\s*\{([^}]*)\}?")

# -- identity and other driver lines -------------------------------------------------------------------------------
# Printed once before a GPU's first XID (the driver's _krcLogUuidOnce), then the serial:
#   NVRM: GPU at PCI:0000:9b:00: GPU-509665ad-b600-ac93-3616-d754b23d636d
#   NVRM: GPU Board Serial Number: 1650124014249
_RE_ANNOUNCE = re.compile(
    r"GPU at PCI:([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.\d)?):\s*(GPU-[0-9a-fA-F-]+)"
)
_RE_SERIAL = re.compile(r"GPU Board Serial Number:\s*(\S+)")

# After repeated GSP RPC timeouts (Xid 119):
#   NVRM: Rate limiting GSP RPC error prints for GPU at PCI:0000:9b:00 (printing 1 of every 30).  The GPU ...
_RE_RATE_LIMIT = re.compile(r"Rate limiting GSP RPC error prints for GPU at PCI:([0-9a-fA-F:]+)")

# A PCI id anywhere in a message, with or without "PCI:" and the function, e.g. the multi-line message
#   [ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0
#                  NVRM: (PCI ID: 10de:26b5) installed in this system has
#                  NVRM: fallen off the bus and is not responding to commands.
_RE_PCI_ANY = re.compile(r"(?:PCI:)?\b([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-7])?\b")
# ... or a bus:device.function without a domain (3b:00.0), read as domain 0000
_RE_BDF_NO_DOMAIN = re.compile(r"\b([0-9a-fA-F]{2}:[0-9a-fA-F]{2})\.[0-7]\b")


def sxid_match(raw: str, j: int) -> tuple[int, re.Match[str]] | None:
    """The SXid in raw whose "SXid (" is at j -> (where its prefix ends, the match), or None."""
    start = raw.rfind("nvidia-", 0, j)  # the device name ("nvidia-nvswitch2:") sits just before "SXid ("
    if start < 0:
        return None
    m = _RE_SXID.search(raw[start:])
    return (start, m) if m else None


class BodyReader:
    """Turns message bodies into records. State spans the lines of one stream (per host)."""

    def __init__(self) -> None:
        # host -> (pci, lineno) of the last "The NVIDIA GPU x" line
        self._pending_bus: dict[str | None, tuple[str, int]] = {}
        self._last_announce: dict[str | None, KernelRecord] = {}
        self._attr_cache: dict[str, tuple[str | None, dict[str, object]]] = {}
        self._body_cache: dict[str, tuple[str | None, int | None, str, dict[str, object]]] = {}
        self._cache_on = True
        self._cache_hits = 0
        self._cache_off_at = 0
        # (host, device, PCI id, code) -> the first line's record of the last SXid error of that switch
        self._sxid_head: dict[tuple[str | None, str, str, int], KernelRecord] = {}

    def boot(self) -> None:
        """A `Linux version` line: the machine rebooted, no message continues across it."""
        self._pending_bus.clear()
        self._sxid_head.clear()

    def xid(
        self, lineno: int, raw: str, body: str, ts: float | None, up: float | None, host: str | None
    ) -> KernelRecord | None:
        if not self._cache_on and lineno - self._cache_off_at > 100_000:
            self._cache_on = True  # try again: a storm may have started
        cached = self._body_cache.get(body) if self._cache_on else None
        if cached is not None:  # XID storms repeat the same text; only the time differs
            self._cache_hits += 1
            pci, code, text, det = cached
            d = dict(det)
            if up is not None:
                d["uptime"] = up
            return KernelRecord("xid", lineno, raw, ts, up, host, pci, code, text, detail=d)
        rec = self._xid_parse(lineno, raw, body, ts, up, host)
        if rec is not None and self._cache_on:
            if len(self._body_cache) >= 2048:
                # texts are not repeating (hits under 1 in 8): stop paying for the cache
                self._cache_on = self._cache_hits * 8 >= len(self._body_cache)
                self._cache_off_at = lineno
                self._body_cache.clear()
                self._cache_hits = 0
            det = {k: v for k, v in rec.detail.items() if k != "uptime"}
            self._body_cache[body] = (rec.pci_bus_id, rec.code, rec.message, det)
        return rec

    def _attribution(self, attr: str) -> tuple[str | None, dict[str, object]]:
        hit = self._attr_cache.get(attr)
        if hit is None:
            mig = _RE_ATTR_MIG.search(attr)
            mig_detail: dict[str, object] = {}
            if mig:
                mig_detail["gpu_instance"] = int(mig.group(1))
                if mig.group(2) is not None:
                    mig_detail["compute_instance"] = int(mig.group(2))
            hit = (_pci_from_attr(attr), mig_detail)
            if len(self._attr_cache) < 1024:
                self._attr_cache[attr] = hit
        return hit[0], (dict(hit[1]) if hit[1] else {})

    def _xid_parse(
        self, lineno: int, raw: str, body: str, ts: float | None, up: float | None, host: str | None
    ) -> KernelRecord | None:
        m = _RE_XID.match(body)
        if not m:
            return None
        attr, code_s, pid, name, msg = m.groups()
        msg = msg or ""
        pci, detail = self._attribution(attr)
        if pid is not None:
            pid = pid.strip("'")
            if pid and pid != "<unknown>":
                detail["pid"] = int(pid) if pid.isdigit() else pid
            if name is not None and name.strip() not in ("<unknown>", "'<unknown>'"):
                detail["process"] = name.strip()
        if code_s == "45" and "caused by previous" in msg:
            mr = _RE_ROOT.search(msg)
            if mr:
                detail["root_cause_xid"] = int(mr.group(1))
                msg = msg[: mr.start()]
        code = int(code_s)
        if 144 <= code <= 150:
            mn = _RE_NVLINK5.match(msg)
            if mn:
                detail.update(
                    unit=mn.group(1),
                    nvlink_severity="fatal" if mn.group(2) == "Fatal" else "nonfatal",
                    xc=mn.group(3),
                    instance=int(mn.group(4)),
                    link=int(mn.group(5)),
                    registers=mn.group(6).split(),
                )
        if "link" not in detail and (code in (74, 137) or 144 <= code <= 150):
            ml = _RE_LINK.search(msg)
            if ml:
                detail["link"] = int(ml.group(1))
        if code == 13:
            mg = _RE_GPC.search(msg)
            if mg:
                detail.update(gpc=int(mg.group(1)), tpc=int(mg.group(2)))
                if mg.group(3) is not None:
                    detail["sm"] = int(mg.group(3))
        if code == 154:
            m154 = _RE_154.search(msg)
            if m154:
                detail.update(recovery_from=m154.group(2), recovery_to=m154.group(4))
        if up is not None:
            detail["uptime"] = up
        return KernelRecord("xid", lineno, raw, ts, up, host, pci, code, msg.strip(), detail=detail)

    def sxid(
        self, lineno: int, raw: str, m: re.Match[str], ts: float | None, up: float | None, host: str | None
    ) -> KernelRecord | None:
        """A match of sxid_match -> the record; None for a follow-on line (`Severity ...`, `Data {...}`) of an
        SXid whose first line was read: it is folded into that record's detail (one error, one event, judged
        by the severity of its first line). A follow-on line with no first line before it (the first line
        went out of the ring buffer) is a record of its own, marked detail.sxid_part = "follow-on"."""
        rest = (m.group(4) or "").strip()
        code = int(m.group(3))
        key = (host, m.group(1), m.group(2), code)
        ms, md = _RE_SXID_SEVERITY.match(rest), _RE_SXID_DATA.match(rest)
        if ms or md:
            head = self._sxid_head.get(key)
            target: dict[str, object] = head.detail if head is not None else {}
            if ms:
                target["sxid_level"] = int(ms.group(1))
                if ms.group(2) is not None:
                    target["engine_instance"] = int(ms.group(2))
                if ms.group(3) is not None:
                    target["sub_engine_instance"] = int(ms.group(3))
            if md:
                target["data"] = [w.strip() for w in md.group(1).split(",") if w.strip()]
            if head is not None:
                head.detail["sxid_lines"] = int(str(head.detail.get("sxid_lines", 1))) + 1
                return None
            target.update(device=m.group(1), sxid_part="follow-on")
            return KernelRecord("sxid", lineno, raw, ts, up, host, _sxid_pci(m), code, rest, detail=target)
        detail: dict[str, object] = {"device": m.group(1)}
        low = rest.lower()
        if low.startswith("fatal"):
            detail["sxid_severity"] = "fatal"
        elif low.startswith("non-fatal") or low.startswith("nonfatal"):
            detail["sxid_severity"] = "nonfatal"
        ml = _RE_LINK.search(rest)
        if ml:
            detail["link"] = int(ml.group(1))
        rec = KernelRecord("sxid", lineno, raw, ts, up, host, _sxid_pci(m), code, rest, detail=detail)
        if len(self._sxid_head) >= 1024:
            self._sxid_head.clear()
        self._sxid_head[key] = rec
        return rec

    def other(
        self, lineno: int, raw: str, body: str, ts: float | None, up: float | None, host: str | None
    ) -> KernelRecord | None:
        """An NVRM message that is not an XID: announcements, fallen off the bus, GSP timeouts; else None."""
        ma = _RE_ANNOUNCE.search(body)
        if ma:
            rec = KernelRecord(
                "gpu-announce",
                lineno,
                raw,
                ts,
                up,
                host,
                normalize_pci_bus_id(ma.group(1)),
                message=body,
                uuid=ma.group(2).lower().replace("gpu-", "GPU-", 1),
            )
            self._last_announce[host] = rec
            return rec
        ms = _RE_SERIAL.search(body)
        if ms:
            prev = self._last_announce.pop(host, None)
            if prev is not None and prev.lineno >= lineno - 3:
                return KernelRecord(
                    "gpu-announce",
                    lineno,
                    raw,
                    ts,
                    up,
                    host,
                    prev.pci_bus_id,
                    message=body,
                    uuid=prev.uuid,
                    serial=ms.group(1),
                )
            return None
        low = body.lower()
        if "fallen off the bus" in low:
            pci = _first_pci(body)
            if pci is None:
                pend = self._pending_bus.pop(host, None)
                if pend is not None and lineno - pend[1] <= 4:
                    pci = pend[0]
            return KernelRecord("fell-off-bus", lineno, raw, ts, up, host, pci, message=body)
        if body.startswith("The NVIDIA GPU "):
            pci = _first_pci(body)
            if pci:
                self._pending_bus[host] = (pci, lineno)
            return None
        mr = _RE_RATE_LIMIT.search(body)
        if mr:
            pci_rl = normalize_pci_bus_id(mr.group(1))
            return KernelRecord("gsp-rate-limit", lineno, raw, ts, up, host, pci_rl, message=body)
        if "gsp" in low and ("timeout" in low or "timed out" in low):
            return KernelRecord("gsp-timeout", lineno, raw, ts, up, host, _first_pci(body), message=body)
        return None


def _sxid_pci(m: re.Match[str]) -> str | None:
    pci_raw = m.group(2).replace("PCI:", "").strip()
    return normalize_pci_bus_id(pci_raw) if _RE_PCI_ANY.search(pci_raw) else None


def _pci_from_attr(attr: str) -> str | None:
    a = attr.strip()
    if a.startswith("PCI:"):
        a = a[4:]
    a = a.split()[0] if a else a
    if not a or "..." in a:
        return None
    parts = a.split(":")
    if len(parts) < 2 or not all(p and all(c in "0123456789abcdefABCDEF." for c in p) for p in parts):
        return None
    return normalize_pci_bus_id(a)


def _first_pci(text: str) -> str | None:
    m = _RE_PCI_ANY.search(text)
    if m:
        return normalize_pci_bus_id(m.group(1))
    m2 = _RE_BDF_NO_DOMAIN.search(text)
    if m2:
        return normalize_pci_bus_id(m2.group(1))
    return None
