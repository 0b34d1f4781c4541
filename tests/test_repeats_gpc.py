"""XID 13 repeats escalate to hardware only on the same GPC/TPC of one GPU (issue 28, item 3c).

NVIDIA's catalog (WORKFLOW_XID_13): an SM exception is the application's unless it repeats on the same GPC/TPC.
Before, three bursts of XID 13 on one GPU within 24 h escalated to warning / inspect-hardware wherever they were
on the chip (a job hitting an illegal instruction on every SM it ran on looked like a bad GPU). Now: the same
(GPC, TPC) three times escalates, three different GPCs do not, and a line that names no GPC ("Graphics
Exception: ESR ...") counts toward none; the same whole (`replay`) and as the agent judges (`--as-agent`).
XID 31 (an MMU fault) still escalates on the same GPU whatever the line says.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fleettool.formats.kmsg import KernelLogParser

T0 = dt.datetime(2026, 11, 30, 1, 0, tzinfo=dt.timezone.utc)
NODE = "gpu-44"
SM = "NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC {g}, TPC {t}, SM 0): Illegal Instruction Parameter"
ESR = "NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception: ESR 0x57c730=0xc04000b 0x57c734=0x24"
MMU = "NVRM: Xid (PCI:0000:cb:00): 31, pid=2512125, name=python3.10, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_{g} faulted @ 0x73ac_1c000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE"


def test_the_sm_line_names_its_gpc_tpc_and_sm() -> None:
    p = KernelLogParser()
    rec = p.feed("[Fri Aug 30 11:43:09 2024] " + SM.format(g=7, t=6))
    assert rec is not None and (
        rec.code,
        rec.detail.get("gpc"),
        rec.detail.get("tpc"),
        rec.detail.get("sm"),
    ) == (
        13,
        7,
        6,
        0,
    )
    esr = p.feed("[Fri Aug 30 11:43:09 2024] " + ESR)
    assert esr is not None and esr.code == 13 and "gpc" not in esr.detail


def _replay(tmp: Path, bursts: list[list[str]], *args: str) -> list[tuple[int, str, str]]:
    """Each burst's lines 3 h apart (a burst: its lines a second apart) replayed; the GpuXid alerts as (hours
    after T0, severity, action)."""
    rec = tmp / "rec"
    rec.mkdir(exist_ok=True)
    out = [
        f"{T0:%Y-%m-%dT%H:%M:%S}+0000 {NODE} kernel: NVRM: GPU at PCI:0000:cb:00: GPU-44cb0000-0000-4000-8000-000000000044"
    ]
    for k, lines in enumerate(bursts):
        for i, line in enumerate(lines):
            t = T0 + dt.timedelta(hours=3 * k, seconds=60 + i)
            out.append(f"{t:%Y-%m-%dT%H:%M:%S}+0000 {NODE} kernel: {line}")
    (rec / f"kernel-{NODE}.log").write_text("\n".join(out) + "\n")
    db = tmp / f"t{len(list(tmp.glob('*.duckdb')))}.duckdb"
    run = [sys.executable, "-m", "fleettool"]
    subprocess.run([*run, "replay", str(rec), "--db", str(db), "-q", *args], check=True, capture_output=True)
    got = subprocess.run(
        [*run, "alerts", "--db", str(db), "--json"], check=True, capture_output=True, text=True
    )
    rows = [a for a in json.loads(got.stdout) if a["rule"] == "GpuXid"]
    first = [dt.datetime.fromisoformat(str(a["first_seen"]).replace("Z", "+00:00")) for a in rows]
    return sorted(
        (
            round((f.replace(tzinfo=f.tzinfo or dt.timezone.utc) - T0).total_seconds() / 3600),
            a["severity"],
            a["action"],
        )
        for f, a in zip(first, rows, strict=True)
    )


WAYS = [pytest.param((), id="replay"), pytest.param(("--as-agent",), id="as-agent")]


@pytest.mark.parametrize("way", WAYS)
def test_three_bursts_on_one_gpc_tpc_escalate(tmp_path: Path, way: tuple[str, ...]) -> None:
    bursts = [[SM.format(g=7, t=7), ESR] for _ in range(3)]
    assert _replay(tmp_path, bursts, *way) == [
        (0, "info", "check-workload"),
        (3, "info", "check-workload"),
        (6, "warning", "inspect-hardware"),
    ]


@pytest.mark.parametrize("way", WAYS)
def test_three_bursts_on_different_gpcs_do_not(tmp_path: Path, way: tuple[str, ...]) -> None:
    bursts = [[SM.format(g=g, t=7), ESR] for g in (1, 4, 7)]
    assert _replay(tmp_path, bursts, *way) == [
        (0, "info", "check-workload"),
        (3, "info", "check-workload"),
        (6, "info", "check-workload"),
    ]
    # a line that names no GPC counts toward none: three bursts of ESR lines alone stay the application's
    assert [a[1] for a in _replay(tmp_path, [[ESR]] * 3, *way)] == ["info"] * 3


@pytest.mark.parametrize("way", WAYS)
def test_xid31_still_escalates_on_the_same_gpu(tmp_path: Path, way: tuple[str, ...]) -> None:
    bursts = [[MMU.format(g=g)] for g in (1, 4, 7)]
    assert [a[1:] for a in _replay(tmp_path, bursts, *way)][-1] == ("warning", "inspect-hardware")
