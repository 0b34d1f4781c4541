"""Kernel messages that come framed, with their time outside the text: /dev/kmsg records and `journalctl -o json`
entries. Each is split into the message and its stamp; the message is then read as a bare line
(KernelLogParser.feed_message).

/dev/kmsg (Documentation/ABI/testing/dev-kmsg in the kernel tree): one record per read(), `pri,seq,usec,flags;text`,
followed by ` KEY=value` dictionary lines, e.g. (fixtures/formats/kmsg/dev-kmsg.txt)

    4,1535,6781741548779,-;NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off ...
    6,1532,12104551,-;mlx5_core 0000:ab:00.1: mlx5e_ethtool_set_link_ksettings:1099:(pid 4127): link up
     SUBSYSTEM=pci

journalctl -o json (systemd.journal-fields(7)): one JSON object a line, e.g. (fixtures/formats/kmsg/
journalctl-k-json.jsonl)

    {..., "__REALTIME_TIMESTAMP":"1764675527548779", ..., "_HOSTNAME":"worker4", "_SOURCE_MONOTONIC_TIMESTAMP":
     "226135892", "MESSAGE":"NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen ..."}
"""

from __future__ import annotations

import json

from fleettool.formats.kmsg_prefix import finite_time, finite_uptime


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
        ts if finite_time(ts) else None,
        up if finite_uptime(up) else None,
        host if isinstance(host, str) and host else None,
    )
