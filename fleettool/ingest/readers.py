"""The reader of each recording format, by the format key recording.identify gives.

Registration is this one table, one way: the reader modules know nothing of it. A new format is one module
with a function `(store, path, opts, report) -> None` and one line here (and its identification in
recording.identify).
"""

from __future__ import annotations

from fleettool.ingest import read_kernel, read_metrics, read_nccl, read_smi
from fleettool.ingest.report import Reader

READERS: dict[str, Reader] = {
    "openmetrics": read_metrics.read_openmetrics,
    "prometheus": read_metrics.read_prometheus,
    "kmsg": read_kernel.read_kernel_log,
    "kmsg-journal-json": read_kernel.read_journal_json,
    "kmsg-raw": read_kernel.read_dev_kmsg,
    "nccl-tests": read_nccl.read_nccl_text,
    "nccl-tests-json": read_nccl.read_nccl_json,
    "nvidia-smi-text": read_smi.read_smi_text,
    "nvidia-smi-xml": read_smi.read_smi_xml,
}
