"""fleettool.remediate.slurm against a real one-node Slurm (tests/slurm_cluster.py): the drain step with its
Soperator-style reason, resume, and `scontrol reboot ASAP nextstate=DOWN` with RebootProgram set to a stand-in
script that records it was called (and reboots nothing). The reason and parsing tests need no Slurm."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleettool.remediate.model import Via
from fleettool.remediate.runner import NodeRunner
from fleettool.remediate.slurm import (
    REASON_MAX,
    SlurmError,
    SlurmNode,
    drain_reason,
    drain_step,
    may_resume,
    node_slurm_state,
    parse_show_node,
    reboot_step,
    resume_step,
    slurm_node,
)
from tests.slurm_cluster import SKIP, logs, one_node_slurm

# `scontrol show node -o vm` of tests/slurm_cluster.py's Slurm 22.05.8 after the reboot was issued (cut)
ISSUED = (
    "NodeName=vm Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=1.54 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=vm NodeHostName=vm Version=22.05.8 "
    "OS=Linux 6.18.44-fc-v1272 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=23593 AllocMem=0 FreeMem=18506 Sockets=2 "
    "Boards=1 State=DOWN+DRAIN+REBOOT_ISSUED ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
    "NextState=RESUME Partitions=debug  BootTime=2026-12-05T15:06:12 SlurmdStartTime=2026-12-06T03:58:21 "
    "CfgTRES=cpu=2,mem=23593M,billing=2 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 "
    "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s "
    "Reason=[hardware_problem] XID 79 GPU 3 incident inc-x : reboot issued [root@2026-12-06T03:58:23]"
)


def test_the_reason_is_soperators_and_keeps_the_incident_id() -> None:
    assert (
        drain_reason("XID 79", 3, "inc-gpu-17-abc")
        == "[hardware_problem] XID 79 GPU 3 incident inc-gpu-17-abc"
    )
    assert drain_reason("NVLink down", None, None) == "[hardware_problem] NVLink down"
    # another prefix, a Kill-task reason, '=' and newlines never reach the details (Soperator matches substrings)
    r = drain_reason("[node_problem] x=1\nKill task failed [user_problem]", 0, "inc-1")
    assert r.count("[") == 1 and "=" not in r and "\n" not in r and "Kill task" not in r
    assert r.startswith("[hardware_problem] x 1") and r.endswith("GPU 0 incident inc-1")
    long = drain_reason("XID 79 " + "fallen off the bus " * 20, 7, "inc-gpu-17-20261206T041500-3fa2")
    assert len(long) <= REASON_MAX and long.endswith("GPU 7 incident inc-gpu-17-20261206T041500-3fa2")


def test_steps_are_argv_with_undo() -> None:
    s = drain_step("gpu-17", "[hardware_problem] XID 79 GPU 3 incident inc-1")
    assert s.argv == (
        "scontrol", "update", "nodename=gpu-17", "state=drain",
        "reason=[hardware_problem] XID 79 GPU 3 incident inc-1",
    )  # fmt: skip
    assert s.where == "here" and "gpu-17" in s.takes_out and s.undo == resume_step("gpu-17")
    assert resume_step("gpu-17").argv == ("scontrol", "update", "nodename=gpu-17", "state=resume")
    rb = reboot_step("gpu-17", "[hardware_problem] reboot incident inc-1")
    assert rb.argv == (
        "scontrol", "reboot", "ASAP", "nextstate=DOWN", "reason=[hardware_problem] reboot incident inc-1", "gpu-17",
    )  # fmt: skip
    # the node stays DOWN after the boot until the proof passes: the reboot's undo is the resume
    assert rb.undo == resume_step("gpu-17")
    with pytest.raises(ValueError):
        drain_step("gpu-17; reboot", "x")


def test_a_down_node_is_resumed_only_for_our_own_reason() -> None:
    ours = "[hardware_problem] reboot incident inc-1"
    # what slurmctld leaves after a reboot with nextstate=DOWN: our reason, " : reboot complete" appended
    assert may_resume(SlurmNode("DOWN", ours + " : reboot issued : reboot complete", ""), ours)
    assert not may_resume(SlurmNode("DOWN", "Not responding", ""), ours)
    assert not may_resume(SlurmNode("DOWN+DRAIN", "[node_problem] disk full", ""), ours)
    assert may_resume(SlurmNode("IDLE", "", ""), ours)


def test_show_node_is_parsed_with_a_reason_holding_spaces() -> None:
    f = parse_show_node(ISSUED)
    assert f["State"] == "DOWN+DRAIN+REBOOT_ISSUED" and f["NextState"] == "RESUME"
    assert f["CfgTRES"] == "cpu=2,mem=23593M,billing=2" and f["AllocTRES"] == ""
    assert f["Reason"].startswith("[hardware_problem] XID 79 GPU 3 incident inc-x : reboot issued")
    n = SlurmNode("DOWN+DRAIN+REBOOT_ISSUED", "x", "RESUME")
    assert n.base == "DOWN" and n.flags == {"DRAIN", "REBOOT_ISSUED"} and n.reboot == "issued"
    assert SlurmNode("IDLE", "", "").reboot == "back"
    assert SlurmNode("IDLE+DRAIN", "", "").reboot == ""
    assert SlurmNode("DOWN", "r : reboot issued : reboot timed out", "").reboot == "timed out"


REBOOT_SCRIPT = """#!/bin/sh
echo "$(date +%s) $*" >> {calls}
"""


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    d = tmp_path_factory.mktemp("slurm-remediate")
    script = d / "reboot-standin.sh"
    script.write_text(REBOOT_SCRIPT.format(calls=d / "reboot-calls"))
    script.chmod(0o755)
    with one_node_slurm(d, (f"RebootProgram={script}", "ResumeTimeout=5")) as s:
        yield {**s, "calls": str(d / "reboot-calls")}


@pytest.fixture
def runner(slurm: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> NodeRunner:
    monkeypatch.setenv("SLURM_CONF", slurm["SLURM_CONF"])  # scontrol runs here, with this test's Slurm
    return NodeRunner(slurm["host"], Via.SLURM)


def _wait(runner: NodeRunner, host: str, ok: object, seconds: float, d: str) -> SlurmNode:
    deadline = time.monotonic() + seconds
    n = slurm_node(runner, host)
    while not ok(n) and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.5)
        n = slurm_node(runner, host)
    assert ok(n), f"node is {n}\n{logs(Path(d))}"  # type: ignore[operator]
    return n


@SKIP
def test_drain_shows_the_reason_and_resume_brings_it_back(slurm: dict[str, str], runner: NodeRunner) -> None:
    host = slurm["host"]
    reason = drain_reason("XID 79", 3, "inc-gpu-17-20261206T041500-3fa2")
    step = drain_step(host, reason)
    r = runner.here(step.argv, timeout_s=step.timeout_s)
    assert r.rc in step.ok_rc, r.excerpt()
    n = slurm_node(runner, host)
    assert "DRAIN" in n.flags and n.reason == reason, n
    assert node_slurm_state(runner, host) == n.state == "IDLE+DRAIN"
    assert may_resume(n, reason)
    # someone drains it for another reason meanwhile: that drain is theirs, resume would lift it
    other = "[node_problem] disk full"
    assert runner.here(drain_step(host, other).argv).rc == 0
    n = slurm_node(runner, host)
    assert n.reason == other and not may_resume(n, reason)
    assert step.undo is not None
    r = runner.here(step.undo.argv, timeout_s=step.undo.timeout_s)
    assert r.rc == 0, r.excerpt()
    n = _wait(runner, host, lambda n: n.reboot == "back", 20, slurm["dir"])
    assert n.base == "IDLE" and node_slurm_state(runner, host).startswith("IDLE")


@SKIP
def test_reboot_asap_runs_the_reboot_program_and_times_out_without_a_boot(
    slurm: dict[str, str], runner: NodeRunner
) -> None:
    host = slurm["host"]
    calls = Path(slurm["calls"])
    assert not calls.exists()
    reason = drain_reason("GPU lost after reset", 3, "inc-7")
    step = reboot_step(host, reason)
    r = runner.here(step.argv, timeout_s=step.timeout_s)
    assert r.rc == 0, r.excerpt()
    # slurmctld marks it for reboot (no job holds it, so ASAP is at once) and slurmd runs RebootProgram
    n = _wait(runner, host, lambda n: n.reboot in ("requested", "issued"), 10, slurm["dir"])
    assert "DRAIN" in n.flags and n.next_state == "DOWN" and "incident inc-7" in n.reason
    deadline = time.monotonic() + 20
    while not calls.exists() and time.monotonic() < deadline:
        time.sleep(0.3)
    assert calls.exists(), f"RebootProgram never ran\n{logs(Path(slurm['dir']))}"
    n = _wait(runner, host, lambda n: n.reboot == "issued", 10, slurm["dir"])
    assert n.base == "DOWN" and n.reason.endswith(": reboot issued") and may_resume(n, reason)
    # nothing rebooted, so slurmd never registers with a newer boot time: past ResumeTimeout the node is DOWN
    # ("reboot timed out"), never back on its own; what remediation's wait must read as a failed reboot
    n = _wait(runner, host, lambda n: n.reboot == "timed out", 90, slurm["dir"])
    assert "REBOOT_ISSUED" not in n.flags and "incident inc-7" in n.reason
    r = runner.here(resume_step(host).argv)
    assert r.rc == 0, r.excerpt()
    _wait(runner, host, lambda n: n.reboot == "back", 30, slurm["dir"])


@SKIP
def test_an_unknown_node_is_a_clear_error(slurm: dict[str, str], runner: NodeRunner) -> None:
    with pytest.raises(SlurmError, match="no-such-node"):
        slurm_node(runner, "no-such-node")


@SKIP
def test_reboot_asap_waits_for_the_running_job(slurm: dict[str, str], runner: NodeRunner) -> None:
    host = slurm["host"]
    calls = Path(slurm["calls"])
    before = calls.read_text().count("\n") if calls.exists() else 0
    job = subprocess.Popen(
        ["srun", "-w", host, "-t", "1", "sleep", "6"],
        env={**os.environ, "SLURM_CONF": slurm["SLURM_CONF"]},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait(runner, host, lambda n: n.base in ("ALLOCATED", "MIXED"), 20, slurm["dir"])
        reason = drain_reason("XID 79", 3, "inc-8")
        assert runner.here(reboot_step(host, reason).argv).rc == 0
        n = slurm_node(runner, host)
        # ASAP: drained at once (no new job), the reboot waits for the job; RebootProgram has not run
        assert n.reboot == "requested" and "DRAIN" in n.flags and n.base in ("ALLOCATED", "MIXED"), n
        assert (calls.read_text().count("\n") if calls.exists() else 0) == before
        assert job.poll() is None
        _, err = job.communicate(timeout=30)
        assert job.returncode == 0, err  # the job ran to its end, never killed for the reboot
    finally:
        if job.poll() is None:
            job.kill()
    n = _wait(runner, host, lambda n: n.reboot == "issued", 20, slurm["dir"])
    assert calls.read_text().count("\n") == before + 1 and "incident inc-8" in n.reason
    _wait(runner, host, lambda n: n.reboot == "timed out", 90, slurm["dir"])
    assert runner.here(resume_step(host).argv).rc == 0
    _wait(runner, host, lambda n: n.reboot == "back", 30, slurm["dir"])
