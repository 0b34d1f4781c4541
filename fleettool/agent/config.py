"""What the agent is told (AgentConfig), what it counts (AgentStats) and what it holds between flushes (Buffer)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fleettool.model import Event, GpuInfo, PodUse, Sample

# Python memory of one buffered row (tracemalloc over 100,000 Samples and 10,000 kernel-log XID Events, with
# their floats, the list slot and an XID line's message and raw text; names and UUIDs are shared objects)
SAMPLE_BYTES = 144
EVENT_BYTES = 480


@dataclass
class AgentConfig:
    db: Path | None
    node: str
    interval_s: float = 1.0
    flush_s: float = 60.0
    watchdog_s: float = 5.0
    raw_keep_s: float = 7 * 86400.0
    rollup_keep_s: float = 400 * 86400.0
    retention_every_s: float = 3600.0
    max_buffer_bytes: int = 64 << 20  # --max-buffer: what the rows held between flushes may take
    health_every_s: float = 10.0
    duration_s: float | None = None
    quiet: bool = False
    export_to: str | None = None  # a fleet location: Parquet segments of every whole hour go there
    export_every_s: float = 3600.0
    # DuckDB's buffer memory and threads for the flush and the rules. Every built-in rule over a 7-day store of
    # 8 GPUs (73.7 M samples), measured on the dev box: RSS +246 MiB with DuckDB's defaults, +41 MiB at 32MB,
    # +25 MiB at 16MB (same CPU: a rule's cost is planning, ~2.5 ms, and a short scan); 8MB runs out of memory
    # in the peer rules
    duckdb_memory: str = "16MB"
    duckdb_threads: int = 1


@dataclass
class AgentStats:
    ticks: int = 0
    flushed_rows: int = 0
    flushes: int = 0
    flush_failures: int = 0
    dropped_rows: int = 0
    unsaved_rows: int = 0  # rows the final flush could not save (the database held by another process, ...)
    urgent_flushes: int = (
        0  # flushes made at once for an event (an XID, a double-bit error), not on the timer
    )
    retention_failures: int = 0
    last_flush_error: str | None = None
    store_error: str | None = None  # the store cannot be judged: damaged, its rules or checkpoint failing


@dataclass
class Buffer:
    samples: list[Sample] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    gpus: dict[tuple[str, int | None, str | None], GpuInfo] = field(default_factory=dict)
    pods: list[PodUse] = field(default_factory=list)

    def rows(self) -> int:
        return len(self.samples) + len(self.events)

    def nbytes(self) -> int:
        """The memory the buffered rows take (SAMPLE_BYTES and EVENT_BYTES each, measured)."""
        return len(self.samples) * SAMPLE_BYTES + len(self.events) * EVENT_BYTES
