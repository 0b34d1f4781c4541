"""A `journalctl -k -f` that exits (journald restarted, the binary upgraded, OOM-killed) is started again with
backoff, and the agent says so once when it is lost and once when it reads again, never once per tick. A
stand-in journalctl on PATH prints one XID line and exits 1, every time it is started."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from fleettool.agent.loop import Agent, AgentConfig
from fleettool.collectors.base import Collected
from fleettool.collectors.kmsg import KmsgCollector

LINE = (
    "2026-12-02T11:38:47+0000 worker4 kernel: NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus."
)


@pytest.fixture
def exiting_journalctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir, starts = tmp_path / "bin", tmp_path / "starts"
    bin_dir.mkdir()
    script = bin_dir / "journalctl"
    script.write_text(f'#!/bin/sh\necho "$@" >> {starts}\necho "{LINE}"\nexit 1\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return starts


def test_a_journalctl_that_exits_is_restarted_with_backoff_and_said_once_per_change(
    exiting_journalctl: Path,
) -> None:
    got: list[Collected] = []
    c = KmsgCollector("worker4", spec="journal", backoff=(0.2, 0.8))
    ag = Agent(AgentConfig(db=None, node="worker4", quiet=True), [c], sink=got.append)
    ag.start()
    ticks, end = 0, time.monotonic() + 4.0
    while time.monotonic() < end:
        ag.tick()
        ticks += 1
        time.sleep(0.05)
    c.close()
    starts = exiting_journalctl.read_text().splitlines()
    events = [e for col in got for e in col.events]
    agent_msgs = [e.message for e in events if e.kind == "agent"]
    xids = [e for e in events if e.kind == "xid"]
    # started again and again, each run's line read: 0.2 + 0.4 + 0.8 + 0.8 ... s apart within 4 s
    assert 4 <= len(starts) <= 8, (len(starts), agent_msgs)
    assert all("-k" in s.split() and "-f" in s.split() for s in starts)
    assert len(starts) - 1 <= len(xids) <= len(starts)  # every run's line (the last run's may be in flight)
    lost = [m for m in agent_msgs if "lost" in m]
    again = [m for m in agent_msgs if "reading again" in m]
    assert len(again) == len(starts) - 1 and len(starts) - 1 <= len(lost) <= len(starts)
    assert len(agent_msgs) == len(lost) + len(again) < ticks / 4, agent_msgs
    assert "journalctl exited with 1" in lost[0]
