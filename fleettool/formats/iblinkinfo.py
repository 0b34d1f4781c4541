"""`iblinkinfo` text (infiniband-diags) parsed into ib_sysfs's port shape, for the hosts' own HCA ports. Pure.

iblinkinfo walks the whole fabric from one host and prints, node by node, each port's link:

    CA: gpu-17 mlx5_0:
          0x0002c903000d81f9      4    1[  ] ==( 4X          10.0 Gbps Active/  LinkUp)==>       2    3[  ] "sw1" ( )
    Switch: 0x0002c9020046c588 Infiniscale-IV Mellanox Technologies:
               2    5[  ] ==(                Down/ Polling)==>             [  ] "" ( )

A CA's node description is `<host> <device>` (the kernel's default, `hostname mlx5_0`, or `HCA-1` on older
stacks): the port is stored under that host, as `port=<device>/<port>`, with its state, physical state, width
and rate. iblinkinfo prints the width and the signalling rate of one lane (`4X 106.25 Gbps` is NDR, 400 Gb/s):
the lane rate is read as its data rate (IBTA's 2.5/5/10/14/25/50/100/200 Gb/s a lane) and multiplied by the
width, so the rate matches sysfs' `400 Gb/sec (4X NDR)`.

Left out, and counted for the file's report: switch ports (a switch is no node of the fleet; its port toward a
host is the host's own port seen from the other end), CAs whose description names no host (an unset
description such as `MT25408 ConnectX Mellanox Technologies`), the peer side of each link, LIDs and GUIDs.
A host's CA that is not in the output at all is not "gone": iblinkinfo reaches only what the subnet manager
sees, so no device-presence is read from it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fleettool.formats.errors import ParseIssue
from fleettool.formats.ib_sysfs import IbPort
from fleettool.formats.ib_text import rate_text
from fleettool.formats.ibstat import set_phys, set_state

# lane signalling rate (Gb/s, as iblinkinfo prints it) -> data rate of the lane (IBTA): SDR .. XDR, FDR10
LANE_DATA_RATE = {
    2.5: 2.5,
    5.0: 5.0,
    10.0: 10.0,
    10.3125: 10.0,
    14.0625: 14.0,
    25.78125: 25.0,
    53.125: 50.0,
    106.25: 100.0,
    212.5: 200.0,
}

_RE_CA = re.compile(r"^CA:\s*(.*?):\s*$")
_RE_SWITCH = re.compile(r"^Switch:\s*(0x[0-9a-fA-F]+)?\s*(.*?):\s*$")
# a port line of the default layout: [GUID] LID PORT[..] ==( LINK )==> ...
_RE_PORT = re.compile(r"^\s+(?:0x[0-9a-fA-F]+\s+)?\d+\s+(\d+)\[[^\]]*\]\s*==\((.*?)\)==>")
# the one-line layout (-l): GUID "desc" LID PORT[..] ==( LINK )==> ...
_RE_LINE = re.compile(r'^\s*0x[0-9a-fA-F]+\s+"([^"]*)"\s+\d+\s+(\d+)\[[^\]]*\]\s*==\((.*?)\)==>')
_RE_LINK = re.compile(r"^\s*(?:(\d+)X\s+([\d.]+)\s*Gbps\s+)?([A-Za-z_]+)\s*/\s*([A-Za-z]+)")
_RE_HCA = re.compile(
    r"^\s*(?P<host>[A-Za-z0-9][\w.-]*)\s+(?P<dev>(?:mlx\d|mthca|hfi\d|qib|irdma|i40iw|bnxt_re|efa|rxe|siw|ionic)\w*"
    r"|HCA-\d+)\s*$"
)


@dataclass
class LinkInfo:
    """The hosts' HCA ports, by host, and what was left out."""

    hosts: dict[str, list[IbPort]] = field(default_factory=dict)
    switch_ports: int = 0
    nameless: list[str] = field(default_factory=list)  # CA descriptions that name no host


def lane_rate(signal_gbps: float) -> float:
    for sig, data in LANE_DATA_RATE.items():
        if abs(sig - signal_gbps) <= 0.01 * sig:
            return data
    return signal_gbps


def _port(host: str, device: str, num: int, link: str, path: str, lineno: int) -> IbPort | ParseIssue:
    m = _RE_LINK.match(link)
    if m is None:
        return ParseIssue(path, lineno, f"link not understood: ({link.strip()[:60]})")
    p = IbPort(device, num)
    set_state(p, m.group(3))
    set_phys(p, m.group(4))
    if p.state is None:
        return ParseIssue(path, lineno, f"port state not understood: {m.group(3)!r}")
    if m.group(1) and m.group(2):
        width = int(m.group(1))
        p.rate_gbps = round(width * lane_rate(float(m.group(2))), 3)
        p.rate_text = rate_text(p.rate_gbps, width)
    return p


def parse_iblinkinfo(text: str, path: str = "-") -> tuple[LinkInfo, list[ParseIssue]]:
    out = LinkInfo()
    issues: list[ParseIssue] = []
    ca: tuple[str, str] | None = None  # (host, device) of the CA block the lines are under
    in_switch = in_ca = False
    seen = 0
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _RE_CA.match(line)
        if m:
            desc = m.group(1)
            hm = _RE_HCA.match(desc)
            ca = (hm.group("host"), hm.group("dev")) if hm else None
            if hm is None:
                out.nameless.append(desc)
            in_ca, in_switch = True, False
            continue
        if _RE_SWITCH.match(line):
            in_switch, in_ca, ca = True, False, None
            continue
        m = _RE_LINE.match(line)
        if m:  # -l: each line carries its node's description
            seen += 1
            hm = _RE_HCA.match(m.group(1))
            if hm is None:
                out.switch_ports += 1  # a switch, or a CA with no host in its description
                continue
            host_dev, num, link = (hm.group("host"), hm.group("dev")), int(m.group(2)), m.group(3)
        else:
            m = _RE_PORT.match(line)
            if m is None:
                continue
            seen += 1
            if in_switch or not in_ca:
                out.switch_ports += 1
                continue
            if ca is None:
                continue  # under a CA with no host: counted once, by its description
            host_dev, num, link = ca, int(m.group(1)), m.group(2)
        got = _port(host_dev[0], host_dev[1], num, link, path, lineno)
        if isinstance(got, ParseIssue):
            issues.append(got)
            continue
        out.hosts.setdefault(host_dev[0], []).append(got)
    if not seen and not issues:
        issues.append(ParseIssue(path, 0, "no '==( ... )==>' link lines: not iblinkinfo output"))
    return out, issues
