"""The Collector protocol and what a collection returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from fleettool.model import Event, GpuInfo, PodUse, Sample


@dataclass
class Collected:
    samples: list[Sample] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    gpus: list[GpuInfo] = field(default_factory=list)
    pods: list[PodUse] = field(default_factory=list)
    errors: int = 0  # errors met during this collection (also reported as events when they change)


class Collector(Protocol):
    id: str

    def start(self) -> bool:
        """Open the source; False (with `reason` set) when this host cannot support the collector."""
        ...

    def collect(self, now: float) -> Collected: ...

    def close(self) -> None: ...

    @property
    def reason(self) -> str | None:
        """Why the collector is not available (no driver, no permission), or None."""
        ...

    def inflight(self) -> str | None:
        """The call in progress, for the watchdog's report."""
        ...
