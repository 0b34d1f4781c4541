"""The agent's topology and jobs: `--topology FILE` read again when the file changes, and the live sources.

- Files (`--topology`, repeatable): read at the first flush and again whenever a file's mtime or size changes
  (one stat per file per flush). A file that cannot be read or is no topology/jobs file any more is named once
  in a warning line, counted, and its stored rows kept.
- `--jobs-from sacct`: every JOBS_EVERY_S, `sacct --parsable2 --format=JobID,JobName,NodeList,Start,End,State
  -S now-1hours -a` (sacct(1): --parsable2 `|`-separated, -S `now[{+|-}count[seconds|minutes|hours|...]]`,
  -a every user's jobs). The header is kept (no --noheader): the sacct reader finds its columns by name.
- `--topology-from kubectl`: every KUBE_EVERY_S, `kubectl get nodes -o json` (the rack label as --rack-label).
- The GPU source's NVLink fabric info (nvmlDeviceGetGpuFabricInfoV) and driver version, at start and every
  FABRIC_EVERY_S (the NVML collector's reading of the period when it has one: one driver call serves both), as
  this node's keys `nvlink_domain` (the cluster UUID, only when the fabric probe is completed,
  succeeded and the UUID is not all zeros), `clique` (`<uuid>.<cliqueId>`), `driver` and `fabric_state`
  (what NVML said, an error included: recorded, never fatal).

Commands and NVML run on a worker thread, each command under COMMAND_TIMEOUT_S, so a slow sacct or a hung driver
never holds the loop; the flush stores what the worker brought (`store`). A source that fails gives one warning
line when it starts failing and one when it answers again, and `agent_topology_failures_total{source=...}` and
`agent_topology_up{source=...}` in the agent's health samples; the agent carries on.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fleettool.formats.kube_nodes import parse_kube_nodes
from fleettool.formats.sacct import parse_sacct
from fleettool.model import Sample
from fleettool.sources.base import FabricReader, GpuSource, SourceError
from fleettool.sources.nvml_fabric import fabric_reading
from fleettool.store.topology import JobRow, put_jobs, put_topology

if TYPE_CHECKING:
    from fleettool.ingest.report import FileReport
    from fleettool.store import Store

SACCT = ("sacct", "--parsable2", "--format=JobID,JobName,NodeList,Start,End,State", "-S", "now-1hours", "-a")
KUBECTL = ("kubectl", "get", "nodes", "-o", "json")
JOBS_EVERY_S = 300.0
KUBE_EVERY_S = 600.0
FABRIC_EVERY_S = 600.0
COMMAND_TIMEOUT_S = 60.0
JOBS_FROM = ("sacct",)
TOPOLOGY_FROM = ("kubectl",)


@dataclass
class Fetched:
    """What one live source brought: jobs, node keys, or why it failed."""

    source: str
    jobs: list[JobRow] = field(default_factory=list)
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    error: str | None = None


def run_command(argv: tuple[str, ...], timeout_s: float) -> str:
    """The command's stdout; RuntimeError with its last stderr line (the fatal one) when it fails, times out or
    is missing."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{argv[0]} gave no answer within {timeout_s:g}s") from None
    except OSError as e:
        raise RuntimeError(f"{argv[0]} could not run: {e.strerror or e}") from None
    if r.returncode != 0:
        why = next((ln.strip() for ln in reversed(r.stderr.splitlines()) if ln.strip()), "no message")
        raise RuntimeError(f"{argv[0]} exited {r.returncode}: {why}")
    return r.stdout


def fetch_sacct(timeout_s: float = COMMAND_TIMEOUT_S) -> Fetched:
    out = run_command(SACCT, timeout_s)
    # sacct prints this host's local time: read it in this host's zone
    jobs, issues = parse_sacct(out.splitlines(), "sacct", dt.datetime.now().astimezone().tzinfo)
    if not jobs and issues:
        raise RuntimeError(f"sacct output not read: {issues[0].message}")
    src = "sacct (live)"
    rows = [JobRow(j.job_id, j.name, j.nodes, j.start, j.end, j.state, j.state_detail, src) for j in jobs]
    return Fetched("sacct", jobs=rows)


def fetch_kubectl(rack_label: str, timeout_s: float = COMMAND_TIMEOUT_S) -> Fetched:
    out = run_command((*KUBECTL, f"--request-timeout={int(timeout_s)}s"), timeout_s + 5)
    nodes, issues = parse_kube_nodes(out, "kubectl", rack_label)
    if not nodes and issues:
        raise RuntimeError(f"kubectl output not read: {issues[0].message}")
    return Fetched("kubectl", nodes={n: k for n, k in nodes.items() if k})


def fetch_fabric(node: str, source: GpuSource) -> Fetched:
    """This node's driver and NVLink fabric keys from the GPU source. An NVML error is recorded as the key
    `fabric_state` (`error: ...`), never raised; only a source that cannot answer at all is a failure."""
    keys: dict[str, str] = {}
    try:
        if driver := source.driver_version():
            keys["driver"] = driver
        count = source.device_count()
    except SourceError as e:  # NVML missing or failing: the next round tries again
        raise RuntimeError(f"NVML: {e}") from None
    except AttributeError:  # the live source never opened (no driver): nothing to ask
        raise RuntimeError("NVML is not open (no driver or library; see agent_nvml_available)") from None
    states: list[str] = []
    for i in range(count):
        if not isinstance(source, FabricReader):
            states.append("not-supported (this source has no fabric info)")
            break
        try:
            info = fabric_reading(source, i, FABRIC_EVERY_S)  # the NVML collector's reading, when recent
        except SourceError as e:  # 'nvmlDeviceGetGpuFabricInfoV(gpu 3): Unknown Error': the same on every GPU
            states.append(f"error: {str(e).split('): ', 1)[-1]}")
            continue
        states.append(info.state_name)
        if info.domain is not None and "nvlink_domain" not in keys:
            keys["nvlink_domain"] = info.domain
            keys["clique"] = info.clique or ""
    if states:  # one state for the node: the GPUs' (they agree on a healthy node), else each GPU's
        keys["fabric_state"] = (
            states[0] if len(set(states)) == 1 else "; ".join(f"GPU {i}: {s}" for i, s in enumerate(states))
        )
    return Fetched("nvml", nodes={node: keys})


class TopologyRefresh:
    """The agent's topology sources; `store(store)` at each flush, `samples(now)` with the health samples."""

    def __init__(
        self,
        node: str,
        files: list[Path] | None = None,
        *,
        rack_label: str = "topology.kubernetes.io/rack",
        jobs_from: str | None = None,
        topology_from: str | None = None,
        gpu_source: GpuSource | None = None,
        log: Callable[[str], None] = print,
        every: dict[str, float] | None = None,
        timeout_s: float = COMMAND_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node = node
        self.files = list(files or [])
        self.rack_label = rack_label
        self.log = log
        self.clock = clock
        self.timeout_s = timeout_s
        self._fetchers: dict[str, Callable[[], Fetched]] = {}
        if jobs_from == "sacct":
            self._fetchers["sacct"] = lambda: fetch_sacct(self.timeout_s)
        if topology_from == "kubectl":
            self._fetchers["kubectl"] = lambda: fetch_kubectl(self.rack_label, self.timeout_s)
        if gpu_source is not None:
            self._fetchers["nvml"] = lambda: fetch_fabric(self.node, gpu_source)
        self.every = {"sacct": JOBS_EVERY_S, "kubectl": KUBE_EVERY_S, "nvml": FABRIC_EVERY_S, **(every or {})}
        self._next: dict[str, float] = {}
        self._seen: dict[Path, tuple[int, int] | None] = {}
        self._pending: list[Fetched] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failures: dict[str, int] = {}
        self._failing: dict[str, str] = {}
        self.stored: dict[str, int] = {}  # source -> rows (jobs or node keys) stored, for the tests' eyes

    # -- the worker ---------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._fetchers and self._thread is None:
            self._thread = threading.Thread(target=self._work, name="fleettool-topology", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _work(self) -> None:
        while not self._stop.is_set():
            self.run_due()
            wait = min(self._next.values(), default=self.clock() + 60.0) - self.clock()
            self._stop.wait(max(wait, 0.5))

    def run_due(self) -> int:
        """Run every live source whose time has come (all of them the first time); what they brought waits for
        the next flush. The sources run."""
        ran = 0
        for name, fetch in self._fetchers.items():
            now = self.clock()
            if now < self._next.get(name, -1e18):
                continue
            self._next[name] = now + self.every[name]
            try:
                got = fetch()
            except Exception as e:  # a failing source never stops the agent: one line, counted
                got = Fetched(name, error=str(e).splitlines()[0] if str(e) else type(e).__name__)
            with self._lock:
                self._pending.append(got)
            ran += 1
        return ran

    # -- at each flush ------------------------------------------------------------------------------------
    def store(self, store: Store) -> None:
        """The changed --topology files and what the live sources brought, into the store (the flush's)."""
        self._read_files(store)
        with self._lock:
            pending, self._pending = self._pending, []
        for got in pending:
            if got.error is not None:
                self._failed(got.source, got.error)
                continue
            n = put_jobs(store, got.jobs) if got.jobs else 0
            n += put_topology(store, got.nodes, _SOURCE.get(got.source, got.source))
            self.stored[got.source] = self.stored.get(got.source, 0) + n
            self._answered(got.source)

    def _read_files(self, store: Store) -> None:
        for p in self.files:
            try:
                st = os.stat(p)
                sig: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
            except OSError as e:
                sig, why = None, f"{p}: cannot read it ({e.strerror or e})"
            if p in self._seen and self._seen[p] == sig:
                continue
            self._seen[p] = sig
            if sig is None:
                self._failed(str(p), why)
                continue
            try:
                rep = read_topology_file(store, p, self.rack_label)
            except OSError as e:
                self._failed(str(p), f"{p}: cannot read it ({e.strerror or e}); its stored rows kept")
                continue
            except ValueError as e:
                self._failed(str(p), f"{e}; skipped, its stored rows kept")
                continue
            self.stored[str(p)] = self.stored.get(str(p), 0) + rep.rows
            self._answered(str(p))

    def _failed(self, source: str, why: str) -> None:
        self.failures[source] = self.failures.get(source, 0) + 1
        if self._failing.get(source) != why:
            every = f"; tried again in {self.every[source]:g}s" if source in self.every else ""
            self.log(f"topology source {source} failed: {why}{every}")
        self._failing[source] = why

    def _answered(self, source: str) -> None:
        if self._failing.pop(source, None) is not None:
            self.log(f"topology source {source} answers again")
        self.failures.setdefault(source, 0)

    def samples(self, now: float) -> list[Sample]:
        """agent_topology_failures_total and agent_topology_up for each source seen so far."""
        out = []
        for source, n in sorted(self.failures.items()):
            sub = f"source={source}"
            out.append(Sample(now, self.node, None, None, "agent_topology_failures_total", float(n), sub))
            up = 0.0 if source in self._failing else 1.0
            out.append(Sample(now, self.node, None, None, "agent_topology_up", up, sub))
        return out


def read_topology_file(store: Store, path: Path, rack_label: str) -> FileReport:
    """One topology or jobs file into the store by what its content is, every time it is asked (no "already
    ingested": a file changed back to what it said before is read again; nothing but its tables written, so a
    fleet's views over segments take it too). OSError when it cannot be read, ValueError naming it when it is
    no topology or jobs file."""
    from fleettool.ingest.read_topology import TOPOLOGY_FORMATS
    from fleettool.ingest.readers import READERS
    from fleettool.ingest.report import FileReport, IngestOptions
    from fleettool.recording.identify import identify_why

    with open(path, "rb"):  # unreadable: OSError, before anything is judged of it
        pass
    ident = identify_why(path)
    if ident.format not in TOPOLOGY_FORMATS:
        what = ident.why or f"it reads as {ident.format}"
        raise ValueError(
            f"{path}: not a topology or jobs file (topology.conf, sacct --parsable2, kubectl get nodes -o json, "
            f"a node,rack,nvlink_domain,leaf CSV): {what}"
        )
    rep = FileReport(str(path), ident.format, ident.shape)
    store.begin()
    try:
        READERS[ident.format](store, path, IngestOptions(rack_label=rack_label, quiet=True), rep)
    except BaseException:
        store.rollback()
        raise
    store.commit()
    return rep


_SOURCE = {"kubectl": "kubectl get nodes (live)", "nvml": "nvml fabric info (live)", "sacct": "sacct (live)"}


def check_tool(name: str) -> str | None:
    """Why the live source `name` cannot run here (not on PATH), or None."""
    return None if shutil.which(name) else f"{name} is not installed (not on PATH)"
