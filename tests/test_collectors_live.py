"""The kernel-log and dcgm-exporter collectors against real things: a log file being written, the machine's
/dev/kmsg, journalctl, and a real HTTP server on loopback serving dcgm-exporter text."""

from __future__ import annotations

import http.server
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleettool.collectors.dcgm_exporter import DcgmExporterCollector, parse_scrape
from fleettool.collectors.kmsg import KmsgCollector
from fleettool.sources.base import SourceError
from fleettool.sources.kmsg import DevKmsgSource, FileFollowSource, JournalSource
from fleettool.store import Store
from tests.conftest import FIXTURES


def test_kmsg_collector_follows_a_file_through_rotation(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("2026-11-30T00:00:00+0000 gpu-9 kernel: old line before the agent started\n")
    col = KmsgCollector("gpu-9", source=FileFollowSource(str(log)))
    assert col.start()
    assert col.collect(time.time()).events == []
    with open(log, "a") as f:
        f.write(
            "2026-11-30T00:16:39+0000 gpu-9 kernel: NVRM: GPU at PCI:0000:ab:00: GPU-9c77ac7d-218b-b551-b1fc-dda0a53a6fcc\n"
        )
        f.write(
            "2026-11-30T00:16:40+0000 gpu-9 kernel: NVRM: Xid (PCI:0000:ab:00): 13, pid=1, name=python3, x\n"
        )
        f.write("2026-11-30T00:16:41+0000 gpu-9 kernel: mlx5_core 0000:ab:00.1: link up\n")
    got = col.collect(time.time())
    # the NIC driver's link line is read too: a `nic` event (formats/nic_lines.py), its PCI function kept
    assert [(e.kind, e.code, e.pci_bus_id) for e in got.events] == [
        ("xid", 13, "0000:ab:00"),
        ("nic", None, "0000:ab:00.1"),
    ]
    assert got.gpus[0].uuid == "GPU-9c77ac7d-218b-b551-b1fc-dda0a53a6fcc"
    os.rename(log, tmp_path / "kern.log.1")  # logrotate
    log.write_text(
        "2026-11-30T00:20:00+0000 gpu-9 kernel: NVRM: Xid (PCI:0000:ab:00): 79, GPU has fallen off the bus.\n"
    )
    got = col.collect(time.time())
    assert [(e.kind, e.code) for e in got.events] == [("xid", 79)]
    col.close()


def test_kmsg_events_get_their_gpu_index_from_the_inventory(tmp_path: Path) -> None:
    from fleettool.model import GpuInfo

    log = tmp_path / "kern.log"
    log.write_text("")
    col = KmsgCollector("gpu-9", source=FileFollowSource(str(log)))
    col.start()
    log.write_text("[  10.0] NVRM: Xid (PCI:0000:ab:00): 48, DBE\n")
    got = col.collect(1_800_000_000.0)
    with Store(tmp_path / "s.duckdb") as st:
        st.upsert_gpus([GpuInfo("gpu-9", 5, "GPU-x", "0000:ab:00", "H100")], 1.0)
        st.write_events(got.events)
        assert st.resolve_event_gpus() == 1
        assert st.query("SELECT gpu, uuid, code FROM events") == [{"gpu": 5, "uuid": "GPU-x", "code": 48}]


@pytest.mark.skipif(not os.access("/dev/kmsg", os.R_OK), reason="/dev/kmsg not readable here")
def test_dev_kmsg_reads_real_records_with_wall_time() -> None:
    src = DevKmsgSource(from_start=True)
    src.open()
    try:
        lines = src.read(50)
    finally:
        src.close()
    assert lines, "the kernel ring buffer has at least its boot messages"
    assert lines[0].startswith("[") and "]" in lines[0]
    assert (
        src.boot_time is not None
        and abs(src.boot_time - (time.time() - time.clock_gettime(time.CLOCK_BOOTTIME))) < 5
    )


def test_journal_source_reads_lines_from_a_real_process() -> None:
    # the journal follower is a process pump: drive it with a real process printing journal-style lines
    src = JournalSource(
        ["sh", "-c", "echo '2026-11-30T00:00:01+0000 h kernel: NVRM: Xid (PCI:0000:01:00): 31, x'; sleep 5"]
    )
    src.open()
    lines: list[str] = []
    deadline = time.time() + 5
    while not lines and time.time() < deadline:
        lines = src.read(10)
        time.sleep(0.02)
    src.close()
    assert lines and "Xid" in lines[0]


SCRAPE = b"""# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",pci_bus_id="00000000:1A:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-17",DCGM_FI_DRIVER_VERSION="550.54.15",container="c1",namespace="ml",pod="train-0"} 61
DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-b",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-17",DCGM_FI_DRIVER_VERSION="550.54.15",container="",namespace="",pod=""} 40
# TYPE DCGM_FI_DEV_MEMORY_TEMP gauge
DCGM_FI_DEV_MEMORY_TEMP{gpu="1",UUID="GPU-b",Hostname="gpu-17"} 9223372036854775794
# TYPE DCGM_FI_DEV_ROW_REMAP_PENDING gauge
DCGM_FI_DEV_ROW_REMAP_PENDING{gpu="0",UUID="GPU-a",Hostname="gpu-17"} 1
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a",Hostname="gpu-17"} 1024
"""


@pytest.fixture
def exporter() -> Iterator[tuple[str, list[bytes]]]:
    body = [SCRAPE]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            if self.path != "/metrics":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body[0])

        def log_message(self, *a: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/metrics", body
    srv.shutdown()
    srv.server_close()


def test_dcgm_exporter_collector_scrapes_a_real_endpoint(exporter: tuple[str, list[bytes]]) -> None:
    url, _ = exporter
    col = DcgmExporterCollector("fallback-node", url, every_s=0)
    assert col.start()
    got = col.collect(1_800_000_000.0)
    by = {(s.gpu, s.metric): s for s in got.samples}
    assert by[(0, "gpu_temp_c")].value == 61 and by[(0, "gpu_temp_c")].node == "gpu-17"
    assert by[(0, "gpu_temp_c")].ts == 1_800_000_000.0  # scrape time: the exporter sends no timestamps
    assert (1, "mem_temp_c") not in by  # the not-supported sentinel is dropped
    assert by[(0, "remap_pending")].value == 1 and by[(0, "fb_used_bytes")].value == 1024 * 2**20
    assert {(g.gpu, g.pci_bus_id, g.driver) for g in got.gpus} >= {(0, "0000:1a:00", "550.54.15")}
    assert [(p.gpu, p.namespace, p.pod, p.container) for p in got.pods] == [(0, "ml", "train-0", "c1")]


def test_dcgm_exporter_down_is_unavailable_then_failing(exporter: tuple[str, list[bytes]]) -> None:
    dead = DcgmExporterCollector("n", "http://127.0.0.1:9/metrics", every_s=0, timeout_s=0.5)
    assert dead.collect(1.0).samples == [] and dead.reason is not None  # never reached: not deployed
    url, _ = exporter
    col = DcgmExporterCollector("n", url.replace("/metrics", "/nope"), every_s=0)
    col.scrapes = 1  # it worked before: now a failure is an error the agent reports
    with pytest.raises(SourceError):
        col.collect(2.0)


def test_counters_csv_fields_all_map() -> None:
    from fleettool.metrics import map_dcgm_name

    csv = (FIXTURES.parent / "deploy" / "kubernetes" / "fleettool-counters.csv").read_text()
    fields = [ln.split(",")[0].strip() for ln in csv.splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(fields) >= 50
    unmapped = [f for f in fields if map_dcgm_name(f) is None and f != "DCGM_FI_DRIVER_VERSION"]
    assert unmapped == []
    for need in (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "DCGM_FI_DEV_PCIE_LINK_WIDTH",
    ):
        assert need in fields


def test_every_dcgm_sample_block_parses() -> None:
    text = (FIXTURES / "samples" / "dcgm-exporter" / "dcgm-exporter-metrics-samples.txt").read_text()
    blocks = text.split("=== SOURCE:")[1:]
    total = 0
    for b in blocks:
        body = "\n".join(ln for ln in b.splitlines()[1:] if not ln.startswith("curl") and ln.strip() != "...")
        got = parse_scrape(body.encode(), "n", 1.0)
        total += len(got.samples)
    assert total >= 25


def test_dcgm_exporter_scrapes_every_10_s_through_clock_steps(exporter: tuple[str, list[bytes]]) -> None:
    """The scrape schedule runs on monotonic time: a wall clock stepped back an hour (or forward 30 days, then
    corrected) neither stops the scrapes nor bunches them; the samples carry the wall time."""
    url, _ = exporter
    mono = [5000.0]
    col = DcgmExporterCollector("n", url, every_s=10.0, mono=lambda: mono[0])
    wall = 1_800_000_000.0
    scraped = []
    for k in range(120):  # 2 minutes of 1 s ticks
        if k == 30:
            wall -= 3600.0  # NTP steps the clock back an hour
        if k == 60:
            wall += 30 * 86400.0  # a month ahead ...
        if k == 90:
            wall -= 30 * 86400.0  # ... and corrected
        got = col.collect(wall)
        if got.samples:
            scraped.append((k, got.samples[0].ts))
        wall += 1.0
        mono[0] += 1.0
    assert [k for k, _ in scraped] == list(range(0, 120, 10))
    assert scraped[3][1] == 1_800_000_000.0 + 30 - 3600.0  # stamped with the wall clock as it reads
