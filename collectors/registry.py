"""The collector registry: every collector's name, whether it runs by default, and the factory that makes it.

Modelled on node_exporter's `registerCollector(name, isDefaultEnabled, factory)` (prometheus/node_exporter,
collector/collector.go): one table makes both the factory map that `build` uses and the `--collector NAME` /
`--no-collector NAME` flags of `fleettool agent` and `fleettool record` (their help and the names they accept).

A factory takes the run's `CollectorConfig` and returns a Collector, or None when the run's options switch it
off (`--kmsg off`, `--dcgm-exporter off`). It raises `CollectorConfigError` for options that cannot work (a
`--kmsg` path that does not exist). A factory named as "module:function" is imported only when that collector
is built, so listing the flags imports neither pyarrow nor a driver binding.

Adding a collector is one new module under collectors/ (the class and its `from_config(cfg)`) and one
`register_collector` line at the end of this file.

Beyond the Collector protocol, a collector may declare `availability_metric` (`ReportsAvailability`): the agent
then also reports its availability as that node-level gauge (the NVML collector's `agent_nvml_available`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from fleettool.collectors.base import Collector

if TYPE_CHECKING:
    from fleettool.sources.base import GpuSource
    from fleettool.sources.kmsg_boot import KmsgResume


@dataclass(frozen=True)
class CollectorConfig:
    """What one agent or record run tells its collectors; each factory reads the fields it needs."""

    node: str
    gpu_source: GpuSource | None = None  # live NVML or the fake; None: no GPU source in this run
    interval_s: float = 1.0  # the agent's tick, and the NVML collector's fast tier
    expected_gpus: int | None = None  # --expect-gpus; None: NVML's count at start, or known_gpus if larger
    known_gpus: int = 0  # GPUs this node's store has in its inventory (a GPU that fell off before a restart)
    all_tiers_every_s: float | None = None  # sample every NVML tier this often (record --all-tiers-every)
    kmsg: str = "auto"  # --kmsg: auto, kmsg, journal, off, or a path
    dcgm_url: str = "off"  # --dcgm-exporter: the URL to scrape, or off
    kmsg_resume: KmsgResume | None = None  # where the store left off in this boot's kernel log
    sysfs_root: str = "/sys"  # --sysfs-root: stands in for /sys (node_exporter's --path.sysfs)
    fabric_exclude: tuple[str, ...] = ()  # --fabric-exclude: fnmatch patterns on <device> or <device>/<port>


Factory = Callable[[CollectorConfig], Collector | None]


class CollectorConfigError(ValueError):
    """A collector's options cannot work; the message is one line naming the option."""


class UnknownCollector(ValueError):
    """A name that no collector is registered under; the message lists the known ones."""

    def __init__(self, unknown: Iterable[str]) -> None:
        self.unknown = sorted(set(unknown))
        super().__init__(
            f"unknown collector {', '.join(self.unknown)} (one of {', '.join(sorted(REGISTRY))})"
        )


@dataclass(frozen=True)
class Registration:
    name: str
    default_enabled: bool
    factory: Factory | str  # a callable, or "module:function" imported when the collector is built

    def make(self, cfg: CollectorConfig) -> Collector | None:
        factory = self.factory
        if isinstance(factory, str):
            module, _, attr = factory.partition(":")
            factory = getattr(importlib.import_module(module), attr)
        collector = factory(cfg)
        if collector is not None and collector.id != self.name:  # the agent's health metrics use the id
            raise ValueError(
                f"collector {self.name!r}: its factory made a collector with id {collector.id!r}"
            )
        return collector


@runtime_checkable
class ReportsAvailability(Protocol):
    """A collector that also reports its availability as a node-level gauge of its own (1 up, 0 not)."""

    availability_metric: str


REGISTRY: dict[str, Registration] = {}  # by name, in registration order (the order collectors run in)


def register_collector(name: str, default_enabled: bool, factory: Factory | str) -> None:
    """Make a collector known: its flags, its place in the run order, and how to build it."""
    if name in REGISTRY:
        raise ValueError(f"collector {name!r} is already registered")
    REGISTRY[name] = Registration(name, default_enabled, factory)


def names() -> list[str]:
    return list(REGISTRY)


def check_names(given: Iterable[str]) -> None:
    """Raise UnknownCollector for any name not registered."""
    unknown = set(given) - set(REGISTRY)
    if unknown:
        raise UnknownCollector(unknown)


def select(
    enable: Iterable[str] = (), disable: Iterable[str] = (), defaults: Iterable[str] | None = None
) -> list[str]:
    """The collectors a run builds, in registration order: `defaults` (the default-enabled ones when None),
    plus `enable`, less `disable`. Unknown names raise UnknownCollector."""
    on, off = set(enable), set(disable)
    base = {r.name for r in REGISTRY.values() if r.default_enabled} if defaults is None else set(defaults)
    check_names(on | off | base)
    return [n for n in REGISTRY if (n in base or n in on) and n not in off]


def build(cfg: CollectorConfig, selected: Iterable[str]) -> list[Collector]:
    """The selected collectors, made from `cfg`; those whose factory says not applicable are left out."""
    chosen = set(selected)
    check_names(chosen)
    made = (r.make(cfg) for r in REGISTRY.values() if r.name in chosen)
    return [c for c in made if c is not None]


# -- the built-in collectors, in the order they run ---------------------------------------------------------
register_collector("nvml", True, "fleettool.collectors.nvml:from_config")
register_collector("kmsg", True, "fleettool.collectors.kmsg:from_config")
register_collector("dcgm-exporter", True, "fleettool.collectors.dcgm_exporter:from_config")
register_collector("fabric", True, "fleettool.collectors.fabric:from_config")
