"""The fabric collector: InfiniBand / RoCE ports from sysfs (`--sysfs-root`, default /sys, standing in for /sys as
node_exporter's `--path.sysfs` does: the ports are under ROOT/class/infiniband).

Two tiers, each on monotonic time (as dcgm_exporter.py schedules its scrapes):
- every tick (1 s): each port's `state`, `phys_state`, `rate` and `link_layer` -- 4 small files a port, opened
  one by one (re-reading the whole tree with formats.ib_sysfs.read_ib_sysfs each second would read every counter
  file too; bench/fabric_latency.py measures both) -- as collectors.fabric_samples.state_samples, and
  `ib_device_present` for every device seen (DevicePresence: a NIC gone from sysfs reads 0);
- every 10 s: the error counters of metrics.IB_COUNTER_METRICS (`counters/` and `hw_counters/`) as
  fabric_samples.counter_samples, `carrier_changes` of the netdevs under each RDMA device
  (ROOT/class/infiniband/<dev>/device/net/<name>/carrier_changes) as `net_carrier_changes_total`
  (sub=netdev=<name>), each watched device's PCIe link width (collectors/fabric_pcie: `nic_pcie_width_lanes`,
  `nic_pcie_width_max_lanes`) and each RoCE port's routable RoCE v2 GIDs (collectors/fabric_gids:
  `ib_port_roce_v2_gids`).

Which ports: physical functions only (a device with `device/physfn` is a virtual function: skipped, named once in
an event), less those `--fabric-exclude PATTERN` matches (fnmatch on `<device>` or `<device>/<port>`, e.g.
`mlx5_bond_*` for a management NIC), named once in an event as skipped by configuration.

What cannot be read is unknown, never 0 (fabric_samples drops it), and said once as an agent event naming the file
and why (collectors/fabric_notices.py): an unreadable counter (`N/A (no PMA)`, permission), a counter stuck at its
width's maximum (saturated: its increments can no longer be seen), a counter that dropped within this boot (reset).
A file that fails with EINVAL is not read again until the agent restarts: on restricted ConnectX-7 functions each
such read fails in the firmware's ACCESS_REG command and floods dmesg (node_exporter #3434, gpud #1164).

On a node without ROOT/class/infiniband the collector is not available (`agent_collector_available=0`, said once
at start) and looks again every 60 s.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

from fleettool.collectors.base import Collected
from fleettool.collectors.fabric_gids import gid_samples
from fleettool.collectors.fabric_notices import Notices
from fleettool.collectors.fabric_pcie import pcie_samples
from fleettool.collectors.fabric_samples import DevicePresence, counter_samples, state_samples
from fleettool.collectors.registry import CollectorConfig, CollectorConfigError
from fleettool.formats.ib_sysfs import (
    Counter,
    IbPort,
    IbSysfs,
    parse_numbered,
    parse_rate,
    read_counter,
)
from fleettool.metrics import IB_COUNTER_METRICS
from fleettool.model import Event, EventKind, Sample
from fleettool.sources.kmsg_boot import BOOT_ID_PATH, read_boot_id

RETRY_S = 60.0  # a node without RDMA devices: look again this often (a driver loaded later)
COUNTERS_EVERY_S = 10.0
STATE_FILES = ("state", "phys_state", "rate", "link_layer")


def read_small(path: str) -> tuple[str | None, str | None]:
    """A sysfs attribute's text, stripped: (text, None) or (None, why) -- `invalid argument (EINVAL)` as
    formats.ib_sysfs words it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        return None, _why(e)
    try:
        data = os.read(fd, 4096)
    except OSError as e:
        return None, _why(e)
    finally:
        os.close(fd)
    text = data.decode("utf-8", "replace").strip()
    return (text, None) if text else (None, "empty")


def _why(e: OSError) -> str:
    if e.errno == errno.EINVAL:
        return "invalid argument (EINVAL)"
    if e.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return e.strerror or type(e).__name__


@dataclass
class PortFiles:
    """One watched port: its directory and, once listed, its counter files (by `counters/<name>` key)."""

    device: str
    port: int
    path: str
    counter_files: dict[str, Path] | None = None  # key -> path (made once); None until the first counter read

    @property
    def key(self) -> str:
        return f"{self.device}/{self.port}"


@dataclass
class DeviceFiles:
    name: str
    ports: list[PortFiles] = field(default_factory=list)
    netdevs: str = ""  # ROOT/class/infiniband/<dev>/device/net


class FabricCollector:
    id = "fabric"

    def __init__(
        self,
        node: str,
        root: str | os.PathLike[str] = "/sys",
        exclude: Iterable[str] = (),
        *,
        counters_every_s: float = COUNTERS_EVERY_S,
        mono: Callable[[], float] = time.monotonic,
        boot_id_path: str = BOOT_ID_PATH,
    ) -> None:
        self.node = node
        self.root = Path(root)
        self.base = str(self.root / "class" / "infiniband")
        self.exclude = tuple(exclude)
        self.counters_every_s = counters_every_s
        self.mono = mono
        self.boot_id = read_boot_id(boot_id_path) or ""  # counters reset with the boot (notices' baseline)
        self._reason: str | None = None
        self._inflight: str | None = None
        self._last_try = -1e18
        self._last_counters = -1e18
        self._devices: dict[str, DeviceFiles | None] = {}  # None: not watched (a VF, excluded)
        self.presence = DevicePresence()
        self.notices = Notices(node, self.boot_id)
        self.reads = 0  # files opened, for the bench

    @property
    def reason(self) -> str | None:
        return self._reason

    def inflight(self) -> str | None:
        return self._inflight

    def start(self) -> bool:
        self._last_try = self.mono()
        if not os.path.isdir(self.base):
            self._reason = (
                f"{self.base}: no such directory (no InfiniBand/RoCE devices on this node, or the driver "
                "is not loaded)"
            )
            return False
        self._reason = None
        return True

    def close(self) -> None:
        pass

    # -- discovery ----------------------------------------------------------------------------------------
    def _excluded(self, name: str) -> str | None:
        return next((p for p in self.exclude if fnmatchcase(name, p)), None)

    def _scan(self, now: float, out: Collected) -> list[DeviceFiles]:
        """The watched devices now in sysfs; a device seen for the first time is classified (and named in an
        event when it is skipped). One gone and back is classified again (a driver reload)."""
        try:
            names = sorted(e.name for e in os.scandir(self.base))
        except OSError:
            names = []  # the whole class gone (driver unloaded): every device reads absent
        for gone in set(self._devices) - set(names):
            del self._devices[gone]
        watched = []
        for name in names:
            if name not in self._devices:
                self._devices[name] = self._classify(name, now, out)
            dev = self._devices[name]
            if dev is not None:
                watched.append(dev)
        return watched

    def _classify(self, name: str, now: float, out: Collected) -> DeviceFiles | None:
        d = os.path.join(self.base, name)
        if pat := self._excluded(name):
            self.notices.skipped(out, now, name, f"skipped by configuration (--fabric-exclude {pat})")
            return None
        physfn = os.path.join(d, "device", "physfn")
        if os.path.lexists(physfn):
            self.notices.skipped(
                out, now, name, f"virtual function ({physfn} exists): its physical function is watched"
            )
            return None
        dev = DeviceFiles(name, netdevs=os.path.join(d, "device", "net"))
        try:
            entries = sorted(
                (int(e.name), e.path) for e in os.scandir(os.path.join(d, "ports")) if e.name.isdigit()
            )
        except OSError as e:
            self.notices.once(out, now, f"{name}/ports", f"{name}: no ports read: {_why(e)}")
            return dev
        for num, path in entries:
            if pat := self._excluded(f"{name}/{num}"):
                self.notices.skipped(
                    out, now, f"{name}/{num}", f"skipped by configuration (--fabric-exclude {pat})"
                )
                continue
            dev.ports.append(PortFiles(name, num, path))
        return dev

    # -- reads --------------------------------------------------------------------------------------------
    def _read_state(self, pf: PortFiles, now: float, out: Collected) -> IbPort:
        port = IbPort(pf.device, pf.port)
        for attr in STATE_FILES:
            self._inflight = f"read {pf.path}/{attr}"
            text, why = read_small(f"{pf.path}/{attr}")
            self.reads += 1
            self.notices.state_file(out, now, pf.key, attr, f"{pf.path}/{attr}", why)
            if text is None:
                continue
            if attr == "state":
                port.state, port.state_name = parse_numbered(text)
            elif attr == "phys_state":
                port.phys_state, port.phys_state_name = parse_numbered(text)
            elif attr == "rate":
                port.rate_text, port.rate_gbps = text, parse_rate(text)
            else:
                port.link_layer = text
        return port

    def _list_counters(self, pf: PortFiles) -> dict[str, Path]:
        files: dict[str, Path] = {}
        for sub in ("counters", "hw_counters"):
            try:
                names = [e.name for e in os.scandir(f"{pf.path}/{sub}")]
            except OSError:
                continue
            files.update(
                {
                    f"{sub}/{n}": Path(f"{pf.path}/{sub}/{n}")
                    for n in sorted(names)
                    if f"{sub}/{n}" in IB_COUNTER_METRICS
                }
            )
        return files

    def _read_counters(self, pf: PortFiles, port: IbPort, now: float, out: Collected) -> None:
        if pf.counter_files is None:
            pf.counter_files = self._list_counters(pf)
        for key, path in pf.counter_files.items():
            if self.notices.is_blocked(path):
                c = Counter(None, "invalid argument (EINVAL): not read again until the agent restarts")
            else:
                self._inflight = f"read {path}"
                c = read_counter(path)
                self.reads += 1
            sub, _, name = key.partition("/")
            (port.counters if sub == "counters" else port.hw_counters)[name] = c
        self.notices.counters(out, now, port, pf.counter_files)

    def _carrier(self, dev: DeviceFiles, now: float, out: Collected) -> None:
        try:
            names = sorted(e.name for e in os.scandir(dev.netdevs))
        except OSError:
            return  # no netdev under this device (an IB port without IPoIB): nothing to read
        for name in names:
            path = f"{dev.netdevs}/{name}/carrier_changes"
            self._inflight = f"read {path}"
            text, why = read_small(path)
            self.reads += 1
            value = None
            if text is not None:
                try:
                    value = int(text)
                except ValueError:
                    why = f"not an integer: {text!r}"
            self.notices.carrier(out, now, name, path, why if value is None else None)
            if value is not None:
                out.samples.append(
                    Sample(
                        now,
                        self.node,
                        None,
                        None,
                        "net_carrier_changes_total",
                        float(value),
                        f"netdev={name}",
                    )
                )

    # -- collection ---------------------------------------------------------------------------------------
    def collect(self, now: float) -> Collected:
        out = Collected()
        if self._reason is not None:
            if self.mono() - self._last_try < RETRY_S or not self.start():
                return out
            out.events.append(
                Event(
                    now, self.node, EventKind.AGENT.value, f"fabric: {self.base} is there now", source=self.id
                )
            )
        t = self.mono()
        counters_due = t - self._last_counters >= self.counters_every_s
        if counters_due:
            self._last_counters = t
        try:
            devices = self._scan(now, out)
            ports = []
            for dev in devices:
                for pf in dev.ports:
                    port = self._read_state(pf, now, out)
                    out.samples.extend(state_samples(port, self.node, now))
                    if counters_due:
                        self._read_counters(pf, port, now, out)
                        out.samples.extend(counter_samples(port, self.node, now))
                    ports.append(port)
                if counters_due:
                    self._carrier(dev, now, out)
            if counters_due:  # the HCAs' PCIe links and the RoCE ports' GID tables, in the counters' tier
                self._inflight = f"read the PCIe widths and GID tables under {self.base}"
                out.samples.extend(pcie_samples(self.root, sorted({p.device for p in ports}), self.node, now))
                out.samples.extend(gid_samples(self.root, ports, self.node, now))
            out.samples.extend(self.presence.samples(IbSysfs(ports=ports), self.node, now))
        finally:
            self._inflight = None
        return out


def from_config(cfg: CollectorConfig) -> FabricCollector | None:
    """The registry's factory: ports under `--sysfs-root` (default /sys), less `--fabric-exclude`."""
    root = Path(cfg.sysfs_root)
    if not root.is_dir():
        what = "no such directory" if not root.exists() else "not a directory"
        raise CollectorConfigError(f"{root}: {what} (--sysfs-root)")
    return FabricCollector(cfg.node, root, cfg.fabric_exclude)
