"""What a replay says about each file (FileReport), the options of an ingest, and the reader signature."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fleettool.formats.errors import ParseIssue
from fleettool.recording.files import MAX_BYTES
from fleettool.recording.times import file_time
from fleettool.store import Store

# status of a file in a replay
READ, PARTIAL, SKIPPED, FAILED, IGNORED = "read", "partial", "skipped", "failed", "ignored"

READER_NAMES = {
    "openmetrics": "OpenMetrics",
    "prometheus": "Prometheus text",
    "kmsg": "kernel log",
    "kmsg-journal-json": "kernel log",
    "kmsg-raw": "kernel log",
    "fleettool-events": "fleettool events",
    "nccl-tests": "nccl-tests",
    "nccl-tests-json": "nccl-tests -J",
    "nvidia-smi-xml": "nvidia-smi -q -x",
    "nvidia-smi-text": "nvidia-smi -q",
    "dcgmi-diag": "dcgmi diag",
    "dcgmi-diag-json": "dcgmi diag -j",
    "dcgmi-health": "dcgmi health",
    "dcgmi-health-json": "dcgmi health -j",
    "dcgmi-dmon": "dcgmi dmon",
    "dcgmi-discovery": "dcgmi discovery",
    "slurm-topology": "Slurm topology.conf",
    "sacct": "sacct --parsable2",
    "kube-nodes": "kubectl get nodes -o json",
    "topology-csv": "topology CSV",
    "ibstat": "ibstat / ibstatus",
    "ibv-devinfo": "ibv_devinfo",
    "perfquery": "perfquery",
    "iblinkinfo": "iblinkinfo",
    "ib-sysfs-tar": "sysfs tarball (/sys/class/infiniband)",
}


@dataclass
class FileReport:
    """One file of a replay: its reader and what it stored, or why it was skipped, or what a partial file
    kept; and where the times came from (the file's own, the file name, --at, the file's mtime, or
    boot-relative)."""

    path: str
    format: str
    shape: str = ""  # within the format: "dmesg -T", "journalctl -o json", ...
    rows: int = 0
    events: int = 0
    runs: int = 0
    issues: list[ParseIssue] = field(default_factory=list)
    nodes: set[str] = field(default_factory=set)
    t_min: float | None = None
    t_max: float | None = None
    skipped: str | None = None  # why the file was not read (or why what it stored was rolled back)
    ignored: bool = False  # not an input problem: the store's own file, already ingested, hidden
    failed: bool = False  # recognised, but reading it failed; nothing from it was stored
    partial: list[str] = field(default_factory=list)  # why only part of the file was read
    time_source: str | None = None  # where the stored times came from
    # the time given from outside the content (the file name, --at, the mtime) when any of what was stored took
    # it: part of what makes two ingests the same (ingest.run.ingest_key)
    given_time: float | None = None
    boot_relative: int = 0  # events stored with only an uptime (no wall time in the file)
    untimed: int = 0  # events stored with no time at all
    identities: int = 0  # the driver's GPU announcement lines (PCI id -> UUID, serial)
    duplicates: int = 0  # kernel lines already stored from another file (ingest.dedup): not stored again
    notes: list[str] = field(default_factory=list)
    topology_nodes: int = 0  # nodes a topology file placed (node_topology)
    jobs: int = 0  # jobs a sacct dump gave (jobs)

    @property
    def status(self) -> str:
        if self.ignored:
            return IGNORED
        if self.failed:
            return FAILED
        if self.skipped:
            return SKIPPED
        return PARTIAL if self.partial else READ

    @property
    def reader(self) -> str:
        return READER_NAMES.get(self.format, self.format)

    @property
    def recognised(self) -> bool:
        return self.format in READER_NAMES

    def nothing_stored(self) -> str | None:
        """Why a file that was read (whole or in part) stored nothing although it held something: malformed
        lines, samples no fleettool metric maps, a cut; None when it stored something (a sample, event, run or GPU
        identity), was not read, or held nothing to store (a kernel log with no GPU event in it: that is its
        answer, and its summary says `0 events`)."""
        if (
            self.status not in (READ, PARTIAL)
            or self.rows
            or self.events
            or self.runs
            or self.identities
            or self.duplicates
            or self.topology_nodes
            or self.jobs
        ):
            return None
        first = self.issues[0] if self.issues else None
        why = [f"{_lines(len(self.issues))} (first: line {first.line}: {first.message})"] if first else []
        why += [n for n in self.notes if "not stored" in n or n.startswith("no GPU series")]
        why += self.partial
        return "; ".join(why) or None

    def stored(self) -> str:
        kernel = self.format.startswith("kmsg")
        if self.format == "sacct":
            return f"{self.jobs} jobs" if self.jobs != 1 else "1 job"
        if self.format in ("slurm-topology", "kube-nodes", "topology-csv"):
            return f"{self.topology_nodes} nodes ({self.rows} topology keys)"
        if self.format.startswith("nccl"):
            runs = f"{self.runs} runs" if self.runs != 1 else "1 run"
            return f"{runs} ({self.rows} table rows)"
        parts = [f"{self.rows} samples"] if self.rows or not (self.events or self.runs or kernel) else []
        if kernel or self.events:
            parts.append(f"{self.events} events" if self.events != 1 else "1 event")
        if self.duplicates:
            n = self.duplicates
            parts.append(
                f"{n} duplicate event{'s' if n != 1 else ''} dropped (already stored from another file)"
            )
        if self.runs or self.format.startswith("nccl"):
            parts.append(f"{self.runs} runs" if self.runs != 1 else "1 run")
        if self.identities:
            parts.append(f"{self.identities} GPU identities (PCI id -> UUID)")
        return ", ".join(parts)

    def as_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "format": self.format,
            "reader": self.reader if self.recognised else None,
            "shape": self.shape or None,
            "status": self.status,
            "rows": self.rows,
            "events": self.events,
            "runs": self.runs,
            "issues": len(self.issues),
            "first_issue": str(self.issues[0]) if self.issues else None,
            "nodes": sorted(self.nodes),
            "skipped": self.skipped,
            "partial": self.partial or None,
            "time_source": self.time_source,
            "boot_relative_events": self.boot_relative,
            "untimed_events": self.untimed,
            "duplicate_events": self.duplicates,
            "notes": self.notes,
            "nothing_stored": self.nothing_stored(),
            "topology_nodes": self.topology_nodes,
            "jobs": self.jobs,
        }


def _lines(n: int) -> str:
    return "1 malformed line" if n == 1 else f"{n} malformed lines"


@dataclass
class IngestOptions:
    node: str | None = None  # the node for files that do not name one
    strict: bool = False  # a file with a malformed line is not stored (and the replay fails)
    max_issue_lines: int = 20  # how many issue lines to print per file
    quiet: bool = False
    year: int | None = None  # for syslog lines without a year (default: from the recording's context)
    at: float | None = None  # --at: the time of files that carry none and whose name gives none
    exclude: list[Path] = field(default_factory=list)  # the store's own files: never read
    max_bytes: int = MAX_BYTES  # decompressed bytes per file
    rack_label: str = "topology.kubernetes.io/rack"  # the Kubernetes node label that names a node's rack
    tz: str | None = None  # --tz: the IANA zone of sacct's local Start/End (None: read as UTC)


def outside_time(path: Path, opts: IngestOptions, rep: FileReport) -> tuple[float, str]:
    """The time of a file whose content carries none (recording.times.file_time: its name, --at, its mtime) and
    where it came from; noted on the report, so the same content given another time is another ingest. Every
    reader that times what it stores from outside the file's content takes its time here."""
    t, src = file_time(path, opts.at)
    rep.given_time = t
    return t, src


def untimed_file_time(path: Path, opts: IngestOptions, rep: FileReport, what: str) -> float:
    """outside_time for a file of a tool that prints no time (`ibstat`, `dcgmi`): said on the report as
    `<what> prints no time: <where the time came from>`, and the file's time span set to it."""
    ts, src = outside_time(path, opts, rep)
    rep.time_source = f"{what} prints no time: {src}"
    rep.t_min = ts if rep.t_min is None else min(rep.t_min, ts)
    rep.t_max = ts if rep.t_max is None else max(rep.t_max, ts)
    return ts


# a reader stores what its file holds (inside the file's transaction) and fills the report
Reader = Callable[[Store, Path, IngestOptions, FileReport], None]
