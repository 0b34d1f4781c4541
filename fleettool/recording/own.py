"""Read back a recording in fleettool's own OpenMetrics names: the inverse of recording.writer.

The writer's labels are fixed (hostname, gpu, UUID, pci_bus_id, modelName, driver, and one label for the
series' sub key, e.g. link="0"), so this reader needs no series mapping: fleettool_<metric> names its metric
(metrics.own_name_spec). The fake GPU source plays such a recording back; a recording of any other exporter is
read by replay, which maps its names through the collectors' series mapping.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

from fleettool.formats.openmetrics_lines import ExpositionParser
from fleettool.metrics import own_name_spec
from fleettool.recording.files import iter_lines

# the writer's identity labels; any other label is the sub key (link=0, collector=nvml, mig=1/0)
WRITER_LABELS = ("hostname", "gpu", "UUID", "pci_bus_id", "modelName", "driver")

OwnRow = tuple[float, int | None, str, str, float]  # (ts, gpu, metric, sub, value)


def _gpu(label: str | None) -> int | None:
    return int(label) if label is not None and label.isascii() and label.isdigit() else None


def read_own_openmetrics(path: Path) -> tuple[list[OwnRow], dict[str, str]]:
    """A fleettool recording of NVML series -> rows (ts, gpu, metric, sub, value) and GPU facts (model,
    driver). Series of names fleettool does not know are left out; a malformed line raises ParseError."""
    parser = ExpositionParser(str(path), millis=False, strict=True)
    series: list[tuple[str, int | None, str, float] | None] = []
    info: dict[str, str] = {}
    rows: list[OwnRow] = []
    # line by line (pure Python): the fake source plays these in the agent, which loads no numpy or Arrow
    lines = iter_lines(path)
    while batch := list(itertools.islice(lines, 4096)):
        chunk = parser.feed(batch)
        names, labels = parser.series.names, parser.series.labels
        for i in range(len(series), len(names)):
            spec = own_name_spec(names[i])
            lab = labels[i]
            if lab.get("modelName"):
                info["model"] = lab["modelName"]
            if lab.get("driver"):
                info["driver"] = lab["driver"]
            if spec is None:
                series.append(None)
                continue
            extra = [(k, v) for k, v in lab.items() if k not in WRITER_LABELS]
            sub = f"{extra[0][0]}={extra[0][1]}" if extra else ""
            series.append((spec[0], _gpu(lab.get("gpu")), sub, 1.0 / spec[1]))
        for sid, ts, value in zip(chunk.sid, chunk.ts, chunk.value, strict=True):
            s = series[int(sid)]
            if s is None or math.isnan(value) or not math.isfinite(ts):
                continue
            metric, gpu, sub, scale = s
            rows.append((round(float(ts), 6), gpu, metric, sub, float(value) * scale))
    return rows, info
