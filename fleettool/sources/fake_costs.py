"""What each fake read costs: the measured H200 time of the NVML calls it stands for (FakeSource costs=True)."""

# Per-read cost in microseconds on an H200 (sum of the NVML calls each read makes; second-call figures).
# A field-value batch costs about 7.6 ms for 40 fields (~190 us a field).
READ_COST_US: dict[str, float] = {
    "temperature": 3.8,
    "power": 5.6,
    "utilization": 3.3,
    "memory": 7.9,
    "clocks": 2.7 + 2.8,
    "clock_events": 1.4,
    "mem_temperature": 190.0,
    "power_limit": 1.7,
    "ecc": 163.0 + 7.6 + 2.2 + 2.4 + 1.8,
    "remapped_rows": 3.3,
    "remap_histogram": 1.7,
    "retired_pages": 5.5 + 2.9,
    "pcie_link": 2.8 + 29.5,
    "persistence": 6.0 + 2.8,
    "energy": 5420.0,
    "violations": 1006.3 + 640.2,
    "pcie_counters": 7 * 190.0,
    "nvlink": 11.3,
    "limits": 168.5 + 2.7 + 240.8 + 237.9 + 1362.5 + 1368.3 + 1.2 + 3.2,
}
