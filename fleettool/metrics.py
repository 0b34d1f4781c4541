"""The canonical metric vocabulary and how dcgm-exporter's DCGM_FI_* names map onto it.

Every source writes these names; NVML temperature and DCGM_FI_DEV_GPU_TEMP are the same metric. Units are fixed
per metric (the name ends with its unit where it has one) and conversions happen at the source boundary.
Field names and ids are from fixtures/samples/nvml-dcgm-facts.md (dcgm_fields.h @72fa3fea, dcgm-exporter @d5e5f510).
"""

from __future__ import annotations

import re

from fleettool.metrics_def import MetricDef

_DEFS = [
    MetricDef("gpu_temp_c", "gauge", "celsius", "GPU core temperature"),
    MetricDef("mem_temp_c", "gauge", "celsius", "HBM temperature"),
    MetricDef("temp_slowdown_c", "gauge", "celsius", "Temperature at which the GPU slows down"),
    MetricDef("temp_shutdown_c", "gauge", "celsius", "Temperature at which the GPU shuts down"),
    MetricDef(
        "temp_margin_c",
        "gauge",
        "celsius",
        "Degrees below the slowdown limit (T.Limit); nvidia-smi GPU T.Limit Temp",
    ),
    MetricDef("temp_gpu_max_c", "gauge", "celsius", "Maximum operating GPU temperature"),
    MetricDef("temp_mem_max_c", "gauge", "celsius", "Maximum operating HBM temperature"),
    MetricDef("power_w", "gauge", "watts", "Board power draw"),
    MetricDef("power_limit_w", "gauge", "watts", "Enforced power limit"),
    MetricDef("energy_j", "counter", "joules", "Total energy since driver load"),
    MetricDef("sm_clock_mhz", "gauge", "MHz", "SM clock"),
    MetricDef("mem_clock_mhz", "gauge", "MHz", "Memory clock"),
    MetricDef("sm_clock_max_mhz", "gauge", "MHz", "Maximum SM clock"),
    MetricDef("mem_clock_max_mhz", "gauge", "MHz", "Maximum memory clock"),
    MetricDef("gpu_util_pct", "gauge", "percent", "GPU utilisation"),
    MetricDef("mem_util_pct", "gauge", "percent", "Memory copy utilisation"),
    MetricDef("fb_used_bytes", "gauge", "bytes", "Frame buffer used"),
    MetricDef("fb_total_bytes", "gauge", "bytes", "Frame buffer total"),
    MetricDef("clock_event_reasons", "gauge", "bitmask", "Clock-event (throttle) reasons bitmask"),
    MetricDef("violation_power_us", "counter", "microseconds", "Time clocks were held by the power policy"),
    MetricDef(
        "violation_thermal_us", "counter", "microseconds", "Time clocks were held by the thermal policy"
    ),
    MetricDef("violation_sync_boost_us", "counter", "microseconds", "Time held by sync boost"),
    MetricDef("violation_board_limit_us", "counter", "microseconds", "Time held by the board limit"),
    MetricDef("violation_low_util_us", "counter", "microseconds", "Time held by low utilisation"),
    MetricDef("violation_reliability_us", "counter", "microseconds", "Time held by board reliability limit"),
    MetricDef("ecc_mode", "gauge", "bool", "ECC enabled (current mode)"),
    MetricDef("ecc_sbe_volatile", "counter", "errors", "Corrected ECC errors since driver load"),
    MetricDef("ecc_dbe_volatile", "counter", "errors", "Uncorrected ECC errors since driver load"),
    MetricDef("ecc_sbe_aggregate", "counter", "errors", "Corrected ECC errors, lifetime"),
    MetricDef("ecc_dbe_aggregate", "counter", "errors", "Uncorrected ECC errors, lifetime"),
    MetricDef("remap_correctable_rows", "counter", "rows", "Rows remapped for correctable errors"),
    MetricDef("remap_uncorrectable_rows", "counter", "rows", "Rows remapped for uncorrectable errors"),
    MetricDef("remap_pending", "gauge", "bool", "A row remap is pending a GPU reset"),
    MetricDef("remap_failure", "gauge", "bool", "A row remap has failed"),
    MetricDef("remap_bank_max", "gauge", "banks", "Banks with all spare rows available"),
    MetricDef("remap_bank_high", "gauge", "banks", "Banks with high spare-row availability"),
    MetricDef("remap_bank_partial", "gauge", "banks", "Banks with partial spare-row availability"),
    MetricDef("remap_bank_low", "gauge", "banks", "Banks with low spare-row availability"),
    MetricDef("remap_bank_none", "gauge", "banks", "Banks with no spare rows left"),
    MetricDef("retired_pages_sbe", "counter", "pages", "Pages retired for multiple single-bit errors"),
    MetricDef("retired_pages_dbe", "counter", "pages", "Pages retired for double-bit errors"),
    MetricDef("retired_pages_pending", "gauge", "bool", "A page retirement is pending"),
    MetricDef("pcie_link_gen", "gauge", "generation", "Current PCIe generation"),
    MetricDef("pcie_link_gen_max", "gauge", "generation", "Maximum PCIe generation (device and system)"),
    MetricDef("pcie_link_width", "gauge", "lanes", "Current PCIe width"),
    MetricDef("pcie_link_width_max", "gauge", "lanes", "Maximum PCIe width"),
    MetricDef("pcie_replay_total", "counter", "replays", "PCIe replays since reset"),
    MetricDef("pcie_replay_rollover_total", "counter", "rollovers", "PCIe replay counter rollovers"),
    MetricDef("pcie_l0_to_recovery_total", "counter", "transitions", "PCIe L0 to recovery transitions"),
    MetricDef("pcie_correctable_errors_total", "counter", "errors", "PCIe correctable errors"),
    MetricDef("pcie_fatal_errors_total", "counter", "errors", "PCIe fatal errors"),
    MetricDef("pcie_nonfatal_errors_total", "counter", "errors", "PCIe non-fatal errors"),
    MetricDef("nvlink_link_up", "gauge", "bool", "NVLink link active (sub=link=N)"),
    MetricDef("nvlink_crc_flit_errors_total", "counter", "errors", "NVLink CRC flit errors"),
    MetricDef("nvlink_crc_data_errors_total", "counter", "errors", "NVLink CRC data errors"),
    MetricDef("nvlink_replay_errors_total", "counter", "errors", "NVLink replay errors"),
    MetricDef("nvlink_recovery_errors_total", "counter", "errors", "NVLink recovery errors"),
    MetricDef("nvlink_bandwidth_total", "counter", "bytes", "NVLink bandwidth counter"),
    MetricDef("persistence_mode", "gauge", "bool", "Persistence mode enabled"),
    MetricDef("pstate", "gauge", "state", "Performance state"),
    MetricDef("xid_last", "gauge", "code", "Last XID seen by DCGM (does not reset; see events)"),
    MetricDef("tensor_active_ratio", "gauge", "ratio", "Tensor pipe active ratio"),
    MetricDef("sm_active_ratio", "gauge", "ratio", "SM active ratio"),
    MetricDef("gr_engine_active_ratio", "gauge", "ratio", "Graphics engine active ratio"),
    MetricDef("dram_active_ratio", "gauge", "ratio", "DRAM active ratio"),
    MetricDef(
        "recovery_action", "gauge", "enum", "NVML GPU recovery action (0 none, 1 reset, 2 reboot, ...)"
    ),
    MetricDef("gpu_count", "gauge", "gpus", "GPUs the node sees"),
    MetricDef("gpu_count_expected", "gauge", "gpus", "GPUs the node should have"),
    MetricDef("agent_collector_up", "gauge", "bool", "The collector's last run succeeded (sub=collector=ID)"),
    MetricDef(
        "agent_collector_available",
        "gauge",
        "bool",
        "The collector's source exists here (sub=collector=ID); 0 = not deployed / no driver",
    ),
    MetricDef("agent_collector_hung", "gauge", "bool", "The collector is stuck in a call (sub=collector=ID)"),
    MetricDef(
        "agent_collector_duration_s", "gauge", "seconds", "The collector's last run time (sub=collector=ID)"
    ),
    MetricDef(
        "agent_collector_errors_total", "counter", "errors", "Errors met by the collector (sub=collector=ID)"
    ),
    MetricDef("agent_nvml_available", "gauge", "bool", "NVML could be loaded and initialised"),
    MetricDef(
        "agent_nvml_periods_skipped_total",
        "counter",
        "periods",
        "Periods of an NVML read tier that passed with no read at all (sub=tier=fast|medium|dear|static)",
    ),
    MetricDef(
        "agent_nvml_gpu_hung",
        "gauge",
        "bool",
        "An NVML call on this GPU is stuck: its reads wait until it returns (the event names the call)",
    ),
    MetricDef(
        "agent_nvml_reads_skipped_total",
        "counter",
        "reads",
        "Reads of this GPU not made: a call on it was stuck, or on the GPU before it in that collection",
    ),
    MetricDef("agent_buffer_rows", "gauge", "rows", "Rows waiting to be flushed to the store"),
    MetricDef("agent_flush_failures_total", "counter", "failures", "Failed flushes to the store"),
    MetricDef(
        "agent_store_healthy",
        "gauge",
        "bool",
        "The store can be judged: not damaged, its rule evaluation and checkpoint succeed (0: alerting is off)",
    ),
    MetricDef("agent_dropped_rows_total", "counter", "rows", "Rows dropped because the buffer was full"),
    MetricDef(
        "agent_events_deduplicated_total",
        "counter",
        "events",
        "XIDs dropped as reported by both NVML's event API and the kernel log",
    ),
]

from fleettool.metrics_fabric import FABRIC_DEFS, IB_COUNTER_METRICS  # noqa: E402

_DEFS.extend(FABRIC_DEFS)
__all__ = ["IB_COUNTER_METRICS", "MetricDef"]

METRICS: dict[str, MetricDef] = {d.name: d for d in _DEFS}

# dcgm-exporter name -> (canonical metric, scale applied to the value). DCGM 4 aliases map to the same metric.
_DCGM: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_TEMP": ("gpu_temp_c", 1.0),
    "DCGM_FI_DEV_GPU_TEMP_CELSIUS": ("gpu_temp_c", 1.0),
    "DCGM_FI_DEV_MEMORY_TEMP": ("mem_temp_c", 1.0),
    "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS": ("mem_temp_c", 1.0),
    "DCGM_FI_DEV_SLOWDOWN_TEMP": ("temp_slowdown_c", 1.0),
    "DCGM_FI_DEV_GPU_TEMP_SLOWDOWN_CELSIUS": ("temp_slowdown_c", 1.0),
    "DCGM_FI_DEV_SHUTDOWN_TEMP": ("temp_shutdown_c", 1.0),
    "DCGM_FI_DEV_GPU_TEMP_SHUTDOWN_CELSIUS": ("temp_shutdown_c", 1.0),
    "DCGM_FI_DEV_GPU_MAX_OP_TEMP": ("temp_gpu_max_c", 1.0),
    "DCGM_FI_DEV_GPU_MAX_OP_TEMP_CELSIUS": ("temp_gpu_max_c", 1.0),
    "DCGM_FI_DEV_MEM_MAX_OP_TEMP": ("temp_mem_max_c", 1.0),
    "DCGM_FI_DEV_MEM_MAX_OP_TEMP_CELSIUS": ("temp_mem_max_c", 1.0),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_BOARD_POWER_WATTS": ("power_w", 1.0),
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": ("power_limit_w", 1.0),
    "DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS": ("power_limit_w", 1.0),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_w", 1.0),
    "DCGM_FI_DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS": ("power_limit_w", 1.0),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_j", 1e-3),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", 1.0),
    "DCGM_FI_DEV_MAX_SM_CLOCK": ("sm_clock_max_mhz", 1.0),
    "DCGM_FI_DEV_MAX_MEM_CLOCK": ("mem_clock_max_mhz", 1.0),
    "DCGM_FI_DEV_GPU_UTIL": ("gpu_util_pct", 1.0),
    "DCGM_FI_DEV_GPU_UTIL_RATIO": ("gpu_util_pct", 1.0),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("mem_util_pct", 1.0),
    "DCGM_FI_DEV_FB_USED": ("fb_used_bytes", 1024.0 * 1024.0),
    "DCGM_FI_DEV_FB_TOTAL": ("fb_total_bytes", 1024.0 * 1024.0),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("clock_event_reasons", 1.0),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("clock_event_reasons", 1.0),
    "DCGM_FI_DEV_POWER_VIOLATION": ("violation_power_us", 1e-3),
    "DCGM_FI_DEV_THERMAL_VIOLATION": ("violation_thermal_us", 1e-3),
    "DCGM_FI_DEV_SYNC_BOOST_VIOLATION": ("violation_sync_boost_us", 1e-3),
    "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION": ("violation_board_limit_us", 1e-3),
    "DCGM_FI_DEV_LOW_UTIL_VIOLATION": ("violation_low_util_us", 1e-3),
    "DCGM_FI_DEV_RELIABILITY_VIOLATION": ("violation_reliability_us", 1e-3),
    "DCGM_FI_DEV_ECC_CURRENT": ("ecc_mode", 1.0),
    "DCGM_FI_DEV_ECC_MODE": ("ecc_mode", 1.0),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("ecc_sbe_volatile", 1.0),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc_dbe_volatile", 1.0),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": ("ecc_sbe_aggregate", 1.0),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": ("ecc_dbe_aggregate", 1.0),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("remap_correctable_rows", 1.0),
    "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL": ("remap_correctable_rows", 1.0),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("remap_uncorrectable_rows", 1.0),
    "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL": ("remap_uncorrectable_rows", 1.0),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": ("remap_pending", 1.0),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("remap_failure", 1.0),
    "DCGM_FI_DEV_ROW_REMAP_FAILED": ("remap_failure", 1.0),
    "DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_MAX": ("remap_bank_max", 1.0),
    "DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_HIGH": ("remap_bank_high", 1.0),
    "DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_PARTIAL": ("remap_bank_partial", 1.0),
    "DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_LOW": ("remap_bank_low", 1.0),
    "DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_NONE": ("remap_bank_none", 1.0),
    "DCGM_FI_DEV_BANK_REMAP_AVAIL_MAX": ("remap_bank_max", 1.0),
    "DCGM_FI_DEV_BANK_REMAP_AVAIL_HIGH": ("remap_bank_high", 1.0),
    "DCGM_FI_DEV_BANK_REMAP_AVAIL_PARTIAL": ("remap_bank_partial", 1.0),
    "DCGM_FI_DEV_BANK_REMAP_AVAIL_LOW": ("remap_bank_low", 1.0),
    "DCGM_FI_DEV_BANK_REMAP_AVAIL_NONE": ("remap_bank_none", 1.0),
    "DCGM_FI_DEV_RETIRED_SBE": ("retired_pages_sbe", 1.0),
    "DCGM_FI_DEV_RETIRED_DBE": ("retired_pages_dbe", 1.0),
    "DCGM_FI_DEV_RETIRED_PENDING": ("retired_pages_pending", 1.0),
    "DCGM_FI_DEV_PAGE_RETIRED_SBE_TOTAL": ("retired_pages_sbe", 1.0),
    "DCGM_FI_DEV_PAGE_RETIRED_DBE_TOTAL": ("retired_pages_dbe", 1.0),
    "DCGM_FI_DEV_PAGE_RETIRED_PENDING": ("retired_pages_pending", 1.0),
    "DCGM_FI_DEV_PCIE_LINK_GEN": ("pcie_link_gen", 1.0),
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": ("pcie_link_gen_max", 1.0),
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": ("pcie_link_width", 1.0),
    "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": ("pcie_link_width_max", 1.0),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("pcie_replay_total", 1.0),
    "DCGM_FI_DEV_PCIE_REPLAY_TOTAL": ("pcie_replay_total", 1.0),
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": ("nvlink_crc_flit_errors_total", 1.0),
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_TOTAL": ("nvlink_crc_flit_errors_total", 1.0),
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": ("nvlink_crc_data_errors_total", 1.0),
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_TOTAL": ("nvlink_crc_data_errors_total", 1.0),
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": ("nvlink_replay_errors_total", 1.0),
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_TOTAL": ("nvlink_replay_errors_total", 1.0),
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": ("nvlink_recovery_errors_total", 1.0),
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_TOTAL": ("nvlink_recovery_errors_total", 1.0),
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": ("nvlink_bandwidth_total", 1.0),
    "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL": ("nvlink_bandwidth_total", 1.0),
    "DCGM_FI_DEV_PSTATE": ("pstate", 1.0),
    "DCGM_FI_DEV_GPU_PSTATE": ("pstate", 1.0),
    "DCGM_FI_DEV_XID_ERRORS": ("xid_last", 1.0),
    "DCGM_FI_DEV_XID_ERROR": ("xid_last", 1.0),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active_ratio", 1.0),
    "DCGM_FI_PROF_TENSOR_UTIL_RATIO": ("tensor_active_ratio", 1.0),
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active_ratio", 1.0),
    "DCGM_FI_PROF_SM_UTIL_RATIO": ("sm_active_ratio", 1.0),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gr_engine_active_ratio", 1.0),
    "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO": ("gr_engine_active_ratio", 1.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_active_ratio", 1.0),
    "DCGM_FI_PROF_DRAM_UTIL_RATIO": ("dram_active_ratio", 1.0),
    "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION": ("recovery_action", 1.0),
    "DCGM_FI_DEV_GPU_RECOVERY_ACTION": ("recovery_action", 1.0),
    # the NVLink fabric (dcgm_fields.h 170-174). FABRIC_MANAGER_STATUS is dcgmFabricManagerStatus_t: 0 not
    # supported, 1 not started, 2 in progress, 3 success (NVML's fabric states, one for one), then 4 failure, 5
    # unrecognized, 6 NVML too old; its ERROR_CODE (a DCGM return code, 0 success; blank until the probe
    # completed) stands for NVML's probe status. FABRIC_CLUSTER_UUID and IMEX_DOMAIN_STATUS are strings, which
    # dcgm-exporter serves only as labels: not kept.
    "DCGM_FI_DEV_FABRIC_MANAGER_STATUS": ("nvlink_fabric_state", 1.0),
    "DCGM_FI_DEV_FABRIC_MANAGER_ERROR_CODE": ("nvlink_fabric_status", 1.0),
    "DCGM_FI_DEV_FABRIC_MANAGER_ERROR": ("nvlink_fabric_status", 1.0),
    "DCGM_FI_DEV_FABRIC_CLIQUE_ID": ("nvlink_fabric_clique_id", 1.0),
    "DCGM_FI_DEV_FABRIC_HEALTH_MASK": ("nvlink_fabric_health_mask", 1.0),
    "DCGM_FI_IMEX_DAEMON_STATUS": ("imex_daemon_status", 1.0),
}

# Per-link NVLink fields: DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L3 and DCGM 4's ..._ERROR_L3_TOTAL.
_DCGM_LINK = re.compile(
    r"^DCGM_FI_DEV_NVLINK_(CRC_FLIT|CRC_DATA|REPLAY|RECOVERY)_ERROR(?:_COUNT)?_L(\d+)(?:_TOTAL)?$"
)
_LINK_METRIC = {
    "CRC_FLIT": "nvlink_crc_flit_errors_total",
    "CRC_DATA": "nvlink_crc_data_errors_total",
    "REPLAY": "nvlink_replay_errors_total",
    "RECOVERY": "nvlink_recovery_errors_total",
}

# DCGM's "blank" sentinels (dcgm_structs.h): not supported / not found. The int64 and fp64 blanks (>= 2**47)
# are never readings; the int32 ones (0x7ffffff0..0x7fffffff) only count for int32 (gauge) fields, since a
# 64-bit counter may pass through that range. Dropped in collectors/series.py.
DCGM_INT64_BLANK = 0x7FFFFFFFFFFFFFF0
DCGM_INT32_BLANK = 0x7FFFFFF0
DCGM_FP64_BLANK = 140737488355328.0


def map_dcgm_name(name: str) -> tuple[str, float, str] | None:
    """dcgm-exporter metric name -> (canonical metric, scale, sub) or None when fleettool does not keep it."""
    hit = _DCGM.get(name)
    if hit is not None:
        return hit[0], hit[1], ""
    m = _DCGM_LINK.match(name)
    if m:
        return _LINK_METRIC[m.group(1)], 1.0, f"link={int(m.group(2))}"
    return None


# Prometheus names the agent exports and records (fleettool's own names): fleettool_gpu_<metric>.
OWN_PREFIX = "fleettool_"


def own_metric_name(metric: str) -> str:
    return f"{OWN_PREFIX}{metric}"


# unit suffix of the canonical name -> (base-unit suffix on /metrics, factor to base units)
_UNIT_SUFFIXES = (
    ("_mhz", "_hertz", 1e6),
    ("_pct", "_ratio", 0.01),
    ("_us", "_seconds", 1e-6),
    ("_c", "_celsius", 1.0),
    ("_w", "_watts", 1.0),
    ("_j", "_joules", 1.0),
    ("_s", "_seconds", 1.0),
)
_PROM_RENAMES = {"gpu_count": "gpus", "gpu_count_expected": "gpus_expected"}


def prom_spec(metric: str) -> tuple[str, float]:
    """The name and scale on the agent's /metrics: base units (hertz, seconds, ratios), counters with `_total`,
    as Prometheus's naming guide and `promtool check metrics` want. gpu_temp_c -> (fleettool_gpu_temp_celsius,
    1), sm_clock_mhz -> (fleettool_sm_clock_hertz, 1e6), violation_power_us -> (..._seconds_total, 1e-6)."""
    d = METRICS.get(metric)
    base = _PROM_RENAMES.get(metric, metric)
    scale = 1.0
    counter = d is not None and d.kind == "counter"
    stem = base[: -len("_total")] if base.endswith("_total") else base
    for suf, unit, factor in _UNIT_SUFFIXES:
        if stem.endswith(suf):
            stem, scale = stem[: -len(suf)] + unit, factor
            break
    name = f"{OWN_PREFIX}{stem}"
    if counter or base.endswith("_total"):
        name += "_total"
    return name, scale


def prom_name(metric: str) -> str:
    return prom_spec(metric)[0]


_FROM_PROM: dict[str, tuple[str, float]] = {}


def metric_of_own_name(name: str) -> str | None:
    hit = own_name_spec(name)
    return hit[0] if hit else None


def own_name_spec(name: str) -> tuple[str, float] | None:
    """fleettool_<metric> (recordings) or its /metrics spelling (base units, `_total`) -> (metric, scale to
    divide by), or None."""
    if not name.startswith(OWN_PREFIX):
        return None
    m = name[len(OWN_PREFIX) :]
    if m in METRICS:
        return m, 1.0
    if not _FROM_PROM:
        for metric in METRICS:
            pn, sc = prom_spec(metric)
            _FROM_PROM[pn] = (metric, sc)
    return _FROM_PROM.get(name)
    m = name[len(OWN_PREFIX) :]
    if m in METRICS:
        return m
    if m.endswith("_total") and m[: -len("_total")] in METRICS:
        return m[: -len("_total")]
    return None


# Clock-event reason bits (nvml.h; nvml-dcgm-facts.md section 4).
CLOCK_EVENT_BITS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake",
    0x100: "display_clock_setting",
    0x200: "board_limit",
    0x400: "reliability",
}
# Reasons that are findings rather than normal operation: power capping (0x4) and idle are normal.
CLOCK_EVENT_FINDINGS = 0x8 | 0x20 | 0x40 | 0x80


def decode_clock_events(mask: int) -> list[str]:
    """Bitmask -> reason names, lowest bit first; unknown bits are named by their hex value."""
    out = []
    bit = 1
    m = int(mask)
    while m:
        if m & 1:
            out.append(CLOCK_EVENT_BITS.get(bit, hex(bit)))
        m >>= 1
        bit <<= 1
    return out
