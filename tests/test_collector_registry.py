"""The collector registry: a collector added in one file plus one `register_collector` line is built, run by
the agent with the same health gauges as every other, and picked by `--collector` / `--no-collector`, whose
help lists exactly the registered names. The collector, tests/gemm_load_collector.py, replays the GEMM
throughput recorded with the H200 fixture (fixtures/h200-gemm/gemm-load.txt), one line per tick."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleettool.agent.loop import Agent, AgentConfig
from fleettool.collectors import registry
from fleettool.collectors.nvml import NvmlCollector
from fleettool.collectors.registry import CollectorConfig, register_collector
from fleettool.model import Sample
from fleettool.sources.fake import FakeSource
from fleettool.store import Store
from tests.conftest import H200, ROOT, run_cli
from tests.gemm_load_collector import from_config

BUILTIN = ["nvml", "kmsg", "dcgm-exporter", "fabric"]


# the one registry line, as it would stand at the end of collectors/registry.py
REGISTER = 'register_collector("gemm-load", False, "tests.gemm_load_collector:from_config")'


@pytest.fixture
def gemm_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "REGISTRY", dict(registry.REGISTRY))  # the test's line goes with the test
    register_collector("gemm-load", False, "tests.gemm_load_collector:from_config")  # REGISTER


def test_builtins_are_registered_in_run_order_all_on_by_default() -> None:
    assert registry.names() == BUILTIN
    assert registry.select() == BUILTIN
    assert registry.select(disable=["kmsg"]) == ["nvml", "dcgm-exporter", "fabric"]
    assert registry.select(defaults=["nvml"], enable=["kmsg"]) == ["nvml", "kmsg"]
    with pytest.raises(
        registry.UnknownCollector,
        match=r"unknown collector nope \(one of dcgm-exporter, fabric, kmsg, nvml\)",
    ):
        registry.select(disable=["nope"])
    with pytest.raises(ValueError, match="already registered"):
        register_collector("nvml", True, from_config)


def test_factories_read_the_config_and_say_when_off(tmp_path: Path) -> None:
    src = FakeSource(gpus=1)
    on = registry.build(
        CollectorConfig("n", gpu_source=src, kmsg=str(H200 / "kernel.log"), dcgm_url="http://x/m"), BUILTIN
    )
    assert [c.id for c in on] == BUILTIN
    off = CollectorConfig("n", gpu_source=None, kmsg="off", dcgm_url="off")
    # the fabric collector has no "off" value (--no-collector fabric): its factory checks --sysfs-root
    assert [c.id for c in registry.build(off, BUILTIN)] == ["fabric"]
    with pytest.raises(registry.CollectorConfigError, match="--sysfs-root"):
        registry.build(CollectorConfig("n", sysfs_root=str(tmp_path / "nope")), ["fabric"])
    with pytest.raises(registry.CollectorConfigError, match="--kmsg"):
        registry.build(CollectorConfig("n", kmsg=str(tmp_path / "missing.log")), ["kmsg"])
    (nvml,) = registry.build(
        CollectorConfig("n", gpu_source=src, interval_s=0.5, all_tiers_every_s=2.0), ["nvml"]
    )
    assert isinstance(nvml, NvmlCollector) and set(nvml.tier_s.values()) == {0.5, 2.0}


def test_a_registered_collector_is_selected_built_and_run_like_any_other(gemm_registered: None) -> None:
    assert registry.names() == [*BUILTIN, "gemm-load"]
    assert "gemm-load" not in registry.select()  # registered off by default
    assert registry.select(enable=["gemm-load"], disable=["kmsg", "dcgm-exporter", "fabric"]) == [
        "nvml",
        "gemm-load",
    ]
    with pytest.raises(
        registry.UnknownCollector, match="one of dcgm-exporter, fabric, gemm-load, kmsg, nvml"
    ):
        registry.check_names(["gemm"])
    cfg = CollectorConfig("gpu-17", gpu_source=FakeSource(gpus=1, recording=H200 / "nvml.om.gz"))
    collectors = registry.build(
        cfg, registry.select(enable=["gemm-load"], disable=["kmsg", "dcgm-exporter", "fabric"])
    )
    assert [c.id for c in collectors] == ["nvml", "gemm-load"]
    got: list[Sample] = []
    t = iter(float(1_800_000_000 + k) for k in range(100))
    ag = Agent(
        AgentConfig(db=None, node="gpu-17", quiet=True),
        collectors,
        sink=lambda c: got.extend(c.samples),
        clock=lambda: next(t),
    )
    ag.start()
    for _ in range(3):
        ag.tick()
    assert [s.value for s in got if s.metric == "gemm_tflops"] == [613.9, 656.9, 658.9]
    for cid in ("nvml", "gemm-load"):  # the framework's health gauges, the same for both
        for m in ("agent_collector_available", "agent_collector_up"):
            assert ag.latest[(m, None, None, f"collector={cid}")] == 1.0, (m, cid)
        assert ag.latest[("agent_collector_hung", None, None, f"collector={cid}")] == 0.0
    # a gauge of its own only where the collector names one (NVML's); the loop does not know which
    assert ag.latest[("agent_nvml_available", None, None, "")] == 1.0
    assert {s.metric for s in got if s.metric.endswith("_available") and not s.sub} == {
        "agent_nvml_available"
    }


def test_a_factory_must_make_what_it_was_registered_as(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "REGISTRY", dict(registry.REGISTRY))
    register_collector("gemm", False, from_config)
    with pytest.raises(ValueError, match="with id 'gemm-load'"):
        registry.build(CollectorConfig("n"), ["gemm"])


def _help_names(text: str, flag: str) -> list[str]:
    line = " ".join(text.split())
    tail = line.split(f"{flag} NAME", 1)[1].split("(repeatable):", 1)[1]
    return [n.strip() for n in tail.split(" --", 1)[0].split(",")]


def test_the_flags_list_the_registry(tmp_path: Path) -> None:
    for cmd in ("agent", "record"):
        text = run_cli(cmd, "--help").stdout
        assert _help_names(text, "--collector") == BUILTIN, cmd
        assert _help_names(text, "--no-collector") == BUILTIN, cmd
    r = run_cli("agent", "--collector", "gpu", "--db", str(tmp_path / "never.duckdb"))
    assert r.returncode == 2 and r.stderr.splitlines() == [
        "fleettool: agent: Invalid value for --collector: unknown collector gpu (one of dcgm-exporter, fabric, kmsg, nvml) "
        "(see 'fleettool agent --help')"
    ]
    assert not (tmp_path / "never.duckdb").exists()


PLUGIN = f"from fleettool.collectors.registry import register_collector; {REGISTER}; from fleettool.cli import main; main()"


def _with_plugin(*args: str) -> subprocess.CompletedProcess[str]:
    """`fleettool ARGS` in a process where the test's collector was registered before the CLI was built."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-c", PLUGIN, *args], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env
    )


# what each run picks -> (gemm_tflops samples?, NVML's gpu_count samples?, the collectors with health gauges)
RUNS = {
    "asked": (("--collector", "gemm-load"), True, True, {"nvml", "gemm-load"}),
    "not asked": ((), False, True, {"nvml"}),
    "instead of nvml": (("--collector", "gemm-load", "--no-collector", "nvml"), True, False, {"gemm-load"}),
}


@pytest.mark.parametrize("run", list(RUNS))
def test_agent_runs_a_registered_collector_when_asked_and_not_otherwise(tmp_path: Path, run: str) -> None:
    picks, gemm, nvml, ids = RUNS[run]
    assert _help_names(_with_plugin("agent", "--help").stdout, "--collector") == [*BUILTIN, "gemm-load"]
    db = tmp_path / "a.duckdb"
    fake = (
        "--source",
        "fake",
        "--kmsg",
        "off",
        "--dcgm-exporter",
        "off",
        "--no-collector",
        "fabric",
        "--no-rules",
        "-q",
    )
    r = _with_plugin("agent", *fake, "--interval", "0.2s", "--duration", "1s", "--db", str(db), *picks)
    assert r.returncode == 0, r.stderr
    with Store(db, read_only=True) as s:
        assert (s.scalar("SELECT count(*) FROM samples WHERE metric = 'gemm_tflops'") > 0) == gemm
        assert (s.scalar("SELECT count(*) FROM samples WHERE metric = 'gpu_count'") > 0) == nvml
        up = s.query("SELECT DISTINCT sub FROM samples WHERE metric = 'agent_collector_up'")
    assert {row["sub"].removeprefix("collector=") for row in up} == ids
