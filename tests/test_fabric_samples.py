"""The port -> samples mapping shared by the fabric collector and replay."""

from __future__ import annotations

from pathlib import Path

from collectors.fabric_samples import DevicePresence, parse_width, reading_samples, unknown_counters
from fleettool.formats.ib_sysfs import IbSysfs, read_ib_sysfs
from fleettool.metrics import METRICS

H100 = Path(__file__).resolve().parent.parent / "fixtures" / "infiniband" / "sysfs-h100"


def test_h100_tree_maps_state_and_readable_counters_only() -> None:
    reading = read_ib_sysfs(H100)
    samples = reading_samples(reading, "gpu-17", 100.0)
    by = {(s.metric, s.sub): s.value for s in samples}
    assert by[("ib_port_state", "port=mlx5_0/1")] == 4.0
    assert by[("ib_port_rate_gbps", "port=mlx5_0/1")] == 400.0
    assert by[("ib_port_width_lanes", "port=mlx5_0/1")] == 4.0
    assert by[("ib_port_link_layer", "port=mlx5_0/1")] == 1.0
    # link_downed=255 and excessive_buffer_overrun_errors=15 are saturated: unknown, not a sample
    assert ("ib_link_downed_total", "port=mlx5_1/1") not in by
    assert ("ib_excessive_buffer_overrun_errors_total", "port=mlx5_1/1") not in by
    assert ("ib_symbol_error_total", "port=mlx5_1/1") in by
    assert all(s.gpu is None and s.metric in METRICS for s in samples)
    port = next(p for p in reading.ports if p.key == "mlx5_1/1")
    assert unknown_counters(port)["counters/link_downed"].startswith("saturated at 255")
    assert reading_samples(reading, "gpu-17", 100.0, counters=False) == [
        s for s in samples if not s.metric.endswith("_total")
    ]


def test_width_from_rate_text() -> None:
    assert parse_width("400 Gb/sec (4X NDR)") == 4
    assert parse_width("100 Gb/sec (2X HDR)") == 2
    assert parse_width("25 Gb/sec") is None


def test_a_device_gone_reads_zero() -> None:
    reading = read_ib_sysfs(H100)
    presence = DevicePresence()
    first = presence.samples(reading, "n", 1.0)
    assert {s.value for s in first} == {1.0}
    gone = IbSysfs(ports=[p for p in reading.ports if p.device != "mlx5_4"])
    later = {s.sub: s.value for s in presence.samples(gone, "n", 2.0)}
    assert later["device=mlx5_4"] == 0.0 and later["device=mlx5_0"] == 1.0
