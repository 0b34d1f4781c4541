"""What the InfiniBand command-line tools print, told apart by content, and `ibv_devinfo` parsed into ib_sysfs's
port shape. Pure: text in, ports and issues out.

`sniff` names the tool whose output a text is: `ibstat`, `ibstatus`, `ibv_devinfo` (`-v` when it printed
active_width/active_speed), `perfquery` (PortCounters or `-x` PortCountersExtended) or `iblinkinfo`. A pasted
prompt line before the output (`[root@gpu-17 ~]# ibstat`) is allowed; `command` reads the host and arguments from
it, since none of these tools prints the host it ran on.

`ibv_devinfo` prints `hca_id: mlx5_0` blocks with `port: 1` sections (`state: PORT_ACTIVE (4)`,
`link_layer: InfiniBand`); with `-v` also `phys_state: LINK_UP (5)`, `active_width: 4X (2)` and
`active_speed: 100.0 Gbps (64)`, the speed per lane: the rate is width x speed (4X x 100.0 = 400 Gb/s, as sysfs
says `400 Gb/sec (4X NDR)`). Without -v there is no rate and no physical state: those series are not stored,
never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fleettool.formats.errors import ParseIssue
from fleettool.formats.ib_sysfs import PHYS_STATES, PORT_STATES, IbPort

# the shell prompt and command a paste may start with: `user@host:~$ ibstat`, `[root@host ~]# perfquery -x`,
# a bare `$ ibstat`; `sudo` before the tool
_RE_PROMPT = re.compile(
    r"^\s*(?:\[?(?P<user>[\w.-]+)@(?P<host>[A-Za-z0-9][\w.-]*)(?:[:\s][^$#\]]*)?\]?\s*[$#%]|[$#%>])?"
    r"\s*(?:sudo\s+(?:-\S+\s+)*)?(?:\S*/)?(?P<tool>ibstat|ibstatus|ibv_devinfo|perfquery|iblinkinfo)"
    r"(?P<args>(?:\s.*)?)$"
)
_RE_IBSTAT = re.compile(r"^CA '[^']+'\s*$", re.M)
_RE_IBSTAT_PORT = re.compile(r"^\s+Port \d+:\s*$", re.M)
_RE_IBSTATUS = re.compile(r"^Infiniband device '[^']+' port \d+ status:\s*$", re.M)
_RE_HCA_ID = re.compile(r"^hca_id:\s*(\S+)\s*$")
_RE_DEVINFO_KEY = re.compile(r"^\s+(?:transport|fw_ver|phys_port_cnt|port|state):\s", re.M)
_RE_PERF_HEAD = re.compile(r"^# Port (?:extended )?counters: Lid \d+", re.M)
_RE_PERF_ROW = re.compile(r"^[A-Za-z][A-Za-z0-9]*:\.{2,}\s*\S+\s*$", re.M)
_RE_LINK = re.compile(r"\[[^\]]*\]\s*==\(.*\)==>")
_RE_LINK_HEAD = re.compile(r"^(?:CA|Switch): ", re.M)


@dataclass(frozen=True)
class Command:
    """A command line pasted before a tool's output."""

    tool: str
    host: str | None  # from `user@host`
    args: tuple[str, ...]

    def option(self, *names: str) -> str | None:
        """The value of `-C mlx5_0`, `--Ca=mlx5_0`, `-Cmlx5_0` (the first of `names` given)."""
        a = self.args
        for i, arg in enumerate(a):
            for n in names:
                if arg == n and i + 1 < len(a):
                    return a[i + 1]
                if n.startswith("--") and arg.startswith(n + "="):
                    return arg.split("=", 1)[1]
                if not n.startswith("--") and arg.startswith(n) and len(arg) > len(n):
                    return arg[len(n) :]
        return None


def command(text: str) -> Command | None:
    """The tool's command line among the first lines of `text` (before its output), or None."""
    for line in text.splitlines()[:5]:
        m = _RE_PROMPT.match(line)
        if m:
            return Command(m.group("tool"), m.group("host"), tuple(m.group("args").split()))
    return None


def sniff(head: str) -> tuple[str, str] | None:
    """(format key, shape) when `head` is one of the IB tools' outputs, else None."""
    if _RE_IBSTATUS.search(head):
        return "ibstat", "ibstatus"
    if _RE_IBSTAT.search(head) and _RE_IBSTAT_PORT.search(head):
        return "ibstat", "ibstat"
    lines = head.splitlines()
    if any(_RE_HCA_ID.match(ln) for ln in lines[:50]) and _RE_DEVINFO_KEY.search(head):
        return "ibv-devinfo", "ibv_devinfo -v" if "active_width:" in head else "ibv_devinfo"
    if _RE_PERF_HEAD.search(head) or len(_RE_PERF_ROW.findall(head)) >= 5:
        return "perfquery", "perfquery -x" if "# Port extended counters" in head else "perfquery"
    links = sum(1 for ln in lines if _RE_LINK.search(ln))
    if links and (_RE_LINK_HEAD.search(head) or links * 2 >= len([ln for ln in lines if ln.strip()])):
        return "iblinkinfo", "iblinkinfo"
    return None


# ibv_devinfo ---------------------------------------------------------------------------------------------------

_RE_PORT = re.compile(r"^\s+port:\s*(\d+)\s*$")
_RE_KV = re.compile(r"^\s+([a-z_]+):\s*(.*?)\s*$")
_RE_CODE = re.compile(r"^(.*?)\s*\((\d+)\)\s*$")  # `PORT_ACTIVE (4)` -> word, number
_RE_WIDTH = re.compile(r"^(\d+)X\b")
_RE_SPEED = re.compile(r"^(\d+(?:\.\d+)?)\s*Gbps\b")
_FAILED = ("No IB devices found", "Failed to get IB devices list", "Failed to open device", "Failed to query")


def _coded(value: str) -> tuple[int | None, str]:
    m = _RE_CODE.match(value)
    return (int(m.group(2)), m.group(1)) if m else (None, value)


def rate_text(rate_gbps: float, width: int | None) -> str:
    """The sysfs way of writing a rate, so one width parser reads every source: `400 Gb/sec (4X)`."""
    return f"{rate_gbps:g} Gb/sec ({width}X)" if width else f"{rate_gbps:g} Gb/sec"


def _finish(port: IbPort, width: int | None, speed: float | None) -> None:
    if width is not None and speed is not None:
        port.rate_gbps = round(width * speed, 3)
        port.rate_text = rate_text(port.rate_gbps, width)


def parse_ibv_devinfo(text: str, path: str = "-") -> tuple[list[IbPort], list[ParseIssue]]:
    """Every `port:` section of every `hca_id:` block. An error line of the tool is an issue naming its line."""
    ports: list[IbPort] = []
    issues: list[ParseIssue] = []
    device: str | None = None
    port: IbPort | None = None
    width: int | None = None
    speed: float | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if any(line.strip().startswith(f) for f in _FAILED):
            issues.append(ParseIssue(path, lineno, f"ibv_devinfo failed: {line.strip()[:120]}"))
            continue
        m = _RE_HCA_ID.match(line)
        if m:
            if port is not None:
                _finish(port, width, speed)
            device, port = m.group(1), None
            continue
        m = _RE_PORT.match(line)
        if m:
            if port is not None:
                _finish(port, width, speed)
            if device is None:
                issues.append(ParseIssue(path, lineno, "a port: line before any hca_id: line"))
                port = None
                continue
            port, width, speed = IbPort(device, int(m.group(1))), None, None
            ports.append(port)
            continue
        m = _RE_KV.match(line)
        if m is None or port is None:
            continue
        key, value = m.group(1), m.group(2)
        if key == "state":
            num, word = _coded(value)
            if num is None or num not in PORT_STATES:
                issues.append(ParseIssue(path, lineno, f"port state not understood: {value!r}"))
                continue
            port.state, port.state_name = num, PORT_STATES[num]
        elif key == "phys_state":
            num, word = _coded(value)
            if num is None:
                issues.append(ParseIssue(path, lineno, f"physical state not understood: {value!r}"))
                continue
            port.phys_state, port.phys_state_name = num, PHYS_STATES.get(num, word)
        elif key == "link_layer":
            port.link_layer = value
        elif key == "active_width":
            w = _RE_WIDTH.match(value)
            width = int(w.group(1)) if w else None
        elif key == "active_speed":
            s = _RE_SPEED.match(value)
            speed = float(s.group(1)) if s else None
            if s is None:
                issues.append(ParseIssue(path, lineno, f"active_speed not understood: {value!r}"))
    if port is not None:
        _finish(port, width, speed)
    if not ports and not issues:
        issues.append(ParseIssue(path, 0, "no hca_id/port blocks: not ibv_devinfo output"))
    return ports, issues
