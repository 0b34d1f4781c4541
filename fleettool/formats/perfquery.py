"""`perfquery` text (infiniband-diags) parsed into ib_sysfs's port shape: the port's counters under the kernel's
sysfs file names, so they map onto the same metrics (fabric_samples.counter_samples) and saturate at the same
widths. Pure: text in, ports and issues out.

perfquery prints one block per port read: `# Port counters: Lid 10 port 1 (CapMask: 0x5300)` then
`SymbolErrorCounter:..............0` rows (PortCounters, IBTA v1.3 table 247: fixed widths, 4 to 32 bits, that
stop at their maximum), or with `-x` `# Port extended counters: ...` (PortCountersExtended: 64-bit counters).
Older infiniband-diags wrote short names (`SymbolErrors`, `LinkDowned`, `XmtDiscards`); both are read.

perfquery names the LID, not the RDMA device: the device is the caller's (a `-C mlx5_0` on a pasted command
line), else `lid<N>`. `# Port counters: Lid 1 all ports` (`-a`) is a sum over the node's ports, no port's own
reading: it is an issue, not stored.
"""

from __future__ import annotations

import re

from fleettool.formats.errors import ParseIssue
from fleettool.formats.ib_sysfs import LEGACY_WIDTHS, Counter, IbPort, is_saturated

# perfquery's row names (current, then infiniband-diags 1.4's short ones) -> the kernel's sysfs file names
PERFQUERY_NAMES: dict[str, str] = {
    "SymbolErrorCounter": "symbol_error",
    "LinkErrorRecoveryCounter": "link_error_recovery",
    "LinkDownedCounter": "link_downed",
    "PortRcvErrors": "port_rcv_errors",
    "PortRcvRemotePhysicalErrors": "port_rcv_remote_physical_errors",
    "PortRcvSwitchRelayErrors": "port_rcv_switch_relay_errors",
    "PortXmitDiscards": "port_xmit_discards",
    "PortXmitConstraintErrors": "port_xmit_constraint_errors",
    "PortRcvConstraintErrors": "port_rcv_constraint_errors",
    "LocalLinkIntegrityErrors": "local_link_integrity_errors",
    "ExcessiveBufferOverrunErrors": "excessive_buffer_overrun_errors",
    "VL15Dropped": "VL15_dropped",
    "PortXmitWait": "port_xmit_wait",
    "PortXmitData": "port_xmit_data",
    "PortRcvData": "port_rcv_data",
    "PortXmitPkts": "port_xmit_packets",
    "PortRcvPkts": "port_rcv_packets",
    "PortUnicastXmitPkts": "unicast_xmit_packets",
    "PortUnicastRcvPkts": "unicast_rcv_packets",
    "PortMulticastXmitPkts": "multicast_xmit_packets",
    "PortMulticastRcvPkts": "multicast_rcv_packets",
    # infiniband-diags 1.4
    "SymbolErrors": "symbol_error",
    "LinkRecovers": "link_error_recovery",
    "LinkDowned": "link_downed",
    "RcvErrors": "port_rcv_errors",
    "RcvRemotePhysErrors": "port_rcv_remote_physical_errors",
    "RcvSwRelayErrors": "port_rcv_switch_relay_errors",
    "XmtDiscards": "port_xmit_discards",
    "XmtConstraintErrors": "port_xmit_constraint_errors",
    "RcvConstraintErrors": "port_rcv_constraint_errors",
    "LinkIntegrityErrors": "local_link_integrity_errors",
    "ExcBufOverrunErrors": "excessive_buffer_overrun_errors",
    "XmtWait": "port_xmit_wait",
    "XmtData": "port_xmit_data",
    "RcvData": "port_rcv_data",
    "XmtPkts": "port_xmit_packets",
    "RcvPkts": "port_rcv_packets",
}
# rows that are no counter: the port and counter selects, capability masks, QP1Dropped (no sysfs file)
_NOT_COUNTERS = frozenset({"PortSelect", "CounterSelect", "CounterSelect2", "QP1Dropped"})
_EXT_MAX = 2**64 - 1

_RE_HEAD = re.compile(r"^# Port (extended )?counters: Lid (\d+) (?:port (\d+)|(all ports))")
_RE_ROW = re.compile(r"^([A-Za-z][A-Za-z0-9]*):\.+\s*(\S+)\s*$")


def _counter(name: str, raw: str, extended: bool) -> Counter | None:
    try:
        value = int(raw, 0)
    except ValueError:
        return None
    if extended:  # PortCountersExtended: 64 bits for every counter it carries
        return Counter(value, None, value >= _EXT_MAX, 64)
    return Counter(value, None, is_saturated(name, value), LEGACY_WIDTHS.get(name))


def parse_perfquery(
    text: str, path: str = "-", device: str | None = None
) -> tuple[list[IbPort], list[ParseIssue]]:
    """One IbPort per port read (`device`, else `lid<N>`), its counters keyed by sysfs file name. A port read
    both ways (perfquery and perfquery -x in one file) is one port: the 64-bit value wins."""
    ports: dict[tuple[str, int], IbPort] = {}
    extended_seen: dict[tuple[str, int], set[str]] = {}
    issues: list[ParseIssue] = []
    port: IbPort | None = None
    extended = False
    unnamed = 0  # rows with no header before them (a paste that lost its first line)
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s:
            continue
        m = _RE_HEAD.match(s)
        if m:
            extended = bool(m.group(1))
            if m.group(4):
                issues.append(
                    ParseIssue(
                        path, lineno, "counters of all ports summed (-a): no port's own reading, not stored"
                    )
                )
                port = None
                continue
            dev = device or f"lid{m.group(2)}"
            key = (dev, int(m.group(3)))
            port = ports.setdefault(key, IbPort(*key))
            continue
        m = _RE_ROW.match(s)
        if m is None:
            if s.startswith(("ibwarn:", "ibpanic:")) or "failed" in s.lower():
                issues.append(ParseIssue(path, lineno, f"perfquery failed: {s[:120]}"))
            continue
        row, raw = m.group(1), m.group(2)
        if row in _NOT_COUNTERS:
            continue
        if port is None:
            unnamed += 1
            continue
        name = PERFQUERY_NAMES.get(row)
        if name is None:
            continue  # a counter with no sysfs twin (PortLocalPhysicalErrors, ...): no metric reads it
        c = _counter(name, raw, extended)
        if c is None:
            issues.append(ParseIssue(path, lineno, f"{row}: not an integer: {raw[:40]!r}"))
            continue
        seen = extended_seen.setdefault((port.device, port.port), set())
        if extended:
            seen.add(name)
        elif name in seen:
            continue  # the -x value of this counter is already kept
        port.counters[name] = c
    if unnamed:
        issues.append(
            ParseIssue(
                path, 0, f"{unnamed} counter rows before any '# Port counters: Lid N port P' line: not stored"
            )
        )
    if not ports and not issues:
        issues.append(ParseIssue(path, 0, "no '# Port counters' blocks: not perfquery output"))
    return list(ports.values()), issues
