"""`--expect-gpus` by default: the larger of what NVML reports at start and what the node's store has in its
inventory, so NodeMissingGpus (gpus < gpus_expected) has its reference in a DaemonSet that sets nothing, and a
restart after a GPU fell off still misses that GPU."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleettool.collectors.nvml import NvmlCollector
from fleettool.sources.base import Tier
from fleettool.sources.fake import FakeSource, parse_injection
from tests.test_agent import AgentProcess

FAKE = ("--source", "fake", "--gpus", "4", "--kmsg", "off", "--dcgm-exporter", "off", "--no-rules")


def _counts(gpus: int, missing: bool, **kw: int | None) -> tuple[float, float | None]:
    """(gpu_count, gpu_count_expected) of the NVML collector's first collection over the fake source."""
    src = FakeSource(gpus=gpus, inject=[parse_injection("missing-gpu")] if missing else [])
    c = NvmlCollector(src, "n", **kw)  # type: ignore[arg-type]
    try:
        assert c.start()
        out = c.collect(time.time())
    finally:
        c.close()
    node = {s.metric: s.value for s in out.samples if s.gpu is None}
    return node["gpu_count"], node.get("gpu_count_expected")


@pytest.mark.parametrize(
    ("gpus", "missing", "kw", "want"),
    [
        (4, False, {}, (4.0, 4.0)),  # a fresh node: what NVML sees at start
        (4, True, {}, (3.0, 3.0)),  # fell off before the first start, no history: nothing to miss it by
        (4, True, {"known_gpus": 4}, (3.0, 4.0)),  # fell off before a restart: the store remembers 4
        (4, False, {"known_gpus": 2}, (4.0, 4.0)),  # a store that knew fewer never lowers NVML's count
        (4, True, {"expected_gpus": 8, "known_gpus": 4}, (3.0, 8.0)),  # --expect-gpus wins over both
        (4, False, {"expected_gpus": 2}, (4.0, 2.0)),
    ],
)
def test_expected_gpus(gpus: int, missing: bool, kw: dict[str, int], want: tuple[float, float]) -> None:
    assert _counts(gpus, missing, **kw) == want


def test_the_count_is_fixed_at_the_first_open_not_followed_down() -> None:
    src = FakeSource(gpus=4, inject=[parse_injection("missing-gpu@after=1")])
    tiers = {Tier.FAST: 1.0, Tier.MEDIUM: 1.0, Tier.DEAR: 60.0, Tier.STATIC: 600.0}  # the count each second
    c = NvmlCollector(src, "n", tier_s=tiers)
    try:
        assert c.start()
        first = c.collect(time.time())
        time.sleep(1.2)  # the GPU falls off
        later = c.collect(time.time())
    finally:
        c.close()

    def node(out: object) -> dict[str, float]:
        return {s.metric: s.value for s in out.samples if s.gpu is None}  # type: ignore[attr-defined]

    assert node(first)["gpu_count"] == node(first)["gpu_count_expected"] == 4.0
    assert node(later)["gpu_count"] == 3.0 and node(later)["gpu_count_expected"] == 4.0


def _gauge(body: str, name: str) -> float:
    (line,) = [ln for ln in body.splitlines() if ln.startswith(name + "{")]
    return float(line.rsplit(" ", 1)[1])


def _run(db: Path, *extra: str) -> tuple[float, float]:
    """A real agent's /metrics: (fleettool_gpus, fleettool_gpus_expected), then SIGTERM (it flushes)."""
    with AgentProcess("--db", str(db), "--node", "gpu-22", *FAKE, *extra) as ag:
        body = ag.wait_metrics("fleettool_gpus{", "fleettool_gpus_expected{")
        rc, err, _ = ag.stop()
    assert rc == 0, err
    return _gauge(body, "fleettool_gpus"), _gauge(body, "fleettool_gpus_expected")


def test_a_restart_after_a_gpu_fell_off_still_expects_it(tmp_path: Path) -> None:
    db = tmp_path / "a.duckdb"
    assert _run(db) == (4.0, 4.0)  # no --expect-gpus: the count NVML reports at start
    # restarted with GPU 3 gone: NVML says 3, the store's inventory of gpu-22 says 4
    assert _run(db, "--inject", "missing-gpu") == (3.0, 4.0)
    assert _run(db, "--inject", "missing-gpu", "--expect-gpus", "3") == (3.0, 3.0)  # taken out on purpose
    other = tmp_path / "other.duckdb"
    assert _run(other, "--inject", "missing-gpu") == (3.0, 3.0)  # another store: nothing to remember
