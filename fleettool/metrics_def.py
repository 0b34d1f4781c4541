"""One metric of the vocabulary (fleettool.metrics holds them all)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MetricDef:
    name: str
    kind: str  # gauge | counter
    unit: str
    help: str
