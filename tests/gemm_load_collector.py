"""A collector added the way CONTRIBUTING.md says: this one file plus one `register_collector` line.

It replays the GEMM throughput recorded with the H200 fixture (fixtures/h200-gemm/gemm-load.txt, lines of
`TS DTYPE TFLOPS TFLOP/s`) as a gemm_tflops gauge, one line per tick; tests/test_collector_registry.py
registers it and runs it through the registry, the agent and the CLI flags.
"""

from __future__ import annotations

from pathlib import Path

from fleettool.collectors.base import Collected
from fleettool.collectors.registry import CollectorConfig
from fleettool.model import Sample
from tests.conftest import FIXTURES


class GemmLoadCollector:
    id = "gemm-load"

    def __init__(self, node: str, path: Path = FIXTURES / "h200-gemm" / "gemm-load.txt") -> None:
        self.node, self.path = node, path
        self.lines: list[str] = []
        self._reason: str | None = None

    @property
    def reason(self) -> str | None:
        return self._reason

    def inflight(self) -> str | None:
        return f"reading {self.path}"

    def start(self) -> bool:
        try:
            self.lines = self.path.read_text().splitlines()
        except OSError as e:
            self._reason = f"{self.path}: {e.strerror}"
            return False
        self._reason = None
        return True

    def collect(self, now: float) -> Collected:
        if not self.lines:  # played to the end
            return Collected()
        _ts, dtype, tflops, _unit = self.lines.pop(0).split()
        sample = Sample(now, self.node, None, None, "gemm_tflops", float(tflops), f"dtype={dtype}")
        return Collected(samples=[sample])

    def close(self) -> None:
        self.lines = []


def from_config(cfg: CollectorConfig) -> GemmLoadCollector:
    return GemmLoadCollector(cfg.node)
