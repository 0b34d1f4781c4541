"""The NIC driver's kernel lines (mlx5_core, and the netdev watchdog / link lines any NIC driver prints): PCIe slot
power, module temperature, cable unplugged, link up / down, TX timeouts, firmware health, command timeouts and
ACCESS_REG failures, each a record of kind `nic` with `detail.what`.

Each pattern below shows the real lines it matches (fixtures/kernel-nic/, each line's source in its SOURCES.md).
The driver's own format strings, from torvalds/linux drivers/net/ethernet/mellanox/mlx5/core/:

    events.c   "Port module event: module %u, Cable %s\\n"  /  "Port module event[error]: module %u, %s, %s\\n"
    events.c   "Detected insufficient power on the PCIe slot (%uW).\\n"            (mlx5_pcie_event)
    en_main.c  netdev_info(netdev, "Link up\\n") / "Link down\\n"                 (mlx5e_update_carrier)
    health.c   "device's health compromised - reached miss count\\n", "Fatal error %u detected\\n"
    cmd.c      "%s(0x%x) timeout. Will cause a leak of a command resource\\n"
    cmd.c      "%s(0x%x) op_mod(0x%x) failed, status %s(0x%x), syndrome (0x%x), err(%d)\\n"   (mlx5_cmd_out_err)
    en_main.c  "TX timeout detected\\n"; net/sched/sch_generic.c "NETDEV WATCHDOG: ..." (before and after 6.8)

A line is `<prefix><start>` where the start (NIC_START) is the driver's device prefix (`mlx5_core 0000:0c:00.0:`,
`mlx5_core 0000:41:00.0 enp65s0f0np0:`, `infiniband mlx5_0:`), a bare mlx5 function name (`mlx5_cmd_out_err:838:(pid
1)`: lines quoted without their device), or the watchdog; the kernel-log parser reads the prefix (time, host).
`NicReader` holds what spans lines: the netdev -> PCI address of lines seen before (an old-kernel NETDEV WATCHDOG
line names only the netdev), and the ACCESS_REG windows: such a line is noise (a counter read on a restricted
function floods dmesg with it: prometheus/node_exporter#3434, leptonai/gpud#1164), so one event per device per
DEDUP_S, the lines in between counted (`deduplicated`) and given on the next window's event (`repeats_before`).
A line from the NIC driver that no pattern matches is counted (`unjudged`, and the first one kept), never dropped
in silence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NIC_KIND = "nic"
DEDUP_S = 24 * 3600.0  # ACCESS_REG failures: one event per device in this window

# what each line means (detail.what)
SLOT_POWER, MODULE_TEMP, CABLE_UNPLUGGED = "slot-power", "module-temp", "cable-unplugged"
LINK_DOWN, LINK_UP, TX_TIMEOUT = "link-down", "link-up", "tx-timeout"
HEALTH, CMD_TIMEOUT, ACCESS_REG = "health-compromised", "cmd-timeout", "access-reg"
WHATS = (
    SLOT_POWER,
    MODULE_TEMP,
    CABLE_UNPLUGGED,
    LINK_DOWN,
    LINK_UP,
    TX_TIMEOUT,
    HEALTH,
    CMD_TIMEOUT,
    ACCESS_REG,
)

_BDF = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
# Where the driver's message starts in a kernel line (what comes before it is the log's prefix):
#   mlx5_core 0000:41:00.1: Port module event: module 1, Cable unplugged
#   mlx5_core 0000:41:00.0 enp65s0f0np0: Link up
#   infiniband mlx5_0: destroy_qp_common:2367:(pid 73): mlx5_ib: modify QP 0x000724 to RESET failed
#   mlx5_cmd_out_err:838:(pid 1441871): ACCESS_REG(0x805) op_mod(0x1) failed, ...          (quoted without device)
#   NETDEV WATCHDOG: eth1 (mlx5_core): transmit queue 19 timed out                        (kernels before 6.8)
#   igc 0000:06:00.0 enp6s0: NIC Link is Down                                            (any netdev driver)
NIC_START = re.compile(
    r"mlx5_core(?: \S+){0,2}: |infiniband mlx5_\w+:|mlx5_\w+:\d+:\(pid|NETDEV WATCHDOG:"
    rf"|\b[a-z][\w-]* {_BDF} \S+: NIC Link is "
)
# the device prefix: driver, PCI address, netdev; or the IB device (mlx5_ib's prefix)
_RE_DEV = re.compile(
    rf"^(?:([a-z][\w-]*) ({_BDF})(?: ([^\s:]+))?|mlx5_core(?: ([^\s:]+))?|infiniband (mlx5_\w+)):\s*"
)
# a "func:line:(pid N): " the driver puts before its text (mlx5_core_warn and friends), or a bare "func: "
_RE_FUNC = re.compile(r"^(\w+)(?::\d+)?(?::\(pid \d+\))?:\s+")

# -- the patterns, on the text after the device prefix and the function ---------------------------------------------
#   mlx5_pcie_event:299:(pid 268269): Detected insufficient power on the PCIe slot (27W).
#   (its healthy twin "PCIe slot advertised sufficient power (75W)." matches nothing: read, not judged)
_RE_POWER = re.compile(r"Detected insufficient power on the PCIe slot \((\d+)W\)")
#   Port module event[error]: module 0, Cable error, High Temperature
_RE_MODULE_TEMP = re.compile(r"Port module event\[error\]: module (\d+), [^,]*, High Temperature")
#   Port module event: module 1, Cable unplugged
_RE_UNPLUGGED = re.compile(r"Port module event: module (\d+), Cable unplugged")
#   Link up / Link down (mlx5e_update_carrier, after "mlx5_core <pci> <netdev>:");
#   mlx5e_ethtool_set_link_ksettings:1099:(pid 4127): link up; igc 0000:06:00.0 enp6s0: NIC Link is Down
_RE_LINK = re.compile(r"^(?:NIC )?[Ll]ink (?:is )?([Uu]p|[Dd]own)\b")
#   NETDEV WATCHDOG: eth1 (mlx5_core): transmit queue 19 timed out                    (before 6.8)
#   mlx5_core 0000:65:00.0 ens15np0: NETDEV WATCHDOG: CPU: 94: transmit queue 3 timed out 5032 ms   (6.8 on)
_RE_WATCHDOG = re.compile(
    r"NETDEV WATCHDOG: (?:([^\s:]+) \(([^)]*)\): |CPU: \d+: )transmit queue (\d+) timed out(?: (\d+) ms)?"
)
#   mlx5_core 0000:13:00.1 eth1: TX timeout detected
#   mlx5_core 0000:13:00.1 eth1: TX timeout on queue: 19, SQ: 0xab6, CQ: 0xd4a, SQ Cons: 0x3fd7 SQ Prod: 0x3fe6, ...
_RE_TX = re.compile(r"^TX timeout (?:detected|on queue: (\d+))")
#   poll_health:717:(pid 0): device's health compromised - reached miss count
#   poll_health:702:(pid 930): Fatal error 1 detected
_RE_HEALTH = re.compile(r"health compromised - reached miss count|^Fatal error (\d+) detected")
#   wait_func:1008:(pid 73): 2RST_QP(0x50a) timeout. Will cause a leak of a command resource
#   cmd[3]: DESTROY_EQ(0x302) Async, timeout. Will cause a leak of a command resource            (newer cmd.c)
_RE_CMD = re.compile(
    r"(\w+)\((0x[0-9a-fA-F]+)\)(?: Async,)? .*timeout\. Will cause a leak of a command resource"
)
#   mlx5_cmd_out_err:835:(pid 18360): ACCESS_REG(0x805) op_mod(0x1) failed, status bad operation(0x2), syndrome
#   (0x9a6171), err(-22)
_RE_ACCESS_REG = re.compile(
    r"ACCESS_REG\((0x[0-9a-fA-F]+)\) op_mod\((0x[0-9a-fA-F]+)\) failed, status ([^,]*?)\s*,\s*syndrome \((0x[0-9a-fA-F]+)\)"
    r"(?:, err\((-?\d+)\))?"
)


@dataclass(slots=True)
class NicLine:
    """What one NIC line says: its meaning, the device it names, the parsed fields."""

    what: str
    pci: str | None  # as the driver printed it, with the function: 0000:0c:00.1
    detail: dict[str, object]


_RE_LINK_DEV = re.compile(rf"\b[a-z][\w-]* {_BDF} \S+$")  # the device before another driver's ": NIC Link is"


def nic_start(line: str) -> int:
    """Where the NIC driver's message (NIC_START) starts in a line, or -1: found by its fixed words first (one
    regex search over a whole journal line costs more than the rest of the line's parse)."""
    best = -1
    i = line.find("mlx5_")
    while i >= 0:
        j = i - 11 if i >= 11 and line.startswith("infiniband ", i - 11) else i
        if NIC_START.match(line, j):
            best = j
            break
        i = line.find("mlx5_", i + 5)
    w = line.find("NETDEV WATCHDOG:")
    if w >= 0 and (best < 0 or w < best):
        best = w
    k = line.find(": NIC Link is ")
    if k >= 0 and (best < 0 or k < best):
        m = _RE_LINK_DEV.search(line, 0, k)
        if m is not None:
            best = m.start()
    return best


def nic_hint(line: str) -> bool:
    """A cheap test before the regexes: may this line be a NIC driver's?"""
    return "mlx5" in line or "NETDEV WATCHDOG" in line or "NIC Link is" in line


class NicReader:
    """NIC lines -> NicLine, or None (a follow-on ACCESS_REG line within its window, or a line no pattern matches:
    each counted). State spans the lines of one stream: the netdev -> PCI map, the ACCESS_REG windows."""

    def __init__(self) -> None:
        self._netdev_pci: dict[tuple[str | None, str], str] = {}
        # (host, device) -> (start of its window: wall time or uptime, lines folded into it)
        self._access: dict[tuple[str | None, str], list[float]] = {}
        # (host, text) -> what _parse made of it
        self._cache: dict[tuple[str | None, str], tuple[str | None, str | None, dict[str, object]]] = {}
        self.unjudged = 0  # NIC driver lines read that no pattern judges
        self.first_unjudged: tuple[int, str] | None = None  # (line number, text) of the first
        self.deduplicated = 0  # ACCESS_REG lines folded into their device's event of the window

    def boot(self) -> None:
        """A `Linux version` line: a new boot, new windows (uptimes start again)."""
        self._access.clear()

    def read(self, lineno: int, text: str, host: str | None, t: float | None) -> NicLine | None:
        """`text`: the line from NIC_START on; `t`: its wall time, else its uptime, for the ACCESS_REG window.
        A text read before (a flapping port's `Link up`, an ACCESS_REG flood: texts repeat) comes from a cache; what
        spans lines (the netdev map, the windows) is kept as the full read keeps it."""
        hit = self._cache.get((host, text))
        if hit is None:
            hit = self._parse(text, host)
            if len(self._cache) >= 4096:
                self._cache.clear()
            if hit[0] != TX_TIMEOUT or hit[1] is not None:  # a watchdog line's PCI address depends on the map
                self._cache[(host, text)] = hit
        what, pci, tmpl = hit
        if what is None:
            self.unjudged += 1
            if self.first_unjudged is None:
                self.first_unjudged = (lineno, text[:200])
            return None
        detail = dict(tmpl)
        dev = pci or str(detail.get("device", ""))
        if what == ACCESS_REG and not self._first_in_window(host, dev, t, detail):
            return None
        return NicLine(what, pci, detail)

    def _parse(self, text: str, host: str | None) -> tuple[str | None, str | None, dict[str, object]]:
        """(what, PCI address, detail) of a text; what is None when no pattern judges it."""
        detail: dict[str, object] = {}
        pci: str | None = None
        netdev: str | None = None
        body = text
        m = _RE_DEV.match(text)
        if m:
            drv, pci, netdev, nd2, ibdev = m.groups()
            netdev = netdev or nd2
            if drv:
                detail["driver"] = drv
            if ibdev:
                detail["device"] = ibdev
            body = text[m.end() :]
        elif text.startswith("mlx5_") and (f := _RE_FUNC.match(text)) is not None:
            detail["function"] = f.group(1)
            body = text[f.end() :]
        mf = _RE_FUNC.match(body)
        if mf:
            detail.setdefault("function", mf.group(1))
            body = body[mf.end() :]
        if netdev:
            detail["netdev"] = netdev
            if pci:
                self._remember(host, netdev, pci)
        what = self._judge(body, detail)
        if what is None:
            return None, None, detail
        if what == TX_TIMEOUT and pci is None and isinstance(detail.get("netdev"), str):
            # an old watchdog line names only the netdev: the PCI address that netdev had
            pci = self._netdev_pci.get((host, str(detail["netdev"])))
        if pci is not None:
            detail["pci"] = pci
        detail["what"] = what
        return what, pci, detail

    def _remember(self, host: str | None, netdev: str, pci: str) -> None:
        if len(self._netdev_pci) >= 4096:
            self._netdev_pci.clear()
        self._netdev_pci[(host, netdev)] = pci

    def _first_in_window(
        self, host: str | None, dev: str, t: float | None, detail: dict[str, object]
    ) -> bool:
        """True for the first ACCESS_REG line of its device in DEDUP_S (its event carries the count of the
        window before it); False for the others, counted. A line with no time joins the window it falls in."""
        key = (host, dev)
        w = self._access.get(key)
        if w is not None and (t is None or 0 <= t - w[0] < DEDUP_S):
            w[1] += 1
            self.deduplicated += 1
            return False
        if w is not None and w[1]:
            detail["repeats_before"] = int(w[1])  # lines folded into the previous window's event
        detail["dedup_window_s"] = DEDUP_S
        if len(self._access) >= 4096:
            self._access.clear()
        self._access[key] = [t if t is not None else 0.0, 0.0]
        return True

    @staticmethod
    def _judge(body: str, detail: dict[str, object]) -> str | None:
        """The meaning of a message body (detail filled with its fields), or None."""
        if (m := _RE_ACCESS_REG.search(body)) is not None:
            detail.update(
                register=m.group(1), op_mod=m.group(2), status=m.group(3).strip(), syndrome=m.group(4)
            )
            if m.group(5) is not None:
                detail["err"] = int(m.group(5))
            return ACCESS_REG
        if (m := _RE_LINK.match(body)) is not None:
            return LINK_UP if m.group(1).lower() == "up" else LINK_DOWN
        if (m := _RE_POWER.search(body)) is not None:
            detail["slot_watts"] = int(m.group(1))
            return SLOT_POWER
        if (m := _RE_UNPLUGGED.search(body)) is not None:
            detail["module"] = int(m.group(1))
            return CABLE_UNPLUGGED
        if (m := _RE_MODULE_TEMP.search(body)) is not None:
            detail["module"] = int(m.group(1))
            return MODULE_TEMP
        if (m := _RE_WATCHDOG.search(body)) is not None:
            if m.group(1):
                detail.setdefault("netdev", m.group(1))
                detail.setdefault("driver", m.group(2))
            detail["queue"] = int(m.group(3))
            if m.group(4):
                detail["timeout_ms"] = int(m.group(4))
            return TX_TIMEOUT
        if (m := _RE_TX.match(body)) is not None:
            if m.group(1):
                detail["queue"] = int(m.group(1))
            return TX_TIMEOUT
        if (m := _RE_HEALTH.search(body)) is not None:
            if m.group(1):
                detail["fatal_error"] = int(m.group(1))
            return HEALTH
        if (m := _RE_CMD.search(body)) is not None:
            detail.update(command=m.group(1), opcode=m.group(2))
            return CMD_TIMEOUT
        return None
