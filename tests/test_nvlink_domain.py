"""The NVLink domain: NVML fabric info and the active-link count as the NVML collector samples them, the rules
that judge them, and dcgm-exporter's fabric and IMEX fields mapped onto the same metrics.

Fabric answers are fixtures/fabric/*.json (SOURCES.md there: a real H100's state 0, a GB200's completed probe
from gpud#1106, a failed probe from Azure/azhpc-images#506, an H100 whose fabric manager stayed in progress from
NVSentinel#889), played by the fake source as NVML would answer them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fleettool.agent.topology import fetch_fabric
from fleettool.collectors.nvml import NvmlCollector
from fleettool.collectors.series_map import ScrapeMapper
from fleettool.engine.evaluate import evaluate, write_alerts
from fleettool.engine.rules import load_rules
from fleettool.model import Sample
from fleettool.sources.base import FabricInfo
from fleettool.sources.fake import FakeSource
from fleettool.sources.fake_inject import load_fabric, parse_injection
from fleettool.sources.nvml_fabric import MASK_DEGRADED, MASK_UNHEALTHY, health_problems
from fleettool.store import Store
from fleettool.store.alerts import list_alerts

FABRIC = Path(__file__).resolve().parent.parent / "fixtures" / "fabric"
T0 = 1_790_000_000.0
FABRIC_METRICS = {
    "nvlink_fabric_state",
    "nvlink_fabric_status",
    "nvlink_fabric_clique_id",
    "nvlink_fabric_health_mask",
}


class CountingFake(FakeSource):
    """The fake source, counting its fabric calls (what reaches the driver)."""

    calls = 0

    def fabric_info(self, index: int) -> FabricInfo:
        self.calls += 1
        return super().fabric_info(index)


def _run(src: FakeSource, seconds: int, step: int = 10) -> tuple[list[Sample], list[str]]:
    """The NVML collector over the fake source for `seconds` of its clock: samples, event messages."""
    col = NvmlCollector(src, "gb-07")
    assert col.start()
    samples, events = [], []
    try:
        for t in range(0, seconds + 1, step):
            got = col.collect(T0 + t)
            samples += got.samples
            events += [e.message for e in got.events]
    finally:
        col.close()
    return samples, events


def _of(samples: list[Sample], metric: str, gpu: int | None = None) -> list[float]:
    return [s.value for s in samples if s.metric == metric and (gpu is None or s.gpu == gpu)]


def test_a_gb200_in_its_fabric_gives_state_status_and_clique_each_minute() -> None:
    src = FakeSource(gpus=2, clock=T0, fabric=load_fabric(FABRIC / "gb200-completed.json"))
    samples, events = _run(src, 120)
    # three reads (0, 60, 120 s) per GPU
    assert _of(samples, "nvlink_fabric_state", 0) == [3.0, 3.0, 3.0]
    assert _of(samples, "nvlink_fabric_status", 1) == [0.0, 0.0, 0.0]
    assert _of(samples, "nvlink_fabric_clique_id", 1) == [4026.0] * 3
    assert _of(samples, "nvlink_fabric_health_mask") == []  # gpud's paste gives no mask: none invented
    assert not [e for e in events if "Fabric" in e]


@pytest.mark.parametrize(
    ("fixture", "calls"),
    [
        ("h100-hbm3-not-supported.json", 2),  # state 0: once per GPU, then never again
        ("h100-completed-zero-uuid.json", 12),  # completed outside a fabric: each minute (6 reads x 2 GPUs)
    ],
)
def test_a_gpu_outside_a_multi_node_fabric_gives_no_samples(fixture: str, calls: int) -> None:
    src = CountingFake(gpus=2, clock=T0, fabric=load_fabric(FABRIC / fixture))
    samples, events = _run(src, 300)
    assert not [s for s in samples if s.metric in FABRIC_METRICS]
    assert not events  # not supported is learned, never reported
    assert src.calls == calls


def test_an_hgx_h100_whose_registration_falls_back_is_sampled_again() -> None:
    """NVSentinel#889: an HGX H100's fabric manager failed and its GPUs stayed "In Progress". A GPU first read
    completed outside a multi-node fabric is asked again, so the fallback is seen."""
    src = FakeSource(gpus=1, clock=T0, fabric=load_fabric(FABRIC / "h100-completed-zero-uuid.json"))
    col = NvmlCollector(src, "hgx-01")
    assert col.start()
    try:
        first = col.collect(T0).samples
        src.fabric = load_fabric(FABRIC / "h100-fm-stuck-in-progress.json")
        later = col.collect(T0 + 60).samples
    finally:
        col.close()
    assert _of(first, "nvlink_fabric_state") == [] and _of(later, "nvlink_fabric_state") == [2.0]


@pytest.mark.parametrize(
    ("fixture", "state", "status"),
    [("completed-insufficient-resources.json", 3.0, 23.0), ("h100-fm-stuck-in-progress.json", 2.0, None)],
)
def test_a_failed_or_stuck_probe_is_sampled_even_with_an_all_zero_uuid(
    fixture: str, state: float, status: float | None
) -> None:
    src = FakeSource(gpus=1, clock=T0, fabric=load_fabric(FABRIC / fixture))
    samples, _ = _run(src, 0)
    assert _of(samples, "nvlink_fabric_state") == [state]
    assert _of(samples, "nvlink_fabric_status") == ([] if status is None else [status])


def test_an_nvml_error_is_one_event_per_gpu_and_no_sample() -> None:
    src = FakeSource(gpus=2, clock=T0, fabric=load_fabric(FABRIC / "nvml-unknown-error.json"))
    samples, events = _run(src, 180)
    assert not [s for s in samples if s.metric in FABRIC_METRICS]
    fab = [e for e in events if "nvmlDeviceGetGpuFabricInfoV" in e]
    assert len(fab) == 2 and all("Unknown Error" in e for e in fab), events


def test_the_topology_refresh_takes_the_collectors_reading() -> None:
    """One driver call per GPU and period serves both the collector's samples and the topology's keys."""
    src = CountingFake(gpus=4, clock=T0, fabric=load_fabric(FABRIC / "gb200-completed.json"))
    col = NvmlCollector(src, "gb-07")
    assert col.start()
    try:
        col.collect(T0)
        assert src.calls == 4
        keys = fetch_fabric("gb-07", src).nodes["gb-07"]
    finally:
        col.close()
    assert keys["nvlink_domain"] == "9c6f5af3-53bf-49b5-a436-b66766c413c3"
    assert src.calls == 4  # not asked again


def test_links_active_counts_each_gpus_own_links() -> None:
    src = FakeSource(
        gpus=2, clock=T0, nvlinks=18, inject=[parse_injection("nvlink-down@gpu=1,after=100,count=2")]
    )
    samples, _ = _run(src, 120)  # reads at 0, 60 and 120 s
    assert _of(samples, "nvlink_links_active", 0) == [18.0, 18.0, 18.0]
    assert _of(samples, "nvlink_links_active", 1) == [18.0, 18.0, 16.0]


def test_health_mask_decoding_follows_nvml_h() -> None:
    healthy = 0x1AA  # every two-bit field FALSE (2), configuration NONE (1): DCGM's healthy test mask
    assert health_problems(healthy) == [] and health_problems(0) == []
    assert healthy & (MASK_UNHEALTHY | MASK_DEGRADED) == 0
    unhealthy = (healthy & ~0x30) | 0x10
    assert health_problems(unhealthy) == ["route-unhealthy"] and unhealthy & MASK_UNHEALTHY
    assert health_problems(5 << 8) == ["incorrect configuration: insufficient NVLinks"]
    assert (5 << 8) & MASK_UNHEALTHY and not (1 << 8) & MASK_UNHEALTHY
    assert health_problems(0x1A9) == ["degraded-bandwidth"] and 0x1A9 & MASK_DEGRADED


def _alerts(tmp_path: Path, samples: list[Sample]) -> list[tuple[str, int | None]]:
    store = Store(str(tmp_path / "t.duckdb"))
    try:
        store.write_samples(samples)
        write_alerts(store, evaluate(store, load_rules()))
        return sorted((a["rule"], a["gpu"]) for a in list_alerts(store) if a["rule"].startswith("Nvlink"))
    finally:
        store.close()


def test_the_rules_judge_what_the_collector_samples(tmp_path: Path) -> None:
    """20 minutes of a 4-GPU GB200 tray: GPU 1 loses 2 of its 18 links, GPU 2's fabric route goes unhealthy
    (the fake's health mask); GPU 3 has 8 links from the start (fewer than a table's 18: no alert)."""
    info = dataclasses.replace(load_fabric(FABRIC / "gb200-completed.json"), health_mask=0x1AA)  # type: ignore[arg-type]
    src = FakeSource(
        gpus=3,
        clock=T0,
        nvlinks=18,
        fabric=info,
        inject=[
            parse_injection("nvlink-down@gpu=1,after=300,count=2"),
            parse_injection("fabric-unhealthy@gpu=2,after=300"),
        ],
    )
    samples, _ = _run(src, 1200, step=30)
    eight = [
        dataclasses.replace(s, gpu=3, value=8.0)
        for s in samples
        if s.metric == "nvlink_links_active" and s.gpu == 0
    ]
    got = _alerts(tmp_path, samples + eight)
    assert got == [("NvlinkFabricUnhealthy", 2), ("NvlinkLinksFewer", 1)]


def test_gpus_outside_a_fabric_raise_no_nvlink_alert(tmp_path: Path) -> None:
    src = FakeSource(gpus=2, clock=T0, nvlinks=0, fabric=load_fabric(FABRIC / "h100-hbm3-not-supported.json"))
    samples, _ = _run(src, 1200, step=60)
    assert _alerts(tmp_path, samples) == []


# dcgm-exporter's exposition of the fabric and IMEX fields (dcgm_fields.h 170-174, 1502-1503), in its GPU
# template's label order (nvml-dcgm-facts.md section 11): gb-07's GPU 0 in its fabric, GPU 1 registration failed;
# DCGM's int64 blank (9223372036854775792) where a field has no value; the string fields as labels only.
SCRAPE = """# HELP DCGM_FI_DEV_FABRIC_MANAGER_STATUS The status of the fabric manager
# TYPE DCGM_FI_DEV_FABRIC_MANAGER_STATUS gauge
DCGM_FI_DEV_FABRIC_MANAGER_STATUS{gpu="0",UUID="GPU-24fb92fc-15ec-deff-a5c1-82b48e063f59",pci_bus_id="00000008:01:00.0",device="nvidia0",modelName="NVIDIA GB200",Hostname="gb-07",DCGM_FI_DEV_FABRIC_CLUSTER_UUID="9c6f5af3-53bf-49b5-a436-b66766c413c3",DCGM_FI_IMEX_DOMAIN_STATUS="UP"} 3
DCGM_FI_DEV_FABRIC_MANAGER_STATUS{gpu="1",UUID="GPU-5a889549-86cd-3b1b-685e-24042771850c",pci_bus_id="00000009:01:00.0",device="nvidia1",modelName="NVIDIA GB200",Hostname="gb-07",DCGM_FI_DEV_FABRIC_CLUSTER_UUID="",DCGM_FI_IMEX_DOMAIN_STATUS="UP"} 4
# TYPE DCGM_FI_DEV_FABRIC_MANAGER_ERROR_CODE gauge
DCGM_FI_DEV_FABRIC_MANAGER_ERROR_CODE{gpu="0",UUID="GPU-24fb92fc-15ec-deff-a5c1-82b48e063f59",Hostname="gb-07"} 0
DCGM_FI_DEV_FABRIC_MANAGER_ERROR_CODE{gpu="1",UUID="GPU-5a889549-86cd-3b1b-685e-24042771850c",Hostname="gb-07"} -11
# TYPE DCGM_FI_DEV_FABRIC_CLIQUE_ID gauge
DCGM_FI_DEV_FABRIC_CLIQUE_ID{gpu="0",UUID="GPU-24fb92fc-15ec-deff-a5c1-82b48e063f59",Hostname="gb-07"} 4026
DCGM_FI_DEV_FABRIC_CLIQUE_ID{gpu="1",UUID="GPU-5a889549-86cd-3b1b-685e-24042771850c",Hostname="gb-07"} 9223372036854775792
# TYPE DCGM_FI_DEV_FABRIC_HEALTH_MASK gauge
DCGM_FI_DEV_FABRIC_HEALTH_MASK{gpu="0",UUID="GPU-24fb92fc-15ec-deff-a5c1-82b48e063f59",Hostname="gb-07"} 426
# TYPE DCGM_FI_IMEX_DAEMON_STATUS gauge
DCGM_FI_IMEX_DAEMON_STATUS{gpu="0",UUID="GPU-24fb92fc-15ec-deff-a5c1-82b48e063f59",Hostname="gb-07"} 5
"""


def test_dcgm_exporters_fabric_and_imex_fields_map_onto_the_same_metrics() -> None:
    got = ScrapeMapper("gb-07", "dcgm-exporter").map(SCRAPE.encode(), T0)
    assert got.errors == 0
    seen = {(s.metric, s.gpu): s.value for s in got.samples}
    assert seen == {
        ("nvlink_fabric_state", 0): 3.0,
        ("nvlink_fabric_state", 1): 4.0,  # dcgmFabricManagerStatus_t 4: failure
        ("nvlink_fabric_status", 0): 0.0,
        ("nvlink_fabric_status", 1): -11.0,  # DCGM_ST_TIMEOUT (dcgm_structs.h)
        ("nvlink_fabric_clique_id", 0): 4026.0,  # GPU 1's blank is no reading
        ("nvlink_fabric_health_mask", 0): 426.0,
        ("imex_daemon_status", 0): 5.0,
    }
