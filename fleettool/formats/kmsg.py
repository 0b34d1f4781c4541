"""Parse kernel-log lines into GPU records: XIDs, NVSwitch SXids, fallen-off-the-bus, GSP timeouts, and the
driver's announcement lines that map a PCI id to a GPU UUID and board serial.

Reads any of the forms in which kernel lines are found (see fixtures/samples/kmsg/SOURCES.md): bare lines,
dmesg `[uptime]`, `dmesg -T` ctime, `dmesg --time-format=iso` (with or without `--decode` facility:level),
syslog / journalctl short (month names in several languages) and short-iso with the host name, Talos
`<ip>: kern: warning: [RFC3339]:`, and lines wrapped inside other tools' messages or behind launcher prefixes.
Lines the NVIDIA driver wrote (`NVRM:` and `nvidia-nvswitchN: SXid`) become GPU records, the NIC driver's (mlx5_core,
the netdev watchdog and link lines: formats/nic_lines.py) records of kind `nic`; ext4 and the rest are skipped even
when they name the same PCI bus. A NIC driver line that no pattern judges is counted (`nic.unjudged`).

A line is a prefix (time and host: formats/kmsg_prefix.py) and a body (the driver's message:
formats/kmsg_body.py); /dev/kmsg records and journal JSON entries carry their stamp outside the text
(formats/kmsg_entries.py). `KernelLogParser` splits each line and hands the parts to the two; it is pure and
stateful across lines of one stream: it carries the year for syslog lines that have none, the boot time learnt
from lines that carry both wall time and uptime, the multi-line "fallen off the bus" message, and the
serial-number line that follows an announcement.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from fleettool.formats.kmsg_body import BodyReader, KernelRecord, sxid_match
from fleettool.formats.kmsg_entries import parse_journal_entry, parse_kmsg_record
from fleettool.formats.kmsg_prefix import PrefixClock, Stamp, finite_time, finite_uptime
from fleettool.formats.nic_lines import NIC_KIND, NicReader, nic_hint, nic_start
from fleettool.model import Event

# KernelRecord and the two entry readers are imported from here by collectors/kmsg.py and ingest/read_kernel.py
__all__ = [
    "KernelLogParser",
    "KernelRecord",
    "parse_journal_entry",
    "parse_kernel_log",
    "parse_kmsg_record",
    "record_to_event",
]

MAX_LINE = 8192  # longer lines are cut: no driver message is this long


class KernelLogParser:
    """Feed lines (in order) with `feed`; records come out. Pure: no I/O, no clock.

    year: for syslog lines, which carry no year (the year of the file's context: the recording's other
    timestamps, the file's mtime). boot_time: unix time of boot, to turn dmesg uptimes into wall time
    (the live collector knows it; from files it is learnt when a line carries both).
    """

    def __init__(self, *, year: int | None = None, boot_time: float | None = None, host: str | None = None):
        self.clock = PrefixClock(year=year, boot_time=boot_time)
        self.body = BodyReader()
        self.nic = NicReader()
        self.default_host = host
        self.lineno = 0
        self.no_base_records = (
            0  # GPU lines of a relative shape (dmesg -H, delta) with no date line before them
        )
        self.no_base_line = 0  # the first of them
        self._relative: bool | None = None  # a relative shape (dmesg -H, delta); None: no `[` line seen yet

    @property
    def year_used(self) -> bool:
        """A syslog stamp (which carries no year) took the given year."""
        return self.clock.year_used

    def feed(self, line: str) -> KernelRecord | None:
        """One line -> a record, or None when the line is not a GPU message (or continues one)."""
        self.lineno += 1
        # dmesg -H and --time-format delta time a line by the gaps of every line before it, GPU or not
        # (`[  +0.1]`, `[<  0.1>]`, `[Dec 5 10:01]`): the first `[` line of the stream decides whether it is one
        rel = False
        if self._relative is not False and line[:1] == "[":
            rel = self.clock.relative(line)
            if self._relative is None:
                self._relative = rel
        if "NVRM" not in line and "SXid" not in line and "Linux version" not in line and not nic_hint(line):
            return None
        line = line.rstrip("\r\n")
        if len(line) > MAX_LINE:
            line = line[:MAX_LINE]
        rec = self._line(line, (self.clock.rel_ts, None, self.default_host) if rel else None)
        if rel and rec is not None and rec.ts is None:
            self.no_base_records += 1
            self.no_base_line = self.no_base_line or self.lineno
        return rec

    def feed_message(
        self, message: str, *, ts: float | None, uptime: float | None, host: str | None
    ) -> KernelRecord | None:
        """One kernel message whose time and host came from outside the text (a journal JSON entry, a
        /dev/kmsg record): the message is read as a bare line, with the given time."""
        self.lineno += 1
        if (
            "NVRM" not in message
            and "SXid" not in message
            and "Linux version" not in message
            and not nic_hint(message)
        ):
            return None
        message = message.split("\n", 1)[0].rstrip("\r")[:MAX_LINE]  # a multi-line message: its first line
        ts = ts if finite_time(ts) else None
        uptime = uptime if finite_uptime(uptime) else None
        return self._line(message, self.clock.given(ts, uptime, host))

    def feed_all(self, lines: Iterable[str]) -> Iterator[KernelRecord]:
        for ln in lines:
            rec = self.feed(ln)
            if rec is not None:
                yield rec

    def _stamp(self, given: Stamp | None, prefix: str) -> Stamp:
        return given if given is not None else self.clock.read(prefix)

    def _line(self, line: str, given: Stamp | None) -> KernelRecord | None:
        i = line.find("NVRM:")
        if i < 0:
            j = line.find("SXid (")
            if j >= 0:
                hit = sxid_match(line, j)
                if hit is None:
                    return None
                ts, up, host = self._stamp(given, line[: hit[0]])
                return self.body.sxid(self.lineno, line, hit[1], ts, up, host or self.default_host)
            k = line.find("Linux version ")
            if k >= 0:
                ts, up, host = self._stamp(given, line[:k])
                self.body.boot()
                self.nic.boot()
                return KernelRecord(
                    "boot", self.lineno, line, ts, up, host or self.default_host, message=line[k : k + 200]
                )
            return self._nic(line, given)
        ts, up, host = self._stamp(given, line[:i])
        host = host or self.default_host
        body = line[i + 5 :].strip()
        if body.startswith("Xid"):
            return self.body.xid(self.lineno, line, body, ts, up, host)
        return self.body.other(self.lineno, line, body, ts, up, host)

    def _nic(self, line: str, given: Stamp | None) -> KernelRecord | None:
        """A NIC driver's line (formats/nic_lines.py) -> a `nic` record, or None (not one, a deduplicated
        ACCESS_REG line, or a line no pattern judges: counted by the reader)."""
        at = nic_start(line)
        if at < 0:
            return None
        ts, up, host = self._stamp(given, line[:at])
        host = host or self.default_host
        got = self.nic.read(self.lineno, line[at:], host, ts if ts is not None else up)
        if got is None:
            return None
        detail = got.detail  # the reader's own copy
        if up is not None:
            detail["uptime"] = up
        text = line[at : at + 300]
        return KernelRecord(NIC_KIND, self.lineno, line, ts, up, host, got.pci, message=text, detail=detail)


def parse_kernel_log(
    lines: Iterable[str], *, year: int | None = None, boot_time: float | None = None, host: str | None = None
) -> list[KernelRecord]:
    """All GPU records of a stream of kernel-log lines."""
    return list(KernelLogParser(year=year, boot_time=boot_time, host=host).feed_all(lines))


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
