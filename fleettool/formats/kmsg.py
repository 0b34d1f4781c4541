"""Parse kernel-log lines into GPU records: XIDs, NVSwitch SXids, fallen-off-the-bus, GSP timeouts, and the
driver's announcement lines that map a PCI id to a GPU UUID and board serial.

Reads any of the forms in which kernel lines are found (see fixtures/samples/kmsg/SOURCES.md): bare lines,
dmesg `[uptime]`, `dmesg -T` ctime, `dmesg --time-format=iso` (with or without `--decode` facility:level),
syslog / journalctl short (month names in several languages) and short-iso with the host name, Talos
`<ip>: kern: warning: [RFC3339]:`, and lines wrapped inside other tools' messages or behind launcher prefixes.
Only lines the NVIDIA driver wrote (`NVRM:` and `nvidia-nvswitchN: SXid`) become records; mlx5, ext4 and the
rest are skipped even when they name the same PCI bus.

`KernelLogParser` is pure and stateful across lines of one stream: it carries the year for syslog lines that
have none, the boot time learnt from lines that carry both wall time and uptime, the multi-line
"fallen off the bus" message, and the serial-number line that follows an announcement.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from fleettool.model import Event, normalize_pci_bus_id

# -- month names: English plus the locales journalctl and syslog are seen in -------------------------------
_MONTHS: dict[str, int] = {}
for _i, _names in enumerate(
    [
        "jan janv ene gen sty led tammi oca januar janeiro enero gennaio styczeń янв",
        "feb févr fev lut úno helmi şub februar fevereiro febrero febbraio luty фев",
        "mar mär mars mrt bře maalis märz marzo março marzec мар",
        "apr avr abr kwi dub huhti nis april avril abril aprile kwiecień апр",
        "may mai mag maj mei kvě touko may mayo maggio мая май",
        "jun juin giu cze čvn kesä haz juni junho junio giugno czerwiec июн",
        "jul juil lug lip čvc heinä tem juli julho julio luglio lipiec июл",
        "aug août ago sie srp elo ağu august agosto sierpień авг",
        "sep sept set wrz zář syys eyl september setembro septiembre settembre wrzesień сен",
        "oct okt ott out paź říj loka eki oktober outubro octubre ottobre październik окт",
        "nov lis marras kas november novembro noviembre novembre listopad ноя",
        "dec dez déc dic gru pro joulu ara dezember dezembro diciembre dicembre grudzień дек",
    ],
    start=1,
):
    for _n in _names.split():
        _MONTHS[_n] = _i


def month_number(name: str) -> int | None:
    """'Dec', 'kwi', 'févr.', '4月', '4월' -> 1..12, or None."""
    s = name.strip().rstrip(".").lower()
    if not s:
        return None
    if s[-1] in "月월" and s[:-1].isdigit():
        n = int(s[:-1])
        return n if 1 <= n <= 12 else None
    hit = _MONTHS.get(s)
    if hit is None and len(s) > 3:
        hit = _MONTHS.get(s[:3])
    return hit


# -- record --------------------------------------------------------------------------------------------
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


# -- prefix (time and host) patterns -------------------------------------------------------------------
_ISO = r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d+))?\s?(Z|[+-]\d\d:?\d\d)?"
_RE_ISO = re.compile(_ISO)
_RE_SYSLOG = re.compile(
    r"(?:^|[\s,;:])([^\W\d_]{3,12}\.?|\d{1,2}[月월])\s+(\d{1,2})\s+(\d\d):(\d\d):(\d\d)(?:\.(\d+))?\s+(\S+)\s+kernel:"
)
_RE_CTIME = re.compile(
    r"\[\s*[^\W\d_]{2,4}\.?\s+([^\W\d_]{3,5}\.?)\s+(\d{1,2})\s+(\d\d):(\d\d):(\d\d)\s+(\d{4})\s*\]"
)
_RE_BARE_UPTIME = re.compile(r"\s*\[\s*(\d+\.\d+)\]\s*$")
_RE_UPTIME = re.compile(r"\[\s*(\d+\.\d+)\s*\]")
_RE_ISO_HOST = re.compile(_ISO + r"\s+(\S+)\s+kernel:")
_RE_TALOS = re.compile(r"^(\S+?):\s+kern:\s*\w+:\s*\[")
_RE_HOST_LAUNCHER = re.compile(r"(?:^|[\s>|])([A-Za-z][\w.-]*\w):\s+(?=\[|kernel:|NVRM)")

# -- body patterns ------------------------------------------------------------------------------------------
_RE_XID = re.compile(
    r"Xid \(([^)]*)\):\s*(\d+)(?:,\s*(?:pid=('<unknown>'|<unknown>|[^,\s]*)(?:,\s*name=(.*?))?(?:,\s+|$))?(.*))?$"
)
_RE_SXID = re.compile(r"(nvidia-nvswitch\d*|nvidia-\w+):\s*SXid \(([^)]*)\):\s*(\d+)(?:,\s*(.*))?$")
_RE_PID = re.compile(r"^pid=('<unknown>'|<unknown>|[^,\s]*)(?:,\s*name=(.*?))?(?:,\s+(.*)|$)")
_RE_ROOT = re.compile(r"\s*caused by previous Xid (\d+)\.?\s*$")
_RE_NVLINK5 = re.compile(
    r"^([A-Z][A-Z0-9_]*)\s+(Fatal|Nonfatal|Non-fatal|NonFatal)\s+(XC\d)\s+i(\d+)\s+Link\s+(-?\d+)\s*\(([^)]*)\)"
)
_RE_LINK = re.compile(r"\b[Ll]ink\s*(\d+)")
_RE_154 = re.compile(
    r"recovery action changed from (0x[0-9a-fA-F]+) \(([^)]*)\) to (0x[0-9a-fA-F]+) \(([^)]*)\)"
)
_RE_ANNOUNCE = re.compile(
    r"GPU at PCI:([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.\d)?):\s*(GPU-[0-9a-fA-F-]+)"
)
_RE_SERIAL = re.compile(r"GPU Board Serial Number:\s*(\S+)")
_RE_PCI_ANY = re.compile(r"(?:PCI:)?\b([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-7])?\b")
_RE_BDF_NO_DOMAIN = re.compile(r"\b([0-9a-fA-F]{2}:[0-9a-fA-F]{2})\.[0-7]\b")
_RE_RATE_LIMIT = re.compile(r"Rate limiting GSP RPC error prints for GPU at PCI:([0-9a-fA-F:]+)")
_RE_ATTR_MIG = re.compile(r"GPU-I:(\d+)(?:\s+GPU-CI:(\d+))?")


# wall times outside 1970..2200 and uptimes over 300 years are not times: the line keeps no time
_TS_MAX = 7258118400.0  # 2200-01-01
_UPTIME_MAX = 1e10


def _finite_time(ts: float | None) -> bool:
    return ts is not None and 0.0 <= ts < _TS_MAX


def _finite_uptime(up: float | None) -> bool:
    return up is not None and 0.0 <= up < _UPTIME_MAX


def _tzoffset(tz: str | None) -> int:
    if not tz or tz == "Z":
        return 0
    sign = -1 if tz[0] == "-" else 1
    digits = tz[1:].replace(":", "")
    return sign * (int(digits[:2]) * 3600 + int(digits[2:4] or 0) * 60)


def _frac(s: str | None) -> float:
    if not s:
        return 0.0
    s = s[:9]  # nanoseconds at most (and int() of thousands of digits is refused)
    return int(s) / 10 ** len(s)


def parse_iso(text: str) -> float | None:
    """'2025-01-21T04:41:44,283302+00:00' / '2026-04-22T21:30:51.870495804Z' / '2026-11-30T00:16:39+0000'
    -> unix seconds, or None."""
    m = _RE_ISO.search(text)
    if not m:
        return None
    y, mo, d, h, mi, s, fr, tz = m.groups()
    try:
        base = calendar.timegm((int(y), int(mo), int(d), int(h), int(mi), int(s), 0, 0, 0))
    except (ValueError, OverflowError):
        return None
    t = base + _frac(fr) - _tzoffset(tz)
    return t if _finite_time(t) else None


class KernelLogParser:
    """Feed lines (in order) with `feed`; records come out. Pure: no I/O, no clock.

    year: for syslog lines, which carry no year (the year of the file's context: the recording's other
    timestamps, the file's mtime). boot_time: unix time of boot, to turn dmesg uptimes into wall time
    (the live collector knows it; from files it is learnt when a line carries both).
    """

    def __init__(self, *, year: int | None = None, boot_time: float | None = None, host: str | None = None):
        self.year = year
        self.boot_time = boot_time
        self._boot_given = boot_time is not None
        self._last_uptime: float | None = None
        self.default_host = host
        self._last_month: int | None = None
        self._syslog_cache: dict[str, float] = {}
        self._pending_bus: dict[
            str | None, tuple[str, int]
        ] = {}  # host -> (pci, lineno) of "The NVIDIA GPU x"
        self._last_announce: dict[str | None, KernelRecord] = {}
        self._attr_cache: dict[str, tuple[str | None, dict[str, object]]] = {}
        self._body_cache: dict[str, tuple[str | None, int | None, str, dict[str, object]]] = {}
        self._cache_on = True
        self._cache_hits = 0
        self._cache_off_at = 0
        self._prefix_cache: dict[str, tuple[float | None, str | None]] = {}
        self.lineno = 0
        self.year_used = False  # a syslog stamp (which carries no year) took self.year

    # -- time and host -----------------------------------------------------------------------------------
    def _prefix(self, prefix: str) -> tuple[float | None, float | None, str | None]:
        if not prefix or prefix.isspace():
            return None, None, None  # a bare line, or a continuation line
        if "[" not in prefix:  # no uptime: the same prefix (one second of a journal) parses the same way
            hit = self._prefix_cache.get(prefix)
            if hit is not None:
                return hit[0], None, hit[1]
            ts0, _, host0 = self._prefix_slow(prefix)
            if len(self._prefix_cache) > 4096:
                self._prefix_cache.clear()
            self._prefix_cache[prefix] = (ts0, host0)
            return ts0, None, host0
        return self._prefix_slow(prefix)

    def _prefix_slow(self, prefix: str) -> tuple[float | None, float | None, str | None]:
        ts: float | None = None
        up: float | None = None
        host: str | None = None
        mb = _RE_BARE_UPTIME.match(prefix)
        if mb:  # plain dmesg: "[ 1234.567890] " and nothing else
            return self._uptime(None, float(mb.group(1)), None)
        if "kernel:" in prefix:
            m = _RE_ISO_HOST.search(prefix)
            if m:
                ts = parse_iso(m.group(0))
                host = m.group(9)
            else:
                ms = _RE_SYSLOG.search(prefix)
                if ms:
                    ts = self._syslog_time(ms)
                    host = ms.group(7)
        if ts is None and "[" in prefix and ":" in prefix:
            mc = _RE_CTIME.search(prefix)
            if mc:
                mon = month_number(mc.group(1))
                if mon:
                    try:
                        ts = float(
                            calendar.timegm(
                                (
                                    int(mc.group(6)),
                                    mon,
                                    int(mc.group(2)),
                                    int(mc.group(3)),
                                    int(mc.group(4)),
                                    int(mc.group(5)),
                                    0,
                                    0,
                                    0,
                                )
                            )
                        )
                    except (ValueError, OverflowError):
                        ts = None
        if ts is None and ("-" in prefix):
            ts = parse_iso(prefix)
            if ts is not None and host is None:
                mt = _RE_TALOS.search(prefix)
                if mt:
                    host = mt.group(1)
        if "[" in prefix:
            mu = _RE_UPTIME.search(prefix)
            if mu:
                up = float(mu.group(1))
        if host is None and ": " in prefix:
            mh = _RE_HOST_LAUNCHER.search(prefix)
            if mh and mh.group(1) not in ("kernel", "kern", "NVRM"):
                host = mh.group(1)
        return self._uptime(ts, up, host)

    def _uptime(
        self, ts: float | None, up: float | None, host: str | None
    ) -> tuple[float | None, float | None, str | None]:
        if not _finite_uptime(up):
            up = None  # "[99999...9.0]": not an uptime any kernel has had
        if not _finite_time(ts):
            ts = None
        if up is not None:
            if self._last_uptime is not None and up < self._last_uptime - 1.0 and not self._boot_given:
                self.boot_time = None  # uptime went back: a new boot, the old offset no longer holds
            self._last_uptime = up
        if ts is not None and up is not None and not self._boot_given:
            self.boot_time = ts - up
        elif ts is None and up is not None and self.boot_time is not None:
            ts = self.boot_time + up
            if not _finite_time(ts):
                ts = None
        return ts, up, host

    def _syslog_time(self, m: re.Match[str]) -> float | None:
        key = m.group(0)
        hit = self._syslog_cache.get(key)
        if hit is not None:
            return hit
        mon = month_number(m.group(1))
        if mon is None:
            return None
        if self.year is None:
            return None
        self.year_used = True
        if self._last_month is not None and mon < self._last_month and self._last_month - mon > 6:
            self.year += 1  # December -> January: the log crossed a new year
            self._syslog_cache.clear()
        self._last_month = mon
        try:
            ts = calendar.timegm(
                (self.year, mon, int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)), 0, 0, 0)
            ) + _frac(m.group(6))
        except (ValueError, OverflowError):
            return None
        if len(self._syslog_cache) > 4096:
            self._syslog_cache.clear()
        self._syslog_cache[key] = ts
        return ts

    # -- lines -------------------------------------------------------------------------------------------
    def feed(self, line: str) -> KernelRecord | None:
        """One line -> a record, or None when the line is not a GPU message (or continues one)."""
        self.lineno += 1
        if "NVRM" not in line and "SXid" not in line and "Linux version" not in line:
            return None
        line = line.rstrip("\r\n")
        if len(line) > 8192:
            line = line[:8192]
        return self._line(line, None)

    def feed_message(
        self, message: str, *, ts: float | None, uptime: float | None, host: str | None
    ) -> KernelRecord | None:
        """One kernel message whose time and host came from outside the text (a journal JSON entry, a
        /dev/kmsg record): the message is read as a bare line, with the given time."""
        self.lineno += 1
        if "NVRM" not in message and "SXid" not in message and "Linux version" not in message:
            return None
        message = message.split("\n", 1)[0].rstrip("\r")[:8192]  # a multi-line message: its first line
        ts = ts if _finite_time(ts) else None
        uptime = uptime if _finite_uptime(uptime) else None
        return self._line(message, self._uptime(ts, uptime, host))

    def _line(
        self, line: str, given: tuple[float | None, float | None, str | None] | None
    ) -> KernelRecord | None:
        i = line.find("NVRM:")
        if i < 0:
            j = line.find("SXid (")
            if j >= 0:
                return self._sxid(line, j, given)
            k = line.find("Linux version ")
            if k >= 0:
                ts, up, host = given if given is not None else self._prefix(line[:k])
                self._pending_bus.clear()
                return KernelRecord(
                    "boot", self.lineno, line, ts, up, host or self.default_host, message=line[k : k + 200]
                )
            return None
        ts, up, host = given if given is not None else self._prefix(line[:i])
        host = host or self.default_host
        body = line[i + 5 :].strip()
        if body.startswith("Xid"):
            return self._xid(line, body, ts, up, host)
        return self._other(line, body, ts, up, host)

    def feed_all(self, lines: Iterable[str]) -> Iterator[KernelRecord]:
        for ln in lines:
            rec = self.feed(ln)
            if rec is not None:
                yield rec

    def _xid(
        self, raw: str, body: str, ts: float | None, up: float | None, host: str | None
    ) -> KernelRecord | None:
        if not self._cache_on and self.lineno - self._cache_off_at > 100_000:
            self._cache_on = True  # try again: a storm may have started
        cached = self._body_cache.get(body) if self._cache_on else None
        if cached is not None:  # XID storms repeat the same text; only the time differs
            self._cache_hits += 1
            pci, code, text, det = cached
            d = dict(det)
            if up is not None:
                d["uptime"] = up
            return KernelRecord("xid", self.lineno, raw, ts, up, host, pci, code, text, detail=d)
        rec = self._xid_parse(raw, body, ts, up, host)
        if rec is not None and self._cache_on:
            if len(self._body_cache) >= 2048:
                # texts are not repeating (hits under 1 in 8): stop paying for the cache
                self._cache_on = self._cache_hits * 8 >= len(self._body_cache)
                self._cache_off_at = self.lineno
                self._body_cache.clear()
                self._cache_hits = 0
            det = {k: v for k, v in rec.detail.items() if k != "uptime"}
            self._body_cache[body] = (rec.pci_bus_id, rec.code, rec.message, det)
        return rec

    def _xid_parse(
        self, raw: str, body: str, ts: float | None, up: float | None, host: str | None
    ) -> KernelRecord | None:
        m = _RE_XID.match(body)
        if not m:
            return None
        attr, code_s, pid, name, msg = m.groups()
        msg = msg or ""
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
        pci, detail = hit[0], (dict(hit[1]) if hit[1] else {})
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
        if code == 154:
            m154 = _RE_154.search(msg)
            if m154:
                detail.update(recovery_from=m154.group(2), recovery_to=m154.group(4))
        if up is not None:
            detail["uptime"] = up
        return KernelRecord("xid", self.lineno, raw, ts, up, host, pci, code, msg.strip(), detail=detail)

    def _sxid(
        self, raw: str, j: int, given: tuple[float | None, float | None, str | None] | None = None
    ) -> KernelRecord | None:
        # the device name ("nvidia-nvswitch2:") sits just before "SXid ("
        start = raw.rfind("nvidia-", 0, j)
        seg = raw[start:] if start >= 0 else raw[j:]
        m = _RE_SXID.search(seg) if start >= 0 else None
        if not m:
            return None
        ts, up, host = given if given is not None else self._prefix(raw[: start if start >= 0 else j])
        detail: dict[str, object] = {"device": m.group(1)}
        rest = (m.group(4) or "").strip()
        low = rest.lower()
        if low.startswith("fatal"):
            detail["sxid_severity"] = "fatal"
        elif low.startswith("non-fatal") or low.startswith("nonfatal"):
            detail["sxid_severity"] = "nonfatal"
        ml = _RE_LINK.search(rest)
        if ml:
            detail["link"] = int(ml.group(1))
        pci_raw = m.group(2).replace("PCI:", "").strip()
        pci = normalize_pci_bus_id(pci_raw) if _RE_PCI_ANY.search(pci_raw) else None
        return KernelRecord(
            "sxid",
            self.lineno,
            raw,
            ts,
            up,
            host or self.default_host,
            pci,
            int(m.group(3)),
            rest,
            detail=detail,
        )

    def _other(
        self, raw: str, body: str, ts: float | None, up: float | None, host: str | None
    ) -> KernelRecord | None:
        ma = _RE_ANNOUNCE.search(body)
        if ma:
            rec = KernelRecord(
                "gpu-announce",
                self.lineno,
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
            if prev is not None and prev.lineno >= self.lineno - 3:
                return KernelRecord(
                    "gpu-announce",
                    self.lineno,
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
                if pend is not None and self.lineno - pend[1] <= 4:
                    pci = pend[0]
            return KernelRecord("fell-off-bus", self.lineno, raw, ts, up, host, pci, message=body)
        if body.startswith("The NVIDIA GPU "):
            pci = _first_pci(body)
            if pci:
                self._pending_bus[host] = (pci, self.lineno)
            return None
        mr = _RE_RATE_LIMIT.search(body)
        if mr:
            return KernelRecord(
                "gsp-rate-limit",
                self.lineno,
                raw,
                ts,
                up,
                host,
                normalize_pci_bus_id(mr.group(1)),
                message=body,
            )
        if "gsp" in low and ("timeout" in low or "timed out" in low):
            return KernelRecord("gsp-timeout", self.lineno, raw, ts, up, host, _first_pci(body), message=body)
        return None


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


def parse_kernel_log(
    lines: Iterable[str], *, year: int | None = None, boot_time: float | None = None, host: str | None = None
) -> list[KernelRecord]:
    """All GPU records of a stream of kernel-log lines."""
    return list(KernelLogParser(year=year, boot_time=boot_time, host=host).feed_all(lines))


def parse_kmsg_record(raw: str) -> tuple[int, int, int, str] | None:
    """One /dev/kmsg record 'pri,seq,usec,flags[,...];message' -> (facility_level, seq, usec_since_boot, message).
    Continuation lines (starting with a space: 'KEY=value' dictionary) are not records."""
    if not raw or raw[0] == " ":
        return None
    head, sep, msg = raw.partition(";")
    if not sep:
        return None
    f = head.split(",")
    if len(f) < 3:
        return None
    try:
        return int(f[0]), int(f[1]), int(f[2]), msg.rstrip("\n")
    except ValueError:
        return None


def parse_journal_entry(line: str) -> tuple[str, float | None, float | None, str | None] | None:
    """One `journalctl -o json` line -> (message, wall time, uptime, host), or None when the line is not a
    journal entry. MESSAGE may be an array of bytes (journald stores non-UTF-8 text that way); the kernel's
    own stamp (_SOURCE_MONOTONIC_TIMESTAMP, microseconds since boot) is preferred to journald's."""
    import json

    try:
        doc = json.loads(line)
    except ValueError:
        return None
    if not isinstance(doc, dict) or "MESSAGE" not in doc:
        return None
    msg = doc["MESSAGE"]
    if isinstance(msg, list):
        try:
            msg = bytes(int(b) & 0xFF for b in msg).decode("utf-8", "replace")
        except (TypeError, ValueError):
            return None
    if not isinstance(msg, str):
        return None

    def micros(key: str) -> float | None:
        v = doc.get(key)
        try:
            t = int(str(v)[:20]) / 1e6 if v is not None else None
        except ValueError:
            return None
        return t

    ts = micros("__REALTIME_TIMESTAMP")
    up = micros("_SOURCE_MONOTONIC_TIMESTAMP")
    if up is None:
        up = micros("__MONOTONIC_TIMESTAMP")
    host = doc.get("_HOSTNAME")
    return (
        msg,
        ts if _finite_time(ts) else None,
        up if _finite_uptime(up) else None,
        host if isinstance(host, str) and host else None,
    )


def record_to_event(rec: KernelRecord, node: str, source: str) -> Event | None:
    """A parsed kernel record -> a store Event (announcement lines are identity, not events: None)."""
    if rec.kind == "gpu-announce":
        return None
    return Event(
        ts=rec.ts,
        node=rec.host or node,
        kind=rec.kind,
        message=rec.message,
        uuid=rec.uuid,
        pci_bus_id=rec.pci_bus_id,
        code=rec.code,
        raw=rec.raw,
        source=source,
        detail=dict(rec.detail),
    )
