"""Recordings replay into the store: every scenario, gzip or not, twice = once (a file timed from outside its
content: same content and same time), bad input, --node."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

from fleettool.ingest.report import IngestOptions
from fleettool.ingest.run import ingest
from fleettool.recording.identify import identify
from fleettool.store import Store
from tests.conftest import FIXTURES, H200, SCENARIOS, run_cli

ALL = sorted(p.name for p in SCENARIOS.iterdir() if p.is_dir())


@pytest.mark.parametrize("name", ALL)
def test_every_scenario_replays_into_the_store(name: str, db: Path) -> None:
    d = SCENARIOS / name
    expect = json.loads((d / "expect.json").read_text())
    with Store(db) as s:
        reports = ingest(s, d, IngestOptions(quiet=True))
        om = [r for r in reports if r.format == "openmetrics"]
        assert len(om) == 1 and om[0].rows > 10_000 and not om[0].issues
        nodes = {r["node"] for r in s.query("SELECT DISTINCT node FROM samples")}
        for e in expect["expect"]:
            assert e["node"] in nodes
        # every GPU of every node is in the inventory with its UUID and PCI id, 8 per node
        per_node = s.query(
            "SELECT node, count(DISTINCT gpu) AS n, count(DISTINCT uuid) AS u FROM gpus GROUP BY node"
        )
        assert all(r["n"] == 8 and r["u"] == 8 for r in per_node)
        # DCGM's not-supported sentinel never reaches the store
        assert s.scalar("SELECT count(*) FROM samples WHERE value > 1e15") == 0


def test_thermal_scenario_values_are_in_canonical_units(db: Path) -> None:
    with Store(db) as s:
        ingest(s, SCENARIOS / "thermal-throttle", IngestOptions(quiet=True))
        hot = s.query(
            "SELECT gpu, max(value) AS t FROM samples WHERE metric = 'gpu_temp_c' GROUP BY gpu ORDER BY t DESC LIMIT 1"
        )[0]
        assert hot["gpu"] == 2 and hot["t"] > 85
        masks = {
            int(r["m"])
            for r in s.query(
                "SELECT DISTINCT value AS m FROM samples WHERE metric='clock_event_reasons' AND gpu = 2"
            )
        }
        assert any(m & 0x20 for m in masks), "SW thermal slowdown must be present on gpu 2"
        assert (
            s.scalar("SELECT max(value) FROM samples WHERE metric = 'power_w'") < 710
        )  # watts, not milliwatts


def test_replaying_twice_stores_once(db: Path) -> None:
    with Store(db) as s:
        ingest(s, SCENARIOS / "app-xid", IngestOptions(quiet=True))
        n = s.scalar("SELECT count(*) FROM samples")
        again = ingest(s, SCENARIOS / "app-xid", IngestOptions(quiet=True))
        assert all(r.skipped for r in again)
        assert s.scalar("SELECT count(*) FROM samples") == n


# a dcgm-exporter scrape saved as is (no sample timestamps): 12 samples, 7 of them fleettool metrics
LEGACY_SCRAPE = FIXTURES / "formats" / "prometheus" / "scrape-legacy-exporter.prom"


def _copies(d: Path, src: Path, *names: str) -> Path:
    d.mkdir()
    for n in names:
        shutil.copyfile(src, d / n)
    return d


def _instants(s: Store) -> list[tuple[float, int]]:
    return [
        (r["t"], r["n"])
        for r in s.query("SELECT epoch(ts) AS t, count(*) AS n FROM samples GROUP BY 1 ORDER BY 1")
    ]


def test_identical_scrapes_timed_by_their_names_are_each_stored_once(tmp_path: Path, db: Path) -> None:
    """curl node:9400/metrics > gpu-17-$(date +%s).prom on an idle node: byte-identical files, each a sample of
    its own time. Each is stored; replaying the directory again stores nothing new."""
    rec = _copies(
        tmp_path / "rec",
        LEGACY_SCRAPE,
        "gpu-17-1764675520.prom",  # 2025-12-02T11:38:40Z
        "gpu-17-2026-12-02T11:38:00Z.prom",
        "node_20261202-1139.txt",  # 2026-12-02T11:39:00Z
    )
    with Store(db) as s:
        first = ingest(s, rec, IngestOptions(quiet=True))
        assert [(r.status, r.rows) for r in first] == [("read", 7)] * 3
        assert _instants(s) == [(1764675520.0, 7), (1796211480.0, 7), (1796211540.0, 7)]
        again = ingest(s, rec, IngestOptions(quiet=True))
        assert [r.skipped for r in again] == [
            "already ingested (same content, same time 2025-12-02T11:38:40Z from the file name)",
            "already ingested (same content, same time 2026-12-02T11:38:00Z from the file name)",
            "already ingested (same content, same time 2026-12-02T11:39:00Z from the file name)",
        ]
        assert all(r.status == "ignored" and r.rows == 0 for r in again)
        assert (
            s.scalar("SELECT count(*) FROM samples") == 21 and s.scalar("SELECT count(*) FROM ingests") == 3
        )


def test_same_scrape_at_the_same_time_under_two_names_is_one_ingest(tmp_path: Path, db: Path) -> None:
    rec = _copies(
        tmp_path / "rec", LEGACY_SCRAPE, "gpu-17-2026-12-02T11:38:00Z.prom", "node_20261202-1138.txt"
    )
    with Store(db) as s:
        a, b = ingest(s, rec, IngestOptions(quiet=True))
        assert a.rows == 7 and b.status == "ignored"
        assert (
            b.skipped == "already ingested (same content, same time 2026-12-02T11:38:00Z from the file name)"
        )
        assert _instants(s) == [(1796211480.0, 7)]


def test_scrape_timed_by_at_or_mtime_is_the_same_ingest_only_at_the_same_time(
    tmp_path: Path, db: Path
) -> None:
    rec = _copies(tmp_path / "rec", LEGACY_SCRAPE, "scrape.prom")
    f = rec / "scrape.prom"
    with Store(db) as s:
        assert ingest(s, f, IngestOptions(quiet=True, at=1796000000.0))[0].rows == 7
        same = ingest(s, f, IngestOptions(quiet=True, at=1796000000.0))[0]
        assert same.skipped == "already ingested (same content, same time 2026-11-30T00:53:20Z from --at)"
        assert ingest(s, f, IngestOptions(quiet=True, at=1796000060.0))[0].rows == 7
        os.utime(f, (1796000120.0, 1796000120.0))  # no --at: the file's mtime
        assert ingest(s, f, IngestOptions(quiet=True))[0].rows == 7
        again = ingest(s, f, IngestOptions(quiet=True))[0]
        assert (
            again.skipped
            == "already ingested (same content, same time 2026-11-30T00:55:20Z from the file's mtime)"
        )
        assert _instants(s) == [(1796000000.0, 7), (1796000060.0, 7), (1796000120.0, 7)]


def test_a_recording_with_its_own_timestamps_is_deduplicated_by_content_alone(
    tmp_path: Path, db: Path
) -> None:
    """A file whose samples carry their times is the same ingest whatever its name or --at."""
    raw = gzip.decompress((SCENARIOS / "app-xid" / "dcgm-exporter.om.gz").read_bytes())
    (tmp_path / "a-1764675520.om").write_bytes(raw)
    (tmp_path / "b-1796000000.om").write_bytes(raw)
    with Store(db) as s:
        a = ingest(s, tmp_path / "a-1764675520.om", IngestOptions(quiet=True, at=1.0))[0]
        b = ingest(s, tmp_path / "b-1796000000.om", IngestOptions(quiet=True, at=2.0))[0]
        assert a.rows > 10_000 and a.time_source == "sample timestamps"
        assert b.status == "ignored" and b.skipped == "already ingested (same content)"
        assert s.scalar("SELECT count(*) FROM samples") == a.rows


def test_identical_nccl_logs_timed_by_their_names_are_two_runs(tmp_path: Path, db: Path) -> None:
    rec = _copies(
        tmp_path / "rec",
        FIXTURES / "formats" / "nccl-tests" / "srun-label.txt",
        "all_reduce-20261202T1100Z.log",
        "all_reduce-20261202T1200Z.log",
    )
    with Store(db) as s:
        assert [r.runs for r in ingest(s, rec, IngestOptions(quiet=True))] == [1, 1]
        assert [r.status for r in ingest(s, rec, IngestOptions(quiet=True))] == ["ignored", "ignored"]
        assert [r["t"] for r in s.query("SELECT epoch(ts) AS t FROM nccl_runs ORDER BY ts")] == [
            1796209200.0,
            1796212800.0,
        ]


def test_gzip_is_read_by_content_not_by_name(tmp_path: Path, db: Path) -> None:
    plain = tmp_path / "scrape.txt"  # an uncompressed copy with a misleading name
    plain.write_bytes(
        gzip.decompress((SCENARIOS / "pcie-width-degraded" / "dcgm-exporter.om.gz").read_bytes())
    )
    disguised = tmp_path / "data.bin"
    shutil.copy(SCENARIOS / "pcie-width-degraded" / "dcgm-exporter.om.gz", disguised)
    assert identify(plain) == identify(disguised) == "openmetrics"
    with Store(db) as s:
        r1 = ingest(s, plain, IngestOptions(quiet=True))[0]
        r2 = ingest(s, disguised, IngestOptions(quiet=True))[0]
    assert r1.rows == r2.rows == 19360


def test_prometheus_scrape_named_by_unix_ms_and_node_fallback(tmp_path: Path, db: Path) -> None:
    scrape = tmp_path / "1796000000123.prom"
    scrape.write_text(
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a"} 41\n'
        'DCGM_FI_DEV_MEMORY_TEMP{gpu="0",UUID="GPU-a"} 9223372036854775794\n'
        'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a"} 1024\n'
    )
    assert identify(scrape) == "prometheus"
    with Store(db) as s:
        rep = ingest(s, scrape, IngestOptions(node="gpu-17", quiet=True))[0]
        rows = s.query("SELECT node, gpu, metric, value, epoch_ms(ts) AS ms FROM samples ORDER BY metric")
    assert rep.rows == 2  # the sentinel is dropped
    assert rows == [
        {
            "node": "gpu-17",
            "gpu": 0,
            "metric": "fb_used_bytes",
            "value": 1024 * 1024 * 1024.0,
            "ms": 1796000000123,
        },
        {"node": "gpu-17", "gpu": 0, "metric": "gpu_temp_c", "value": 41.0, "ms": 1796000000123},
    ]


def test_strict_replay_stops_names_the_line_and_keeps_what_was_stored(tmp_path: Path, db: Path) -> None:
    good = run_cli("replay", str(SCENARIOS / "app-xid" / "dcgm-exporter.om.gz"), "--db", str(db), "-q")
    assert good.returncode == 0, good.stderr
    bad = tmp_path / "bad.om"
    bad.write_text(
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="n9"} 40 1796000000\nDCGM_FI_DEV_GPU_TEMP{gpu="0" 41 1796000001\n# EOF\n'
    )
    r = run_cli("replay", str(bad), "--db", str(db), "--strict")
    assert r.returncode == 3
    assert f"{bad}:2:" in r.stderr and r.stderr.count("\n") == 1
    with Store(db, read_only=True) as s:
        assert s.scalar("SELECT count(*) FROM samples WHERE node = 'n9'") == 0  # the bad file left nothing
        assert s.scalar("SELECT count(*) FROM samples WHERE node = 'gpu-30'") > 10_000  # earlier data intact
    lenient = run_cli("replay", str(bad), "--db", str(db))
    assert lenient.returncode == 0 and f"{bad}:2:" in lenient.stderr
    with Store(db, read_only=True) as s:
        assert s.scalar("SELECT count(*) FROM samples WHERE node = 'n9'") == 1


def test_own_h200_recording_replays_with_power_capping_under_gemm(db: Path) -> None:
    with Store(db) as s:
        ingest(s, H200, IngestOptions(quiet=True))
        peak = s.scalar("SELECT max(value) FROM samples WHERE metric = 'power_w'")
        limit = s.scalar("SELECT max(value) FROM samples WHERE metric = 'power_limit_w'")
        masks = [
            int(r["v"])
            for r in s.query(
                "SELECT value AS v FROM samples WHERE metric = 'clock_event_reasons' ORDER BY ts"
            )
        ]
        sm = s.query("SELECT min(value) AS lo, max(value) AS hi FROM samples WHERE metric = 'sm_clock_mhz'")[
            0
        ]
        info = s.query("SELECT model, driver, uuid FROM gpus")[0]
    assert limit == 700.0 and 680 < peak <= 705
    assert any(m & 0x4 for m in masks) and not any(m & 0xE8 for m in masks)  # power cap, never a slowdown
    assert sm["hi"] == 1980 and sm["lo"] < 1980
    assert (
        info["model"] == "NVIDIA H200" and info["driver"] == "580.159.04" and info["uuid"].startswith("GPU-")
    )


def test_summary_lists_every_file_with_its_reader_and_what_it_stored(tmp_path: Path, db: Path) -> None:
    d = tmp_path / "rec"
    shutil.copytree(SCENARIOS / "app-xid", d)
    (d / "README.md").write_text("# app-xid\n\nThis recording shows an application XID on one of the GPUs.\n")
    r = run_cli("replay", str(d), "--db", str(db))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith(f"{d}: 4 files: 2 read, 1 skipped, 1 ignored\n")
    assert f"{d / 'dcgm-exporter.om.gz'} [OpenMetrics] " in out and "time: sample timestamps" in out
    assert f"{d / 'kernel-gpu-30.log.gz'} [kernel log: syslog / journalctl short-iso] " in out
    assert f"{d / 'README.md'} skipped: documentation (Markdown), not a recording" in out
    assert f"{d / 'expect.json'} ignored: a scenario's expectations (expect.json)" in out
    js = run_cli("replay", str(d), "--db", str(tmp_path / "j.duckdb"), "--json")
    files = {Path(f["path"]).name: f for f in json.loads(js.stdout)["files"]}
    assert (
        files["kernel-gpu-30.log.gz"]["reader"] == "kernel log"
        and files["kernel-gpu-30.log.gz"]["events"] > 0
    )
    assert files["README.md"]["status"] == "skipped" and files["README.md"]["reader"] is None


def test_demo_still_shows_its_alerts() -> None:
    r = run_cli("demo")
    assert r.returncode == 0, r.stderr
    assert "thermal" in r.stdout and "runbook: runbooks/" in r.stdout
    # each alert says whether it still fires, and when (the thermal slowdown ended inside the recording)
    assert (
        "resolved: 2026-11-30 00:18:00Z to 00:31:00Z; runbook: runbooks/gpu-thermal-slowdown.md" in r.stdout
    )


def test_replay_alerts_carry_their_state_and_times(tmp_path: Path) -> None:
    import json

    db = tmp_path / "s.duckdb"
    r = run_cli("replay", str(SCENARIOS / "gpu-fell-off-bus"), "--db", str(db))
    assert "firing since 2026-11-30 00:30:00Z (last seen 01:00:00Z)" in r.stdout
    j = run_cli("replay", str(SCENARIOS / "gpu-fell-off-bus"), "--db", str(db), "--json")
    (a,) = json.loads(j.stdout)["alerts"]
    assert (a["state"], a["first_seen"], a["last_seen"]) == (
        "firing",
        "2026-11-30T00:30:00Z",
        "2026-11-30T01:00:00Z",
    )


def test_a_replay_that_stores_nothing_leaves_no_database_behind(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.csv").write_text("a,b\n1,2\n")
    db = tmp_path / "new.duckdb"
    r = run_cli("replay", str(empty), "--db", str(db))
    assert r.returncode == 3 and "nothing recognised" in r.stderr
    assert not db.exists() and not (tmp_path / "new.duckdb.wal").exists()
    # a database that was there before is the user's: it stays, with what it held
    kept = tmp_path / "kept.duckdb"
    assert run_cli("replay", str(SCENARIOS / "gpu-fell-off-bus"), "--db", str(kept), "-q").returncode == 0
    assert run_cli("replay", str(empty), "--db", str(kept)).returncode == 3
    out = run_cli("alerts", "--db", str(kept), "--json")
    assert out.returncode == 0 and any(a["node"] == "gpu-21" for a in json.loads(out.stdout))


def test_a_plain_dmesg_names_the_gpu_by_its_pci_id_when_no_index_is_known(tmp_path: Path) -> None:
    """`dmesg > dmesg.txt` on a node: uptime stamps, no host, no GPU index; the alert still says which GPU."""
    log = tmp_path / "dmesg.txt"
    log.write_text(
        "[ 1234.567890] NVRM: Xid (PCI:0000:18:00): 79, pid=0, name=python, GPU has fallen off the bus.\n"
        "[ 1240.000001] NVRM: Xid (PCI:0000:18:00): 13, pid=1234, name=python, Graphics SM Warp Exception\n"
    )
    r = run_cli("replay", str(log), "--db", str(tmp_path / "d.duckdb"))
    assert r.returncode == 0, r.stderr
    assert "GPU at 00000000:18:00.0 on unknown: XID 79" in r.stdout and "GPU - on" not in r.stdout
    assert "no host name in the file: stored as node 'unknown' (give --node)" in r.stdout


def test_xids_of_gpus_known_only_by_pci_id_are_an_alert_each(tmp_path: Path) -> None:
    """A `dmesg -T` with no 'GPU at PCI:... GPU-uuid' lines: no GPU index is known, so each PCI id is its own
    GPU; two GPUs' XIDs must never fold into one alert naming only the last (reset the wrong GPU)."""
    import json

    log = tmp_path / "dmesg-T.txt"
    dbe = (
        "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6."
    )
    log.write_text(
        "[Sat Nov 29 10:01:02 2026] NVRM: Xid (PCI:0000:91:00): 79, pid=0, name=python, GPU has fallen off the bus.\n"
        "[Sat Nov 29 10:01:03 2026] NVRM: Xid (PCI:0000:44:00): 79, pid=0, name=python, GPU has fallen off the bus.\n"
        f"[Sat Nov 29 10:05:00 2026] NVRM: Xid (PCI:0000:cb:00): 48, pid=1234, name=python, {dbe}\n"
        f"[Sat Nov 29 10:05:01 2026] NVRM: Xid (PCI:0000:1b:00): 48, pid=1234, name=python, {dbe}\n"
        f"[Sat Nov 29 10:06:01 2026] NVRM: Xid (PCI:0000:1b:00): 48, pid=1234, name=python, {dbe}\n"
    )
    db = tmp_path / "d.duckdb"
    assert run_cli("replay", str(log), "--db", str(db), "--node", "gpu-50", "-q").returncode == 0
    alerts = json.loads(run_cli("alerts", "--db", str(db), "--json").stdout)
    assert sorted(a["category"] for a in alerts) == ["ecc", "ecc", "gpu-lost", "gpu-lost"], alerts
    for pci in ("00000000:91:00.0", "00000000:44:00.0", "00000000:CB:00.0", "00000000:1B:00.0"):
        assert sum(f"GPU at {pci} on gpu-50" in a["summary"] for a in alerts) == 1, pci
    assert any(
        "00000000:1B:00.0" in a["summary"] and " x2" in a["summary"] for a in alerts
    )  # its two lines, one alert
    table = run_cli("events", "--db", str(db)).stdout
    assert "PCI_BUS_ID" in table and "00000000:CB:00.0" in table
