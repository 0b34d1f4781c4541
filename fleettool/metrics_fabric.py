"""The fabric's metrics: the NVLink domain (NVML fabric info) and InfiniBand / RoCE ports (sysfs), part of
metrics.METRICS. Sub-entities: `sub=port=<device>/<port>` for a port, `sub=device=<device>` for an RDMA device,
`sub=netdev=<name>` for a network interface; `gpu` is None for all but the NVLink series."""

from __future__ import annotations

from fleettool.metrics_def import MetricDef

FABRIC_DEFS: list[MetricDef] = [
    # the NVLink domain (NVML nvmlDeviceGetGpuFabricInfoV; per GPU)
    MetricDef(
        "nvlink_fabric_state",
        "gauge",
        "enum",
        "NVML GPU fabric state (0 n/a, 1 not started, 2 in progress, 3 done; DCGM adds 4 failed, 5, 6)",
    ),
    MetricDef("nvlink_fabric_status", "gauge", "code", "NVML return code of the fabric probe (0 success)"),
    MetricDef("nvlink_fabric_health_mask", "gauge", "bitmask", "NVML GPU fabric health mask"),
    MetricDef("nvlink_fabric_clique_id", "gauge", "id", "NVML GPU fabric clique ID"),
    MetricDef("nvlink_links_active", "gauge", "links", "NVLinks of this GPU that are active"),
    # IMEX (dcgm-exporter DCGM_FI_IMEX_DAEMON_STATUS, dcgm_fields.h 1503; `nvidia-imex-ctl -q`)
    MetricDef(
        "imex_daemon_status",
        "gauge",
        "enum",
        "IMEX daemon status (0 initializing .. 5 ready, 6 shutting down, 7 unavailable; -1 not installed, "
        "-2 not configured, -3 command error)",
    ),
    # InfiniBand / RoCE ports (sysfs /sys/class/infiniband; gpu is None, sub=port=<device>/<port>)
    MetricDef(
        "ib_port_state", "gauge", "enum", "IB port state (1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER)"
    ),
    MetricDef(
        "ib_port_phys_state", "gauge", "enum", "IB port physical state (2 Polling, 3 Disabled, 5 LinkUp, ...)"
    ),
    MetricDef("ib_port_rate_gbps", "gauge", "Gb/s", "IB port rate"),
    MetricDef("ib_port_width_lanes", "gauge", "lanes", "IB port width (the 4 of 4X)"),
    MetricDef(
        "ib_port_link_layer", "gauge", "enum", "IB port link layer (1 InfiniBand, 2 Ethernet/RoCE, 0 other)"
    ),
    MetricDef("ib_device_present", "gauge", "bool", "The RDMA device is in sysfs (sub=device=<device>)"),
    MetricDef(
        "ib_port_roce_v2_gids",
        "gauge",
        "entries",
        "Routable RoCE v2 entries of a RoCE port's GID table (ports/<n>/gids + gid_attrs/types; no link-local)",
    ),
    # the RDMA device's PCIe link (its PCI function's current_link_width / max_link_width; sub=device=<device>)
    MetricDef(
        "nic_pcie_width_lanes", "gauge", "lanes", "PCIe link width of the RDMA device (sub=device=<device>)"
    ),
    MetricDef(
        "nic_pcie_width_max_lanes",
        "gauge",
        "lanes",
        "PCIe maximum link width of the RDMA device (sub=device=<device>)",
    ),
    MetricDef(
        "net_carrier_changes_total", "counter", "changes", "Carrier changes of a netdev (sub=netdev=<name>)"
    ),
]

# IB port counters kept as counters (sub=port=<device>/<port>), by their sysfs file under ports/<n>/: the legacy
# PortCounters error counters (IBTA v1.3 table 247) and mlx5's hw_counters of transport errors. Data and packet
# counters are left out: they change every read and no rule judges them.
IB_COUNTER_METRICS: dict[str, str] = {
    "counters/symbol_error": "ib_symbol_error_total",
    "counters/link_error_recovery": "ib_link_error_recovery_total",
    "counters/link_downed": "ib_link_downed_total",
    "counters/port_rcv_errors": "ib_port_rcv_errors_total",
    "counters/port_rcv_remote_physical_errors": "ib_port_rcv_remote_physical_errors_total",
    "counters/port_rcv_switch_relay_errors": "ib_port_rcv_switch_relay_errors_total",
    "counters/port_xmit_discards": "ib_port_xmit_discards_total",
    "counters/port_xmit_constraint_errors": "ib_port_xmit_constraint_errors_total",
    "counters/port_rcv_constraint_errors": "ib_port_rcv_constraint_errors_total",
    "counters/local_link_integrity_errors": "ib_local_link_integrity_errors_total",
    "counters/excessive_buffer_overrun_errors": "ib_excessive_buffer_overrun_errors_total",
    "counters/VL15_dropped": "ib_vl15_dropped_total",
    "counters/port_xmit_wait": "ib_port_xmit_wait_total",
    "hw_counters/rnr_nak_retry_err": "ib_rnr_nak_retry_err_total",
    "hw_counters/local_ack_timeout_err": "ib_local_ack_timeout_err_total",
    "hw_counters/out_of_buffer": "ib_out_of_buffer_total",
    "hw_counters/out_of_sequence": "ib_out_of_sequence_total",
    "hw_counters/packet_seq_err": "ib_packet_seq_err_total",
    "hw_counters/req_cqe_error": "ib_req_cqe_error_total",
    "hw_counters/resp_cqe_error": "ib_resp_cqe_error_total",
}
FABRIC_DEFS.extend(
    MetricDef(m, "counter", "errors" if "xmit_wait" not in m else "ticks", f"IB port {f.split('/')[1]} ({f})")
    for f, m in IB_COUNTER_METRICS.items()
)

# node_exporter's own names (collector/infiniband_linux.go @a7dcc3a, `node_infiniband_<name>{device,port}`, read from
# the same sysfs files; and `node_network_carrier_changes_total{device}`) -> (metric, scale, the sysfs counter it
# reads, whose width decides saturation). Rate: bytes/s -> Gb/s. node_exporter serves no width and no link layer;
# its data/packet counters and hw_counters without a metric here are not stored.
_NODE_EXPORTER_COUNTERS = {
    "symbol_error_total": "counters/symbol_error",
    "link_error_recovery_total": "counters/link_error_recovery",
    "link_downed_total": "counters/link_downed",
    "port_errors_received_total": "counters/port_rcv_errors",
    "port_receive_remote_physical_errors_total": "counters/port_rcv_remote_physical_errors",
    "port_receive_switch_relay_errors_total": "counters/port_rcv_switch_relay_errors",
    "port_discards_transmitted_total": "counters/port_xmit_discards",
    "port_constraint_errors_transmitted_total": "counters/port_xmit_constraint_errors",
    "port_constraint_errors_received_total": "counters/port_rcv_constraint_errors",
    "local_link_integrity_errors_total": "counters/local_link_integrity_errors",
    "excessive_buffer_overrun_errors_total": "counters/excessive_buffer_overrun_errors",
    "vl15_dropped_total": "counters/VL15_dropped",
    "port_transmit_wait_total": "counters/port_xmit_wait",
    "rnr_nak_retry_packets_received_total": "hw_counters/rnr_nak_retry_err",
    "local_ack_timeout_errors_total": "hw_counters/local_ack_timeout_err",
    "out_of_buffer_drops_total": "hw_counters/out_of_buffer",
    "out_of_sequence_packets_received_total": "hw_counters/out_of_sequence",
    "packet_sequence_errors_total": "hw_counters/packet_seq_err",
    "req_cqes_errors_total": "hw_counters/req_cqe_error",
    "resp_cqes_errors_total": "hw_counters/resp_cqe_error",
}
NODE_EXPORTER_NAMES: dict[str, tuple[str, float, str | None]] = {
    "node_infiniband_state_id": ("ib_port_state", 1.0, None),
    "node_infiniband_physical_state_id": ("ib_port_phys_state", 1.0, None),
    "node_infiniband_rate_bytes_per_second": ("ib_port_rate_gbps", 8 / 1e9, None),
    "node_network_carrier_changes_total": ("net_carrier_changes_total", 1.0, None),
} | {f"node_infiniband_{n}": (IB_COUNTER_METRICS[f], 1.0, f) for n, f in _NODE_EXPORTER_COUNTERS.items()}
