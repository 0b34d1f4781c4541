"""The headless pipeline: replay and the agent's flush take one path (collector conversion -> store -> rules)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleettool.agent.loop import Agent, AgentConfig
from fleettool.collectors.base import Collected
from fleettool.collectors.kmsg import KmsgCollector, kernel_events
from fleettool.engine.rules import load_rules
from fleettool.formats.kmsg import KernelLogParser
from fleettool.ingest.report import IngestOptions
from fleettool.model import Event, GpuInfo, Sample
from fleettool.pipeline import Pipeline, replay
from fleettool.store import Store

NODE = "gpu-15"
LINES = [
    f"2026-11-30T00:06:52+0000 {NODE} kernel: EXT4-fs (nvme0n1p2): re-mounted. Opts: (null).",
    f"2026-11-30T00:16:39+0000 {NODE} kernel: NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.",
    f"2026-11-30T00:17:01+0000 {NODE} kernel: NVRM: Xid (PCI:0000:cb:00): 48, pid='<unknown>', name=<unknown>, "
    "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6.",
    f"2026-11-30T00:18:40+0000 {NODE} kernel: nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 12028, "
    "Non-fatal, Link 50 egress non-posted PRIV error (First)",
]
EVENT_COLUMNS = "ts, node, kind, code, pci_bus_id, uuid, gpu, message, raw, source, detail"


class ListSource:
    """A LineSource over fixed lines, named like the file replay reads (the events' source is kmsg:NAME)."""

    boot_time: float | None = None

    def __init__(self, name: str, lines: list[str]) -> None:
        self.name = name
        self.lines = list(lines)

    def open(self) -> None:
        pass

    def read(self, max_lines: int) -> list[str]:
        out, self.lines = self.lines[:max_lines], self.lines[max_lines:]
        return out

    def close(self) -> None:
        pass


def _events(db: Path) -> list[dict[str, Any]]:
    with Store(db, read_only=True) as s:
        return s.query(f"SELECT {EVENT_COLUMNS} FROM events WHERE kind <> 'agent' ORDER BY ts, raw")


def test_replayed_kernel_log_and_live_collector_store_identical_events(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("\n".join(LINES) + "\n")
    with Store(tmp_path / "replay.duckdb") as store:
        res = replay(store, log, IngestOptions(quiet=True), rules=[])
    assert [r.status for r in res.reports] == ["read"] and res.reports[0].events == 3

    collector = KmsgCollector(NODE, source=ListSource(log.name, LINES))
    agent = Agent(AgentConfig(db=tmp_path / "agent.duckdb", node=NODE, quiet=True), [collector])
    agent.tick()
    assert agent.flush()

    replayed, live = _events(tmp_path / "replay.duckdb"), _events(tmp_path / "agent.duckdb")
    assert [e["kind"] for e in replayed] == ["xid", "xid", "sxid"]
    assert [e["code"] for e in replayed] == [79, 48, 12028]
    assert replayed == live


def test_kernel_events_is_the_one_conversion_live_and_replayed() -> None:
    """Live: untimed lines arrive now and are this node's; replay: untimed lines stay untimed (boot-relative)
    and a line's own host names its node."""
    lines = [
        "[  365.969681] NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.",
        "NVRM: GPU at PCI:0000:01:00: GPU-435786a2-02ef-37ca-d4b2-300682c216b4",
    ]
    replayed = kernel_events(KernelLogParser().feed_all(lines), "n1", "kmsg:dmesg.txt")
    assert replayed.boot_relative == 1 and replayed.events[0].ts is None
    assert replayed.events[0].detail["time"] == "boot-relative"
    assert [g.uuid for g, _ in replayed.announced] == ["GPU-435786a2-02ef-37ca-d4b2-300682c216b4"]

    live = kernel_events(KernelLogParser().feed_all(lines), "n1", "kmsg:kmsg", now=1000.0, this_node=True)
    assert live.events[0].ts == 1000.0 and live.boot_relative == 0 and live.events[0].node == "n1"
    assert live.announced[0][0] == GpuInfo(
        "n1", None, "GPU-435786a2-02ef-37ca-d4b2-300682c216b4", "0000:01:00"
    )


def test_agent_flush_writes_through_the_pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int, float]] = []
    real = Pipeline.write

    def spy(self: Pipeline, c: Collected, seen_ts: float) -> int:
        calls.append((len(c.samples), len(c.events), seen_ts))
        return real(self, c, seen_ts)

    monkeypatch.setattr(Pipeline, "write", spy)
    collector = KmsgCollector(NODE, source=ListSource("kern.log", LINES))
    agent = Agent(
        AgentConfig(db=tmp_path / "a.duckdb", node=NODE, quiet=True), [collector], clock=lambda: 1.8e9
    )
    agent.tick()
    assert agent.flush()
    assert len(calls) == 1 and calls[0][1] >= 3 and calls[0][2] == 1.8e9
    assert agent.stats.flushed_rows == calls[0][0] + calls[0][1]


def test_pipeline_write_is_one_transaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A collection that fails to store leaves nothing of itself (the agent keeps its buffer and retries)."""
    with Store(tmp_path / "s.duckdb") as store:
        pipe = Pipeline(store)
        ok = Collected(samples=[Sample(1.8e9, NODE, 0, None, "gpu_temp_c", 50.0)])
        assert pipe.write(ok, 1.8e9) == 1
        bad = Collected(
            samples=[Sample(1.8e9 + 1, NODE, 0, None, "gpu_temp_c", 51.0)],
            events=[Event(1.8e9 + 1, NODE, "xid", "x", code=79)],
            gpus=[GpuInfo(NODE, 0, "GPU-x")],
        )
        monkeypatch.setattr(store, "record_pods", _boom)
        with pytest.raises(RuntimeError):
            pipe.write(bad, 1.8e9)
        assert store.counts()["samples"] == 1 and store.counts()["events"] == 0


def test_pipeline_judges_an_untimed_kernel_log_at_the_given_instant(tmp_path: Path) -> None:
    """A plain dmesg has only uptimes: no time range, so the engine would see nothing; judged at `now`."""
    rules = load_rules(None)
    with Store(tmp_path / "s.duckdb") as store:
        batch = kernel_events(
            KernelLogParser().feed_all(
                ["[  365.969681] NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus."]
            ),
            NODE,
            "kmsg:dmesg.txt",
        )
        Pipeline(store).write(Collected(events=batch.events), 0.0)
        assert Pipeline(store, rules).evaluate() == []  # no instant given: nothing to judge at
        incidents = Pipeline(store, rules).evaluate(now=1.8e9)
        assert any(i.node == NODE for i in incidents)
        assert store.scalar("SELECT count(*) FROM alerts") == len(incidents)


def _boom(*_: object) -> None:
    raise RuntimeError("disk full")
