"""Fleet storage: stores exported as Parquet segments to a directory and to a real S3-compatible server (moto's
server mode, started on loopback by the test), read back as one fleet, rules evaluated across nodes; export is
idempotent and a crash mid-export loses nothing and shows nothing half-written."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleettool.engine.evaluate import evaluate, write_alerts
from fleettool.engine.rules import load_rules
from fleettool.fleet import segments
from fleettool.fleet.location import open_location
from fleettool.fleet.read import open_fleet
from fleettool.ingest.report import IngestOptions
from fleettool.ingest.run import ingest
from fleettool.store import Store
from tests.conftest import SCENARIOS, run_cli

NOW = 1_900_000_000.0  # after every recording used here: all their hours are whole


def _store(tmp: Path, scenario: str) -> Path:
    db = tmp / f"{scenario}.duckdb"
    with Store(db) as st:
        ingest(st, SCENARIOS / scenario, IngestOptions(quiet=True))
        st.begin()
        write_alerts(st, evaluate(st, load_rules()))
        st.commit()
    return db


def test_directory_round_trip_and_fleet_rules(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet"
    for sc in ("thermal-throttle", "pcie-width-degraded", "nccl-pairwise-straggler"):
        db = _store(tmp_path, sc)
        r = run_cli("export", "--db", str(db), "--to", str(fleet), "--exporter", sc, "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["segments"] >= 2
    files = [p for p in fleet.rglob("*") if p.is_file()]
    assert files and all(p.suffix == ".parquet" and not p.name.startswith(".") for p in files)
    assert any("date=2026-11-30" in str(p) and "node=gpu-07" in str(p) for p in files)
    got = json.loads(run_cli("fleet", "alerts", "--fleet", str(fleet), "--json").stdout)
    assert {(a["node"], a["gpu"], a["category"]) for a in got} == {
        ("gpu-07", 2, "thermal"),
        ("gpu-27", 7, "pcie"),
        ("gpu-34", None, "straggler"),
    }
    ev = json.loads(run_cli("fleet", "alerts", "--fleet", str(fleet), "--evaluate", "--json").stdout)
    assert {(a["node"], a["gpu"], a["category"]) for a in ev} == {
        ("gpu-07", 2, "thermal"),
        ("gpu-27", 7, "pcie"),
        ("gpu-34", None, "straggler"),
    }
    with open_fleet(str(fleet)) as st:
        assert st.scalar("SELECT count(DISTINCT node) FROM samples") == 2 + 4
        assert st.scalar("SELECT count(*) FROM nccl_runs") == 5


def test_export_is_idempotent(tmp_path: Path) -> None:
    db = _store(tmp_path, "thermal-throttle")
    loc = open_location(str(tmp_path / "fleet"))
    with Store(db) as st:
        n = st.scalar("SELECT count(*) FROM samples")
        first = segments.export(st, loc, "a", NOW)
        again = segments.export(st, loc, "a", NOW)
    # every sample once (the recording's mlx5 link lines are events, counted in rows too); nothing new the second
    # time: the watermark moved
    assert first.by_table["samples"] == n and first.rows >= n and again.rows == 0
    with open_fleet(loc) as fl:
        assert fl.scalar("SELECT count(*) FROM samples") == n


def test_crash_mid_export_loses_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = _store(tmp_path, "row-remap-trend")  # two weeks: many segments
    loc = open_location(str(tmp_path / "fleet"))
    real = segments.write_segment
    calls = {"n": 0}

    def dying(loc_, path, batches):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 6:
            # the process dies while writing this segment: a temporary file is left behind, never renamed
            parent = path.rsplit("/", 1)[0]
            os.makedirs(parent, exist_ok=True)
            Path(parent, ".tmp-crashed.parquet").write_bytes(b"PAR1 half a file")
            raise OSError("No space left on device")
        return real(loc_, path, batches)

    monkeypatch.setattr(segments, "write_segment", dying)
    with Store(db) as st:
        total = st.scalar("SELECT count(*) FROM samples")
        with pytest.raises(OSError):
            segments.export(st, loc, "a", NOW)
        # what the store remembers as exported is exactly the 5 segments written
        state = json.loads(st.scalar("SELECT value FROM meta WHERE key LIKE 'exported:samples:%'"))
        assert len(state) == 5
    with open_fleet(loc) as fl:  # what is visible is whole segments only
        partial = fl.scalar("SELECT count(*) FROM samples")
        assert 0 < partial < total
        assert partial == sum(n for n, _ in state.values())
    monkeypatch.setattr(segments, "write_segment", real)
    with Store(db) as st:
        segments.export(st, loc, "a", NOW)  # the next export writes the rest
    with open_fleet(loc) as fl:
        assert fl.scalar("SELECT count(*) FROM samples") == total
        assert fl.scalar("SELECT count(*) FROM (SELECT DISTINCT * FROM samples)") == total


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    exe = shutil.which("moto_server")
    if exe is None:
        pytest.skip("moto's server mode is not installed (pip install 'moto[server]')")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [exe, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.2)
    for k, v in {
        "FLEETTOOL_S3_ENDPOINT": endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(k, v)
    try:
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_s3_round_trip(s3: str, tmp_path: Path) -> None:
    import pyarrow.fs as pafs

    admin = pafs.S3FileSystem(
        endpoint_override=s3.split("//")[1],
        scheme="http",
        access_key="test",
        secret_key="test",
        region="us-east-1",
        allow_bucket_creation=True,
    )
    admin.create_dir("gpu-fleet")
    for sc in ("dbe-remap-pending", "gpu-fell-off-bus"):
        db = _store(tmp_path, sc)
        r = run_cli(
            "export",
            "--db",
            str(db),
            "--to",
            "s3://gpu-fleet/segments",
            "--exporter",
            sc,
            "--json",
            env={
                k: os.environ[k]
                for k in ("FLEETTOOL_S3_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")
            },
        )
        assert r.returncode == 0, r.stderr
    with open_fleet("s3://gpu-fleet/segments") as fl:
        assert fl.scalar("SELECT count(DISTINCT node) FROM samples") == 2
        assert fl.scalar("SELECT count(*) FROM events WHERE kind = 'xid'") == 3
        incidents = evaluate(fl, load_rules())
    assert {(i.node, i.gpu, i.primary.category.value) for i in incidents} == {
        ("gpu-12", 4, "ecc"),
        ("gpu-21", 3, "gpu-lost"),
    }


def test_agent_exports_while_it_runs(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet"
    r = run_cli(
        "agent",
        "--source",
        "fake",
        "--gpus",
        "2",
        "--db",
        str(tmp_path / "a.duckdb"),
        "--flush",
        "1s",
        "--duration",
        "4s",
        "--export-to",
        str(fleet),
        "--export-every",
        "1s",
        "--kmsg",
        "off",
        "--dcgm-exporter",
        "off",
        "--quiet",
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    # whole hours only: the hour in progress is not exported yet, but the snapshots (gpus) are
    with open_fleet(str(fleet)) as fl:
        assert fl.scalar("SELECT count(*) FROM gpus") == 2


def test_complete_days_are_compacted_and_read_once(tmp_path: Path) -> None:
    db = _store(tmp_path, "row-remap-trend")  # 15 days, the last one a single sample at 00:00
    loc = open_location(str(tmp_path / "fleet"))
    with Store(db) as st:
        total = st.scalar("SELECT count(*) FROM samples")
        newest = st.scalar("SELECT epoch(max(ts)) FROM samples")
        segments.export(st, loc, "a", newest + 2 * 3600)  # two hours into the last day: not complete yet
    files = sorted((tmp_path / "fleet" / "samples").rglob("*.parquet"))
    last = max(f.parent.parent.name for f in files)
    assert files and all(f.name.endswith("-day.parquet") for f in files if f.parent.parent.name != last)
    assert not any(f.name.endswith("-day.parquet") for f in files if f.parent.parent.name == last)
    # a crash between writing the daily segment and deleting the hourly ones leaves both: rows still count once
    day = files[0]
    import pyarrow.parquet as pq

    pq.write_table(pq.read_table(day).slice(0, 10), day.parent / day.name.replace("-day", "T05"))
    with open_fleet(loc) as fl:
        assert fl.scalar("SELECT count(*) FROM samples") == total
    with Store(db) as st:  # once the day is over, its hourly segment becomes a daily one
        segments.export(st, loc, "a", NOW)
    lastday = list((tmp_path / "fleet" / "samples").glob(f"{last}/*/*.parquet"))
    assert len(lastday) == 1 and lastday[0].name.endswith("-day.parquet")
    with open_fleet(loc) as fl:
        assert fl.scalar("SELECT count(*) FROM samples") == total
