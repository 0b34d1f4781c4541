"""The reader of each recording format, by the format key recording.identify gives.

Registration is this one table, one way: the reader modules know nothing of it. A new format is one module
with a function `(store, path, opts, report) -> None` and one line here (and its identification in
recording.identify).

A reader's module is imported when a file of its format is first read, not before: a replay of one
dcgm-exporter file never loads the kernel-log, nccl-tests or nvidia-smi parsers, and a replay of kernel logs
never loads numpy and Arrow (the metrics reader's).
"""

from __future__ import annotations

import importlib
from pathlib import Path

from fleettool.ingest.report import FileReport, IngestOptions, Reader
from fleettool.store import Store


def _lazy(module: str, name: str) -> Reader:
    """The reader `name` of fleettool.ingest.`module`, imported on its first call."""

    def reader(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
        fn: Reader = getattr(importlib.import_module(f"fleettool.ingest.{module}"), name)
        fn(store, path, opts, rep)

    reader.__name__ = reader.__qualname__ = name
    return reader


READERS: dict[str, Reader] = {
    "openmetrics": _lazy("read_metrics", "read_openmetrics"),
    "prometheus": _lazy("read_metrics", "read_prometheus"),
    "kmsg": _lazy("read_kernel", "read_kernel_log"),
    "kmsg-journal-json": _lazy("read_kernel", "read_journal_json"),
    "kmsg-raw": _lazy("read_kernel", "read_dev_kmsg"),
    "fleettool-events": _lazy("read_events", "read_fleettool_events"),
    "nccl-tests": _lazy("read_nccl", "read_nccl_text"),
    "nccl-tests-json": _lazy("read_nccl", "read_nccl_json"),
    "nvidia-smi-text": _lazy("read_smi", "read_smi_text"),
    "nvidia-smi-xml": _lazy("read_smi", "read_smi_xml"),
    "dcgmi-diag": _lazy("read_dcgmi", "read_dcgmi_diag"),
    "dcgmi-diag-json": _lazy("read_dcgmi", "read_dcgmi_diag_json"),
    "dcgmi-health": _lazy("read_dcgmi", "read_dcgmi_health"),
    "dcgmi-health-json": _lazy("read_dcgmi", "read_dcgmi_health_json"),
    "dcgmi-dmon": _lazy("read_dcgmi", "read_dcgmi_dmon"),
    "dcgmi-discovery": _lazy("read_dcgmi", "read_dcgmi_discovery"),
    "slurm-topology": _lazy("read_topology", "read_slurm_topology"),
    "sacct": _lazy("read_topology", "read_sacct"),
    "kube-nodes": _lazy("read_topology", "read_kube_nodes"),
    "topology-csv": _lazy("read_topology", "read_topology_csv"),
    "ibstat": _lazy("read_ib", "read_ibstat"),
    "ibv-devinfo": _lazy("read_ib", "read_ibv_devinfo"),
    "perfquery": _lazy("read_ib", "read_perfquery"),
    "iblinkinfo": _lazy("read_ib", "read_iblinkinfo"),
    "ib-sysfs-tar": _lazy("read_ib", "read_ib_sysfs_tarball"),
}
