"""The time and host in front of a kernel message: what dmesg, journalctl, syslog daemons, Talos and launchers
put before `NVRM: ...`, read into (wall time, uptime, host).

The shapes, with a real line of each (fixtures/formats/kmsg/ holds one file per shape, and
fixtures/samples/kmsg/SOURCES.md says where every line was found):

    dmesg                       [  219.470994] NVRM: Xid (PCI:0000:91:00): 79, ...
    dmesg -T                    [Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, ...
    dmesg --time-format iso     kern  :warn  : 2025-01-21T04:41:44,283302+00:00 NVRM: Xid (PCI:0000:38:00): 13, ...
    journalctl -k (short)       Dec 02 11:38:47 worker4 kernel: NVRM: Xid (PCI:0000:91:00): 79, ...
    journalctl -o short-iso     2026-12-02T11:38:47+0000 worker4 kernel: NVRM: Xid (PCI:0000:91:00): 79, ...
    rsyslog kern.log            Dec  2 11:38:47 worker4 kernel: [  219.470994] NVRM: Xid (PCI:0000:91:00): 79, ...
    rsyslog RFC 3339            2026-12-02T11:38:47.548779+00:00 worker4 kernel: [  219.470994] NVRM: ...
    talosctl dmesg              192.168.11.119: kern: warning: [2026-04-22T21:30:51.870495804Z]: NVRM: ...
    dmesg -d (--show-delta)     [  219.470994 <    0.000004>] NVRM: Xid (PCI:0000:91:00): 79, ...
    dmesg -H / -e (reltime)     [Dec 5 10:01] nvidia 0000:03:00.0: AER: ...   then   [  +0.000844] NVRM: ...
    dmesg --time-format delta   [<    0.000004>] NVRM: Xid ...
    a launcher's host prefix    gpu-07: [  219.470994] NVRM: Xid ...

`PrefixClock` is the stateful part: syslog stamps carry no year (it is given, and rolls over at New Year), and
dmesg uptimes become wall time once a line has carried both (or the boot time is given). The relative shapes
(`dmesg -H`/`-e`: a `[Mon D HH:MM]` line at each new minute, then `[  +s.us]` gaps to the line before;
`--time-format delta`: gaps only) are timed from the last date line, to the minute it names, through every line
(`PrefixClock.relative`): a gap with no date line before it has no wall time, and `no_base` counts them.
`LINE_SHAPES` are the same shapes anchored at the start of a line, named, for telling a kernel log from other
text by its content.
"""

from __future__ import annotations

import calendar
import re

from fleettool import units

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
        "dec dez déc dic gru pro joulu ara dezember dezembro diciembre grudzień дек",
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


# -- prefix patterns (searched within the text before `NVRM:`) -----------------------------------------------
# An ISO 8601 / RFC 3339 stamp, with a '.' or ',' fraction (up to nanoseconds) and an optional offset, e.g.
#   kern  :warn  : 2025-01-21T04:41:44,283302+00:00 NVRM: ...                (dmesg --decode --time-format=iso)
#   2026-12-02T11:38:47+0000 worker4 kernel: NVRM: ...                        (journalctl -o short-iso)
#   192.168.11.119: kern: warning: [2026-04-22T21:30:51.870495804Z]: NVRM: ... (talosctl dmesg)
# groups: year, month, day, hour, minute, second, fraction, offset
_ISO = r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d+))?\s?(Z|[+-]\d\d:?\d\d)?"
_RE_ISO = re.compile(_ISO)

# A syslog / journalctl short stamp (no year) and the host, before `kernel:`, e.g.
#   Dec  2 11:38:47 worker4 kernel: [  219.470994] NVRM: ...      (rsyslog /var/log/kern.log)
#   Dec 02 11:38:47.548779 worker4 kernel: NVRM: ...              (journalctl -k -o short-precise)
#   kwi 15 10:02:11 host kernel: NVRM: ...                        (journalctl in a Polish locale)
# also found inside other tools' text ("Error: May 13 17:18:47 hyperion kernel: NVRM: ...").
# groups: month name, day, hour, minute, second, fraction, host
_RE_SYSLOG = re.compile(
    r"(?:^|[\s,;:])([^\W\d_]{3,12}\.?|\d{1,2}[月월])\s+(\d{1,2})\s+(\d\d):(\d\d):(\d\d)(?:\.(\d+))?\s+(\S+)\s+kernel:"
)

# dmesg -T (ctime, the host's local time, read as UTC), e.g.
#   [Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, ...
#   [Mon Aug  5 03:54:13 2024] NVRM: Xid (PCI:0000:00:07): 31, ...    (two spaces before a one-digit day)
# groups: month name, day, hour, minute, second, year
_RE_CTIME = re.compile(
    r"\[\s*[^\W\d_]{2,4}\.?\s+([^\W\d_]{3,5}\.?)\s+(\d{1,2})\s+(\d\d):(\d\d):(\d\d)\s+(\d{4})\s*(?:<\s*\d+\.\d+>)?\]"
)

# plain dmesg: the uptime stamp and nothing else before the message, e.g.
#   [31543.449443] NVRM: Xid (PCI:0000:01:00): 31, ...
#   [  365.969681] NVRM: Xid (PCI:0000:01:00): 31, ...       (space-padded inside the brackets)
#   [  219.470994 <    0.000004>] NVRM: ...                  (dmesg -d: the gap to the line before, kept aside)
_RE_BARE_UPTIME = re.compile(r"\s*\[\s*(\d+\.\d+)(?:\s*<\s*\d+\.\d+>)?\]\s*$")

# an uptime stamp anywhere in the prefix, beside a wall time, e.g.
#   May 6 00:38:27 alex kernel: [ 4909.922970] NVRM: Xid (0000:01:00): 13, ...
_RE_UPTIME = re.compile(r"\[\s*(\d+\.\d+)\s*(?:<\s*\d+\.\d+>)?\]")

# dmesg -H / -e (util-linux's reltime: strftime "%b%e %H:%M" at a new minute, else the gap "%+8.6f"), and
# --time-format delta ("<%12.6f>"), e.g. (fixtures/formats/kmsg/dmesg-H*.txt)
#   [Dec 5 10:01] nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)
#   [Dec21 10:01] ...                                          (a two-digit day: no space)
#   [  +0.000844] nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)
#   [<    0.000004>] NVRM: Xid ...
# groups: month name, day, hour, minute | the gap
_RE_REL_DATE = re.compile(r"\s*\[([^\W\d_]{3})\s*(\d{1,2})\s+(\d\d):(\d\d)\]")
_RE_REL_GAP = re.compile(r"\s*\[(?:\s*\+|<)\s*(\d+\.\d+)>?\]")

# an ISO stamp followed by the host and `kernel:`, e.g.
#   2026-12-02T11:38:47.548779+00:00 worker4 kernel: [  219.470994] NVRM: ...  (rsyslog RFC 3339 format)
# groups: those of _ISO, then the host (group 9)
_RE_ISO_HOST = re.compile(_ISO + r"\s+(\S+)\s+kernel:")

# talosctl dmesg: the node address, then facility and level, e.g.
#   192.168.11.119: kern: warning: [2026-04-22T21:30:51.870495804Z]: NVRM: ...
_RE_TALOS = re.compile(r"^(\S+?):\s+kern:\s*\w+:\s*\[")

# a host name put in front by a launcher or a collecting tool (pdsh, kubectl -l, ...), e.g.
#   gpu-07: [  219.470994] NVRM: Xid ...
#   gpu-07: kernel: NVRM: Xid ...
_RE_HOST_LAUNCHER = re.compile(r"(?:^|[\s>|])([A-Za-z][\w.-]*\w):\s+(?=\[|kernel:|NVRM)")

# -- whole-line shapes, anchored at the line's start: (name, pattern), the first that matches names the line ----
_MONTH = r"(?:[^\W\d_]{3,9}\.?|\d{1,2}[月월])"
LINE_SHAPES: list[tuple[str, re.Pattern[str]]] = [
    # [ 6781741.002140] NVRM: GPU at PCI:0000:91:00: GPU-509665ad-b600-ac93-3616-d754b23d636d
    ("dmesg", re.compile(r"^\s*\[\s*\d{1,12}\.\d{1,9}\]")),
    # [  219.470994 <    0.000004>] NVRM: Xid (PCI:0000:91:00): 79, ...
    ("dmesg -d", re.compile(r"^\s*\[\s*\d{1,12}\.\d{1,9}\s*<\s*\d+\.\d+>\]")),
    # [Dec 5 10:01] nvidia 0000:03:00.0: AER: ...    /    [  +0.000844] NVRM: Xid (PCI:0000:03:00): 79, ...
    ("dmesg -H", re.compile(r"^\s*\[(?:\s*\+\d{1,12}\.\d{6}|[^\W\d_]{3}\s?\d{1,2} \d\d:\d\d)\]")),
    # [<    0.000004>] NVRM: Xid (PCI:0000:91:00): 79, ...
    ("dmesg --time-format delta", re.compile(r"^\s*\[<\s*\d{1,12}\.\d{6}>\]")),
    # [Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, ...
    (
        "dmesg -T",
        re.compile(
            r"^\s*\[\s*[^\W\d_]{2,4}\.?\s+[^\W\d_]{3,5}\.?\s+\d{1,2}\s+\d\d:\d\d:\d\d\s+\d{4}\s*(?:<\s*\d+\.\d+>)?\]"
        ),
    ),
    # kern  :warn  : 2025-01-21T04:41:44,283302+00:00 NVRM: Xid (PCI:0000:cb:00): 13, ...
    (
        "dmesg --time-format iso",
        re.compile(
            r"^(?:[a-z]+\s*:\s*[a-z]+\s*:\s*)?\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d+(?:Z|[+-]\d\d:?\d\d)\s"
        ),
    ),
    # kern  :info  : [ 6781741.002140] NVRM: ...
    ("dmesg --decode", re.compile(r"^[a-z]+\s*:\s*[a-z]+\s*:\s*\[")),
    # Dec 02 11:38:47.548779 worker4 kernel: NVRM: Xid (PCI:0000:91:00): 79, ...
    (
        "journalctl short-precise",
        re.compile(rf"^{_MONTH}\s+\d{{1,2}}\s+\d\d:\d\d:\d\d\.\d+\s+\S+\s+[^\s:]+:"),
    ),
    # Dec  2 11:38:47 worker4 kernel: [  219.470994] NVRM: Xid (PCI:0000:91:00): 79, ...
    ("syslog / journalctl short", re.compile(rf"^{_MONTH}\s+\d{{1,2}}\s+\d\d:\d\d:\d\d\s+\S+\s+[^\s:]+:")),
    # 2026-12-02T11:38:47+0000 worker4 kernel: NVRM: Xid (PCI:0000:91:00): 79, ...
    (
        "syslog / journalctl short-iso",
        re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+\S+\s+[^\s:]+:"),
    ),
    # 192.168.11.119: kern: warning: [2026-04-22T21:30:51.870495804Z]: NVRM: ...
    ("Talos dmesg", re.compile(r"^\S+:\s+kern:\s*\w+:\s*\[")),
    # NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus     /     kernel: NVRM: Xid (PCI:...): 145, ...
    (
        "kernel lines",
        re.compile(r"^\s*(?:kernel:\s*)?(?:\[\s*\d+\.\d+\]\s*)?(?:NVRM:|nvidia-nvswitch\d*: SXid)"),
    ),
]

# -- times ---------------------------------------------------------------------------------------------------
# wall times outside 1970..2200 and uptimes over 300 years are not times: the line keeps no time
_TS_MAX = 7258118400.0  # 2200-01-01
_UPTIME_MAX = 1e10

Stamp = tuple[float | None, float | None, str | None]  # (wall time, uptime, host)


def finite_time(ts: float | None) -> bool:
    return ts is not None and 0.0 <= ts < _TS_MAX


def finite_uptime(up: float | None) -> bool:
    return up is not None and 0.0 <= up < _UPTIME_MAX


def frac(s: str | None) -> float:
    """The digits after a decimal point -> a fraction of a second (nanoseconds at most)."""
    if not s:
        return 0.0
    s = s[:9]  # nanoseconds at most (and int() of thousands of digits is refused)
    return int(s) / 10 ** len(s)


def _utc(y: int, mo: int, d: int, h: int, mi: int, s: int) -> float | None:
    try:
        return float(calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)))
    except (ValueError, OverflowError):
        return None


def parse_iso(text: str) -> float | None:
    """The first ISO 8601 stamp in text, e.g. '2025-01-21T04:41:44,283302+00:00',
    '2026-04-22T21:30:51.870495804Z', '2026-11-30T00:16:39+0000' -> unix seconds, or None: no stamp, a date
    that does not exist (2024-02-30: units.iso_match_to_unix is strict), or a time outside 1970..2200."""
    m = _RE_ISO.search(text)
    if not m:
        return None
    try:
        t = units.iso_match_to_unix(m)  # _ISO's groups are units.ISO_PATTERN's
    except ValueError:
        return None
    return t if finite_time(t) else None


class PrefixClock:
    """Reads the prefixes of one stream of lines, in order. Pure: no I/O, no clock.

    year: for syslog stamps, which carry none. boot_time: unix time of boot, to turn dmesg uptimes into wall
    time (learnt from a line that carries both when not given).
    """

    def __init__(self, *, year: int | None = None, boot_time: float | None = None) -> None:
        self.year = year
        self.boot_time = boot_time
        self._boot_given = boot_time is not None
        self._last_uptime: float | None = None
        self._last_month: int | None = None
        self._syslog_cache: dict[str, float] = {}
        self._prefix_cache: dict[str, tuple[float | None, str | None]] = {}
        self.year_used = False  # a syslog stamp (which carries no year) took self.year
        self._rel_base: float | None = None  # dmesg -H / delta: the time of the last line, from its date line
        self.rel_ts: float | None = None  # the time of the line `relative` last read
        self.no_base = 0  # relative lines with no date line before them: no wall time

    def relative(self, line: str) -> bool:
        """Track one line (any, GPU or not) of a relative shape (dmesg -H/-e, --time-format delta): True when it
        is one, its time in `rel_ts` (None when no date line came before it)."""
        m = _RE_REL_GAP.match(line)
        if m:
            if self._rel_base is None:
                self.no_base += 1
                self.rel_ts = None
            else:
                self._rel_base += float(m.group(1))
                self.rel_ts = self._rel_base
            return True
        m = _RE_REL_DATE.match(line)
        if m is None:
            return False
        mon = month_number(m.group(1))
        t = None
        if mon is not None and self.year is not None:
            self.year_used = True
            if self._last_month is not None and mon < self._last_month and self._last_month - mon > 6:
                self.year += 1  # December -> January
            self._last_month = mon
            t = _utc(self.year, mon, int(m.group(2)), int(m.group(3)), int(m.group(4)), 0)
        self._rel_base = self.rel_ts = t
        return True

    def read(self, prefix: str) -> Stamp:
        """The text before a message -> (wall time, uptime, host), each None when the prefix does not say."""
        if not prefix or prefix.isspace():
            return None, None, None  # a bare line, or a continuation line
        if "[" not in prefix:  # no uptime: the same prefix (one second of a journal) parses the same way
            hit = self._prefix_cache.get(prefix)
            if hit is not None:
                return hit[0], None, hit[1]
            ts0, _, host0 = self._read_slow(prefix)
            if len(self._prefix_cache) > 4096:
                self._prefix_cache.clear()
            self._prefix_cache[prefix] = (ts0, host0)
            return ts0, None, host0
        return self._read_slow(prefix)

    def _read_slow(self, prefix: str) -> Stamp:
        ts: float | None = None
        up: float | None = None
        host: str | None = None
        mb = _RE_BARE_UPTIME.match(prefix)
        if mb:  # plain dmesg: "[ 1234.567890] " and nothing else
            return self.given(None, float(mb.group(1)), None)
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
                    g = [int(mc.group(i)) for i in (6, 2, 3, 4, 5)]
                    ts = _utc(g[0], mon, g[1], g[2], g[3], g[4])
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
        return self.given(ts, up, host)

    def given(self, ts: float | None, up: float | None, host: str | None) -> Stamp:
        """A stamp read from a prefix or handed in (a journal entry, a /dev/kmsg record): absurd times dropped,
        the boot time learnt from (or applied to) the uptime."""
        if not finite_uptime(up):
            up = None  # "[99999...9.0]": not an uptime any kernel has had
        if not finite_time(ts):
            ts = None
        if up is not None:
            if self._last_uptime is not None and up < self._last_uptime - 1.0 and not self._boot_given:
                self.boot_time = None  # uptime went back: a new boot, the old offset no longer holds
            self._last_uptime = up
        if ts is not None and up is not None and not self._boot_given:
            self.boot_time = ts - up
        elif ts is None and up is not None and self.boot_time is not None:
            ts = self.boot_time + up
            if not finite_time(ts):
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
        base = _utc(self.year, mon, int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)))
        if base is None:
            return None
        ts = base + frac(m.group(6))
        if len(self._syslog_cache) > 4096:
            self._syslog_cache.clear()
        self._syslog_cache[key] = ts
        return ts
