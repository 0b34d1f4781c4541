"""The agent's pure-Python scrape path (collectors.series_map.ScrapeMapper) stores what replay's Arrow path
(collectors.series.MetricsIngest) stores for the same exposition, on real dcgm-exporter output, and keeps its
per-series map across scrapes without carrying one scrape's GPUs or pods into the next."""

from __future__ import annotations

import gzip
import math
import subprocess
import sys
from pathlib import Path

import pytest

from fleettool.collectors.dcgm_exporter import parse_scrape
from fleettool.collectors.series import MetricsIngest
from fleettool.collectors.series_map import ScrapeMapper
from fleettool.formats.openmetrics import ExpositionParser, parse_stream
from fleettool.model import Sample

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SAMPLES = FIXTURES / "samples" / "dcgm-exporter" / "dcgm-exporter-metrics-samples.txt"


def _blocks() -> list[str]:
    text = SAMPLES.read_text()
    out = []
    for b in text.split("=== SOURCE:")[1:]:
        lines = b.splitlines()[1:]
        out.append("\n".join(ln for ln in lines if not ln.startswith("curl") and ln.strip() != "..."))
    return out


def _arrow_rows(body: bytes, node: str, now: float) -> list[tuple[object, ...]]:
    parser = ExpositionParser("<scrape>", millis=None, strict=False, default_ts=now)
    ing = MetricsIngest(parser, node)
    rows: list[tuple[object, ...]] = []
    for chunk in parse_stream(parser, [body]):
        d = ing.table(chunk).to_pydict()
        for ts, nd, gpu, uuid, metric, sub, value in zip(
            d["ts"], d["node"], d["gpu"], d["uuid"], d["metric"], d["sub"], d["value"], strict=True
        ):
            rows.append((round(ts.timestamp(), 6), nd, gpu, uuid, metric, sub, value))
    return sorted(rows, key=repr)


def _rows(samples: list[Sample]) -> list[tuple[object, ...]]:
    return sorted(
        ((round(s.ts, 6), s.node, s.gpu, s.uuid, s.metric, s.sub, s.value) for s in samples), key=repr
    )


def _same(a: list[tuple[object, ...]], b: list[tuple[object, ...]]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x[:6] == y[:6]
        assert math.isclose(float(x[6]), float(y[6]), rel_tol=1e-12, abs_tol=1e-12)  # type: ignore[arg-type]


def test_every_real_scrape_maps_as_replay_does() -> None:
    blocks = _blocks()
    assert len(blocks) >= 3
    total = 0
    for body in blocks:
        got = parse_scrape(body.encode(), "n", 1796000000.0)
        want = _arrow_rows(body.encode(), "n", 1796000000.0)
        _same(_rows(got.samples), want)
        total += len(want)
    assert total >= 25


def test_recorded_scenario_scrapes_map_as_replay_does() -> None:
    # a recorded run: thousands of lines with timestamps, counters and gauges, DCGM's sentinels included
    body = gzip.decompress(
        (FIXTURES / "scenarios" / "dbe-remap-pending" / "dcgm-exporter.om.gz").read_bytes()
    )
    body = b"\n".join(body.splitlines()[:20000]) + b"\n"
    got = parse_scrape(body, "n", 1796000000.0)
    want = _arrow_rows(body, "n", 1796000000.0)
    assert len(want) > 1000
    _same(_rows(got.samples), want)


SCRAPE = """# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",pci_bus_id="00000000:18:00.0",modelName="NVIDIA H200",Hostname="h",pod="%s",namespace="ml",container="c"} %s
DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-b",pci_bus_id="00000000:2A:00.0",modelName="NVIDIA H200",Hostname="h"} 41
DCGM_FI_DEV_MEMORY_TEMP{gpu="1",UUID="GPU-b",Hostname="h"} 2147483632
"""


def test_mapper_kept_across_scrapes_reports_only_this_scrapes_pods() -> None:
    m = ScrapeMapper("n", "<test>")
    first = m.map((SCRAPE % ("train-1", "55")).encode(), 100.0)
    second = m.map((SCRAPE % ("train-2", "57")).encode(), 110.0)
    assert [(s.ts, s.gpu, s.value) for s in first.samples if s.metric == "gpu_temp_c"] == [
        (100.0, 0, 55.0),
        (100.0, 1, 41.0),
    ]
    assert [(s.ts, s.gpu, s.value) for s in second.samples if s.metric == "gpu_temp_c"] == [
        (110.0, 0, 57.0),
        (110.0, 1, 41.0),
    ]
    assert not any(s.metric == "mem_temp_c" for s in second.samples)  # the int32 sentinel
    assert [p[4] for p in first.pods] == ["train-1"]
    assert [p[4] for p in second.pods] == ["train-2"]  # not train-1 again: it is gone
    assert {(g.gpu, g.pci_bus_id) for g in second.gpus} == {(0, "0000:18:00"), (1, "0000:2a:00")}


def test_bad_line_counted_per_scrape() -> None:
    m = ScrapeMapper("n", "<test>")
    bad = (SCRAPE % ("p", "55")) + 'DCGM_FI_DEV_GPU_TEMP{gpu="0"} not-a-number\n'
    assert m.map(bad.encode(), 1.0).errors == 1
    assert m.map((SCRAPE % ("p", "56")).encode(), 2.0).errors == 0


def test_scrape_path_imports_no_arrow() -> None:
    code = (
        "import sys\n"
        "from fleettool.collectors.dcgm_exporter import parse_scrape\n"
        f"body = open({str(SAMPLES)!r}, 'rb').read()\n"
        "parse_scrape(body, 'n', 1.0)\n"
        "bad = [m for m in ('pyarrow', 'numpy', 'polars', 'pandas') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("value", ["NaN", "+Inf"])
def test_no_value_is_not_a_reading(value: str) -> None:
    body = f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="GPU-a"}} {value}\n'.encode()
    assert parse_scrape(body, "n", 1.0).samples == []
