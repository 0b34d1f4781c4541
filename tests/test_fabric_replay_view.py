"""What replay prints of a node's ports, and an alert over several ports naming each of them."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from tests.conftest import ROOT, run_cli

IBSTAT = ROOT / "fixtures" / "infiniband" / "ibstat"


def _two_snapshots(tmp: Path) -> Path:
    """gpu-17's ibstat at 10:00, all ACTIVE, and at 11:00 with mlx5_2, mlx5_7 and mlx5_8 DOWN."""
    rec = tmp / "rec"
    rec.mkdir()
    for name, src, at in (
        ("gpu-17-ibstat-1.txt", "ibstat.47.0.h100.all.active.0", 1_796_464_800),
        ("gpu-17-ibstat-2.txt", "ibstat.47.0.h100.some.down.0", 1_796_468_400),
    ):
        shutil.copy(IBSTAT / src, rec / name)
        os.utime(rec / name, (at, at))
    return rec


def test_replay_names_the_ports_not_active_and_the_alert_names_every_port_down(tmp_path: Path) -> None:
    rec = _two_snapshots(tmp_path)
    db = str(tmp_path / "t.duckdb")
    run = run_cli("replay", str(rec), "--db", db, "--node", "gpu-17")
    assert run.returncode == 0, run.stderr
    assert "rec: 2 files: 2 read" in run.stdout
    line = next(ln for ln in run.stdout.splitlines() if ln.startswith("gpu-17 ports:"))
    assert line.startswith("gpu-17 ports: 12 (9 ACTIVE, 3 DOWN); not active: mlx5_2/1 DOWN"), line
    assert "state changed during the recording: mlx5_2/1, mlx5_7/1, mlx5_8/1" in line
    assert "\n\n\n" not in run.stdout  # one blank line between blocks
    alerts = json.loads(run_cli("alerts", "--db", db, "--json").stdout)
    assert [a["rule"] for a in alerts] == ["NicPortDown"]
    assert alerts[0]["summary"].endswith("; also port=mlx5_7/1, port=mlx5_8/1"), alerts[0]["summary"]
    out = json.loads(
        run_cli("replay", str(rec), "--db", str(tmp_path / "j.duckdb"), "--node", "gpu-17", "--json").stdout
    )
    down = sorted(p["port"] for p in out["ports"] if p["state"] != "ACTIVE")
    assert down == ["mlx5_2/1", "mlx5_7/1", "mlx5_8/1"]


def test_a_single_file_is_one_file(tmp_path: Path) -> None:
    f = tmp_path / "ibstat.txt"
    shutil.copy(IBSTAT / "ibstat.47.0.h100.all.active.0", f)
    run = run_cli("replay", str(f), "--db", str(tmp_path / "t.duckdb"), "--node", "gpu-17")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"{f}: 1 file: 1 read"), run.stdout
    assert "gpu-17 ports: 12 (12 ACTIVE)" in run.stdout
