"""Agent overhead as deployed: CPU (% of one core) and peak RSS of the `fleettool agent` process, next to a bare
nvidia-ml-py loop reading the same fields at the same rates, in one run.

What runs, each in a process of its own:
- `fleettool agent` with the DaemonSet's arguments (deploy/kubernetes/agent-daemonset.yaml: --db, --node,
  --metrics-port, --kmsg, --dcgm-exporter, --raw-retention=7d, --rollup-retention=400d; the default 30 s flush,
  the built-in rules, every default collector), /metrics on 127.0.0.1, plus `--source fake --gpus N
  --fake-costs` for the fake source (it spins for each NVML call's measured H200 cost, sources/fake.py
  READ_COST_US);
- its store: a copy of a store pre-filled with --days of this node's data (bench/agent_store7d.py: series and
  rates from a 65 s template run of the same agent, generated with DuckDB, cached by parameters in
  --cache-dir and regenerated when older than --store-max-age);
- dcgm-exporter: bench/dcgm_stub.py serving one recorded scrape of fixtures/ on 127.0.0.1, with the node's GPUs
  and, for the metrics NVML also reads, NVML's values (--dcgm-counters deploy adds the rest of the
  DaemonSet's counters CSV);
- the kernel log: /dev/kmsg when it can be read (as the DaemonSet passes it), otherwise a FIFO that this bench
  writes a harmless line into every --kmsg-every seconds;
- the bare baseline: bench/nvml_bare.py, at the same time as the agent (--baseline concurrent, the default) or
  after it (sequential); with the fake source it spins for the same costs (--fake) instead of calling NVML.

This process scrapes the agent's /metrics every --scrape-every seconds and parses each body (prometheus_client's
parser). After --warmup seconds (start-up, the first flush with the retention pass and the first evaluation of
every rule) it measures both processes over --seconds of wall time, reading /proc at the window's ends:
- CPU: utime+stime of all the process's threads, live or ended (/proc/PID/stat), over the window's wall time;
- peak RSS: VmHWM (/proc/PID/status) over the whole life, start-up included (`peak_rss_mib`, what a memory limit
  must allow); the start-up part and, after resetting the high-water mark at the window's start
  (/proc/PID/clear_refs), the window's own peak are reported apart;
- RSS by owner at the window's end (/proc/PID/smaps: which library or heap holds it) and the shared objects
  mapped (heavy ones named: pyarrow, polars, numpy, duckdb, torch, ...);
- with the import log (PYTHONPROFILEIMPORTTIME=1, the default: it costs only while importing), every package
  the agent imported, which module pulled each heavy one in, and what was imported inside the window;
- once a second, each process's CPU and RSS (the JSON's timelines): the window's quiet seconds (collection,
  /metrics) are summed apart from its spikes (flushes, rule minutes).
- once a second, /proc/PID/smaps_rollup (RSS, PSS, anonymous, file-backed) of the agent and, with --children, of
  its child processes (a writer process: their CPU is summed), and at the window's end the node-unique memory
  (anonymous plus each file's resident pages counted once across those processes);
- with --cgroup, the agent in a memory cgroup of its own (v2, or v1's memory controller) and the store copy
  dropped from the page cache first: usage, peak, the kubelet's working set; --cgroup-limit sets its limit.
Then SIGTERM, the agent's exit line and status, and the store's counts (an alert on this healthy node would be
a finding). `ratio` is agent / bare for CPU and peak RSS; `goals` checks 0.5 % of a core, 100 MiB and 2x.
--cprofile runs the agent under cProfile for where its main thread's time goes (flushes, rules; the
collectors run on other threads); such a run's CPU includes the profiler's.

Not in the window: what the agent does hourly (retention's roll-up of raw samples into samples_1m, the trend
rules, fleet export) and start-up (its CPU is `startup_cpu_s`).

  python bench/agent_overhead.py --source fake --gpus 8 --seconds 180 --json bench/results/agent-fake8-dev.json
  python bench/agent_overhead.py --source nvml --seconds 180 --json $OUT/agent-nvml.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

import agent_store7d  # noqa: E402
import dcgm_stub  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")
HEAVY = ("pyarrow", "polars", "numpy", "duckdb", "textual", "rich", "torch", "pandas", "yaml", "pynvml")


# -- /proc ---------------------------------------------------------------------------------------------------
def proc_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (
        int(fields[11]) + int(fields[12])
    ) / CLK  # utime, stime (fields 14, 15): every thread, live or gone


def proc_status(pid: int) -> dict[str, float]:
    out: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmHWM", "VmRSS", "Threads"):
                out[k] = float(v.split()[0]) / (1024 if k != "Threads" else 1)
    return out


def tree_pids(pid: int) -> list[int]:
    """The process and its descendants (/proc/PID/task/TID/children), parent first."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        out.append(p)
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            continue
    return out


def smaps_rollup(pid: int) -> dict[str, float]:
    """RSS, PSS (shared pages divided among the processes mapping them), anonymous and file-backed (RSS less
    anonymous: the libraries' code, mapped files, shmem) in MiB, from /proc/PID/smaps_rollup."""
    got: dict[str, float] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("Rss", "Pss", "Anonymous"):
                    got[k.lower()] = float(v.split()[0]) / 1024
    except OSError:
        return {}
    got["file"] = got.get("rss", 0.0) - got.get("anonymous", 0.0)
    return {k: round(v, 1) for k, v in got.items()}


def smaps_split(pid: int) -> tuple[float, dict[str, float]]:
    """Anonymous MiB, and file-backed resident MiB by file (/proc/PID/smaps)."""
    anon, files, cur = 0.0, {}, ""
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                head = line.split()
                if head and re.match(r"^[0-9a-f]+-[0-9a-f]+$", head[0]):
                    cur = head[5] if len(head) > 5 and head[5].startswith("/") else ""
                elif head and head[0] == "Rss:" and cur:
                    files[cur] = files.get(cur, 0.0) + float(head[1]) / 1024
                elif head and head[0] == "Anonymous:":
                    kb = float(head[1]) / 1024
                    anon += kb
                    if cur:
                        files[cur] -= kb  # a file mapping's private copies (its .data) are anonymous
    except OSError:
        pass
    return anon, files


def node_unique(pids: list[int]) -> dict[str, float]:
    """The processes' memory with each file's pages counted once (the largest resident part of that file in any of
    them): what their pod's cgroup is charged for them when the pod first touched those files. PSS divides
    shared pages among every process on the machine that maps them (the bench, other users' Pythons), RSS counts
    them once per process; this counts them once per node."""
    anon, files = 0.0, {}
    for pid in pids:
        a, fs = smaps_split(pid)
        anon += a
        for k, v in fs.items():
            files[k] = max(files.get(k, 0.0), v)
    return {
        "anonymous": round(anon, 1),
        "file": round(sum(files.values()), 1),
        "total": round(anon + sum(files.values()), 1),
    }


class MemCgroup:
    """A memory cgroup of the agent's own (v2, or v1's memory controller) when this machine lets us make one:
    what a Kubernetes limit is checked against (anonymous memory and page cache charged to it) and the
    kubelet's working set (usage less inactive_file)."""

    def __init__(self, name: str, limit_mib: float | None = None) -> None:
        self.path: Path | None = None
        self.limit_mib = limit_mib
        self.v = 0
        self.error: str | None = None
        v2 = Path("/sys/fs/cgroup/cgroup.controllers")
        try:
            if v2.exists():
                base = Path("/sys/fs/cgroup") / Path(
                    Path("/proc/self/cgroup").read_text().split("::", 1)[1].strip()
                ).relative_to("/")
                self.v, self.path = 2, base / name
            elif Path("/sys/fs/cgroup/memory").is_dir():
                self.v, self.path = 1, Path("/sys/fs/cgroup/memory") / name
            else:
                raise OSError("no memory cgroup hierarchy mounted")
            self.path.mkdir()
            if limit_mib is not None:  # a pod's memory limit: the kernel reclaims page cache, then OOM-kills
                f = "memory.limit_in_bytes" if self.v == 1 else "memory.max"
                (self.path / f).write_text(str(int(limit_mib * 2**20)))
        except (OSError, ValueError, IndexError) as e:
            self.error, self.path = f"cannot make a memory cgroup: {e}", None

    def enter(self) -> None:  # preexec_fn: the child moves itself in before exec
        if self.path is not None:
            (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def _read(self, f: str) -> str:
        assert self.path is not None
        return (self.path / f).read_text()

    def reset_peak(self) -> bool:
        try:
            (self.path / ("memory.max_usage_in_bytes" if self.v == 1 else "memory.peak")).write_text("0")  # type: ignore[operator]
            return True
        except (OSError, TypeError):
            return False

    def read(self) -> dict[str, Any]:
        if self.path is None:
            return {"error": self.error}
        mib = lambda b: round(int(b) / 2**20, 1)  # noqa: E731
        stat = dict((ln.split()[0], int(ln.split()[1])) for ln in self._read("memory.stat").splitlines())
        pre = "total_" if self.v == 1 else ""
        usage = int(self._read("memory.usage_in_bytes" if self.v == 1 else "memory.current"))
        try:
            peak: float | None = mib(
                self._read("memory.max_usage_in_bytes" if self.v == 1 else "memory.peak")
            )
        except OSError:
            peak = None
        anon = stat.get(f"{pre}rss" if self.v == 1 else "anon", 0)
        return {
            "cgroup": f"v{self.v} {self.path}",
            "usage_mib": mib(usage),
            "peak_usage_mib": peak,
            "anon_mib": mib(anon),
            "file_mib": mib(stat.get(f"{pre}cache" if self.v == 1 else "file", 0)),
            "inactive_file_mib": mib(stat.get(f"{pre}inactive_file", 0)),
            "working_set_mib": mib(max(0, usage - stat.get(f"{pre}inactive_file", 0))),
            "limit_mib": self.limit_mib,
            "failcnt": int(self._read("memory.failcnt")) if self.v == 1 else None,
            "oom_kill": self._oom_kills(),
        }

    def _oom_kills(self) -> int | None:
        f = "memory.oom_control" if self.v == 1 else "memory.events"
        try:
            for ln in self._read(f).splitlines():
                if ln.startswith("oom_kill "):
                    return int(ln.split()[1])
        except OSError:
            return None
        return None

    def remove(self) -> None:
        if self.path is not None:
            for _ in range(50):
                try:
                    self.path.rmdir()
                    return
                except OSError:
                    time.sleep(0.1)


def _owner(path: str) -> str:
    m = re.search(r"/(?:site|dist)-packages/([^/]+)", path)
    if m:
        name = m.group(1)
        return re.sub(r"(\.libs|\.cpython.*|-.*\.so.*|\.so.*)$", "", name).lstrip("_") or name
    if "/lib-dynload/" in path or re.search(r"/libpython3", path):
        return "python"
    return os.path.basename(path)


def proc_maps(pid: int) -> dict[str, Any]:
    """Shared objects mapped, by owning package, and RSS by owner (smaps)."""
    libs: dict[str, set[str]] = {}
    rss: dict[str, float] = {}
    cur = "[anon]"
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                head = line.split()
                if not head:
                    continue
                if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                    path = head[5] if len(head) > 5 else ""
                    if path.startswith("/") and (".so" in path or "/python" in path):
                        cur = _owner(path)
                        if ".so" in path:
                            libs.setdefault(cur, set()).add(os.path.basename(path))
                    elif path.startswith("/"):
                        cur = "[files]"
                    else:
                        cur = path or "[anon]"
                elif head[0] == "Rss:":
                    rss[cur] = rss.get(cur, 0.0) + float(head[1]) / 1024
    except OSError as e:
        return {"error": str(e)}
    top = dict(sorted(((k, round(v, 1)) for k, v in rss.items() if v >= 0.5), key=lambda kv: -kv[1]))
    return {
        "shared_objects": {k: sorted(v) for k, v in sorted(libs.items())},
        "heavy_loaded": sorted(k for k in libs if k.lower() in HEAVY or k.lower().startswith(HEAVY)),
        "rss_mib_by_owner": top,
    }


# -- the pieces ------------------------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    def first(path: str, key: str) -> str:
        try:
            return next(
                (
                    ln.split(":", 1)[1].strip()
                    for ln in Path(path).read_text().splitlines()
                    if ln.startswith(key)
                ),
                "",
            )
        except OSError:
            return ""

    model = first("/proc/cpuinfo", "model name")
    mem_kb = first("/proc/meminfo", "MemTotal").split()
    mem = float(mem_kb[0]) / 2**20 if mem_kb else 0.0
    return {
        "hostname": platform.node(),
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "kernel": platform.release(),
        "mem_gib": round(mem, 1),
        "python": platform.python_version(),
    }


def versions() -> dict[str, Any]:
    from importlib import metadata

    out: dict[str, Any] = {}
    for pkg in (
        "fleettool",
        "duckdb",
        "pyarrow",
        "numpy",
        "polars",
        "prometheus-client",
        "typer",
        "pyyaml",
        "rich",
        "textual",
        "nvidia-ml-py",
    ):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    import hashlib

    h = hashlib.sha256()
    for d in ("fleettool", "collectors", "rules"):
        for f in sorted((ROOT / d).rglob("*")):
            if f.is_file() and f.suffix in (".py", ".yaml") and "__pycache__" not in f.parts:
                h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes())
    out["tree_sha256"] = h.hexdigest()[:12]  # fleettool/, collectors/, rules/ as run (the device has no .git)
    try:
        out["git"] = (
            subprocess.run(
                ["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        out["git"] = None
    return out


def source_snapshot(source: str, gpus: int) -> dict[str, Any]:
    """The GPUs as the agent's source sees them: identities, one reading of every read (NVML's values for the
    dcgm-exporter stub), and the reads it answers."""
    from fleettool.sources.base import READS, SourceError

    if source == "nvml":
        from fleettool.sources.nvml import NvmlSource

        src: Any = NvmlSource()
    else:
        from fleettool.sources.fake import FakeSource

        src = FakeSource(gpus=gpus, costs=False)
    src.open()
    try:
        n = src.device_count()
        ids, values, supported = [], [], set()
        driver = src.driver_version()
        model = None
        for i in range(n):
            d = src.device_info(i)
            model = d.name
            ids.append((d.uuid, d.pci_bus_id))
            vals: dict[str, float] = {}
            for what in READS:
                try:
                    rows = src.read(i, what, time.time())
                except SourceError:
                    continue
                supported.add(what)
                for m, sub, v in rows:
                    if not sub:
                        vals[m] = v
            values.append(vals)
    finally:
        src.close()
    return {
        "gpus": n,
        "identities": ids,
        "values": values,
        "reads": sorted(supported),
        "driver": driver,
        "model": model,
    }


def bare_plan(source: str, snap: dict[str, Any]) -> dict[str, Any]:
    from fleettool.collectors.nvml import DEFAULT_TIER_S
    from fleettool.sources.base import READS
    from fleettool.sources.fake import READ_COST_US

    reads = {name: DEFAULT_TIER_S[tier] for name, (tier, _) in READS.items()}
    if source == "fake":
        reads = {k: v for k, v in reads.items() if k in snap["reads"]}
        return {"reads": reads, "gpus": snap["gpus"], "costs_us": READ_COST_US}
    return {"reads": reads}


class Kmsg:
    """The kernel log the agent reads: /dev/kmsg if readable, else a FIFO with a line every `every` seconds."""

    def __init__(self, mode: str, workdir: Path, every: float) -> None:
        self.every, self.fd, self.lines = every, None, 0
        self._last = time.monotonic()
        if mode in ("auto", "/dev/kmsg") and _kmsg_readable():
            self.spec, self.kind = "/dev/kmsg", "dev-kmsg"
        elif mode in ("auto", "fifo"):
            self.spec, self.kind = str(workdir / "kmsg.fifo"), "fifo"
            os.mkfifo(self.spec)
            self.fd = os.open(self.spec, os.O_RDWR | os.O_NONBLOCK)  # a writer that never blocks
        else:
            self.spec, self.kind = mode, "path"

    def tick(self) -> None:
        if self.fd is None or time.monotonic() - self._last < self.every:
            return
        self._last = time.monotonic()
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S,%f+00:00")
        line = f"kern  :info  : {stamp} e1000e 0000:00:1f.6 eth0: NIC Link is Up 1000 Mbps Full Duplex\n"
        try:
            os.write(self.fd, line.encode())
            self.lines += 1
        except BlockingIOError:
            pass

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)


def _kmsg_readable() -> bool:
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    os.close(fd)
    return True


class Proc:
    """A measured subprocess: its stderr kept with arrival times (the agent's import log and exit line)."""

    def __init__(
        self,
        name: str,
        cmd: list[str],
        workdir: Path,
        env: dict[str, str] | None = None,
        tree: bool = False,
        cgroup: MemCgroup | None = None,
    ) -> None:
        self.name, self.cmd = name, cmd
        self.tree = tree  # its child processes too (CPU summed; memory per process and summed)
        self.cgroup = cgroup
        self.stdout = open(workdir / f"{name}.stdout", "wb")  # noqa: SIM115 - open as long as the process
        self.p = subprocess.Popen(
            cmd,
            stdout=self.stdout,
            stderr=subprocess.PIPE,
            env=env,
            cwd=workdir,
            start_new_session=True,
            preexec_fn=cgroup.enter if cgroup is not None else None,  # noqa: PLW1509 - a write, no locks
        )
        self.t0 = time.monotonic()
        self.lines: list[tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.s0: tuple[float, float] | None = None
        self.s1: tuple[float, float] | None = None
        self.status1: dict[str, float] = {}
        self.maps: dict[str, Any] = {}
        self.timeline: list[float] = []  # CPU seconds in each second since the start
        self.rss: list[float] = []  # VmRSS (MiB) at each second
        self.startup_hwm = 0.0
        self.hwm_reset = False
        self._prev: float | None = None
        # smaps_rollup once a second: each process's peak RSS/PSS/anonymous, and the peak of their sums
        self.mem_peak: dict[int, dict[str, float]] = {}
        self.sum_peak: dict[str, float] = {}
        self.pss_timeline: list[float] = []
        self.cmds: dict[int, str] = {}
        self.cg_start: dict[str, Any] = {}
        self.cg_end: dict[str, Any] = {}
        self.tree_end: list[dict[str, Any]] = []
        self.startup_hwms: dict[int, float] = {}
        self.unique_end: dict[str, float] = {}

    def pids(self) -> list[int]:
        return tree_pids(self.p.pid) if self.tree else [self.p.pid]

    def cpu(self) -> float:
        total = 0.0
        for pid in self.pids():
            try:
                total += proc_cpu_s(pid)
            except OSError:  # gone between the listing and the read
                continue
        return total

    def sample_mem(self) -> None:
        tot: dict[str, float] = {}
        for pid in self.pids():
            m = smaps_rollup(pid)
            if not m:
                continue
            if pid not in self.cmds:
                try:
                    self.cmds[pid] = Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")[:120]
                except OSError:
                    self.cmds[pid] = "?"
            pk = self.mem_peak.setdefault(pid, {})
            for k, v in m.items():
                pk[k] = max(pk.get(k, 0.0), v)
                tot[k] = tot.get(k, 0.0) + v
        for k, v in tot.items():
            self.sum_peak[k] = round(max(self.sum_peak.get(k, 0.0), v), 1)
        self.pss_timeline.append(round(tot.get("pss", 0.0), 1))

    def _read(self) -> None:
        assert self.p.stderr is not None
        for raw in self.p.stderr:
            self.lines.append((time.monotonic() - self.t0, raw.decode("utf-8", "replace").rstrip("\n")))

    def alive(self) -> bool:
        return self.p.poll() is None

    def sample(self) -> None:
        if not self.alive():
            return
        c = self.cpu()
        self.sample_mem()
        self.rss.append(round(proc_status(self.p.pid).get("VmRSS", 0.0), 1))
        if self._prev is not None:
            self.timeline.append(round(c - self._prev, 2))
        self._prev = c

    def mark(self, which: str) -> None:
        if not self.alive():  # exited early: result() says so
            return
        snap = (time.monotonic(), self.cpu())
        if self.cgroup is not None:
            if which == "start":
                self.cg_start = self.cgroup.read()
                self.cg_start["peak_reset"] = self.cgroup.reset_peak()
            else:
                self.cg_end = self.cgroup.read()
        if which == "start":
            self.s0 = snap
            # the peak so far (start-up), then reset the high-water mark so that the end reads the window's
            self.startup_hwm = proc_status(self.p.pid).get("VmHWM", 0.0)
            for pid in self.pids():
                self.startup_hwms[pid] = proc_status(pid).get("VmHWM", 0.0)
            try:
                for pid in self.pids():
                    with open(f"/proc/{pid}/clear_refs", "w") as f:
                        f.write("5")
                self.hwm_reset = True
            except OSError:
                self.hwm_reset = False
        else:
            self.s1 = snap
            self.status1 = proc_status(self.p.pid)
            self.maps = proc_maps(self.p.pid)
            self.unique_end = node_unique(self.pids())
            for pid in self.pids():
                st = proc_status(pid) if os.path.exists(f"/proc/{pid}") else {}
                self.tree_end.append(
                    {
                        "pid": pid,
                        "cmd": self.cmds.get(pid, ""),
                        "vmhwm_mib": round(max(st.get("VmHWM", 0.0), self.startup_hwms.get(pid, 0.0)), 1),
                        "startup_vmhwm_mib": round(self.startup_hwms.get(pid, 0.0), 1),
                        "window_vmhwm_mib": round(st.get("VmHWM", 0.0), 1),
                        "end": smaps_rollup(pid),
                        "sampled_peak": self.mem_peak.get(pid, {}),
                    }
                )

    def stop(self, timeout: float = 30.0) -> dict[str, Any]:
        t = time.monotonic()
        if self.alive():
            self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
        self._reader.join(5)
        self.stdout.close()
        with open(self.stdout.name.replace(".stdout", ".stderr"), "w") as f:
            f.writelines(f"{t:9.3f} {ln}\n" for t, ln in self.lines)
        return {"rc": rc, "stop_s": round(time.monotonic() - t, 2)}

    def result(self) -> dict[str, Any]:
        if not (self.s0 and self.s1):
            return {
                "error": f"{self.name} exited before the window ended (status {self.p.returncode})",
                "stderr_tail": [ln for _, ln in self.lines[-10:]],
            }
        wall = self.s1[0] - self.s0[0]
        cpu = self.s1[1] - self.s0[1]
        return {
            "window_s": round(wall, 2),
            "cpu_s": round(cpu, 3),
            "cpu_pct_of_one_core": round(100 * cpu / wall, 3),
            "startup_cpu_s": round(self.s0[1], 3),
            "peak_rss_mib": round(max(self.status1.get("VmHWM", 0.0), self.startup_hwm), 1),
            "startup_peak_rss_mib": round(self.startup_hwm, 1),
            "window_peak_rss_mib": round(self.status1.get("VmHWM", 0.0), 1) if self.hwm_reset else None,
            "rss_end_mib": round(self.status1.get("VmRSS", 0.0), 1),
            "threads": int(self.status1.get("Threads", 0)),
            "smaps_rollup": {
                "processes": self.tree_end,
                "sum_end": {
                    k: round(sum(p["end"].get(k, 0.0) for p in self.tree_end), 1)
                    for k in ("rss", "pss", "anonymous", "file")
                },
                "sum_sampled_peak": self.sum_peak,
                "sum_vmhwm_mib": round(sum(p["vmhwm_mib"] for p in self.tree_end), 1),
                "node_unique_end": self.unique_end,
            },
            "cgroup": {"window_start": self.cg_start, "end": self.cg_end} if self.cgroup else None,
            "pss_timeline_mib": self.pss_timeline,
            **self.maps,
        }


def import_log(lines: list[tuple[float, str]], window_start: float) -> dict[str, Any]:
    """Top-level packages from PYTHONPROFILEIMPORTTIME lines (which also list imports that failed: those not
    installed here are left out), the module that first pulled each heavy one in, and those first imported
    after the warm-up (lazy imports inside the measured window)."""
    import importlib.util

    stdlib = set(getattr(sys, "stdlib_module_names", ()))
    rows: list[tuple[float, int, str]] = []
    for t, ln in lines:
        if ln.startswith("import time:") and not ln.endswith("imported package"):
            name = ln.rsplit("|", 1)[1]
            rows.append((t, len(name) - len(name.lstrip()), name.strip()))
    first: dict[str, int] = {}
    for i, (_, _, mod) in enumerate(rows):
        first.setdefault(mod.split(".")[0], i)

    def installed(top: str) -> bool:
        try:
            return importlib.util.find_spec(top) is not None
        except (ImportError, ValueError):
            return False

    third = {k: i for k, i in first.items() if k not in stdlib and not k.startswith("_") and installed(k)}
    by: dict[str, str | None] = {}
    for k in third:
        if k not in HEAVY:
            continue
        i = third[k]
        depth = rows[i][1]
        by[k] = next((m for _, d, m in rows[i + 1 :] if d < depth and not m.startswith(k)), None)
    return {
        "third_party": sorted(third),
        "heavy": sorted(k for k in third if k in HEAVY),
        "heavy_imported_by": by,
        "not_installed_tried": sorted(
            k for k in first if k not in stdlib and k not in third and not k.startswith("_")
        ),
        "after_warmup": sorted({m.split(".")[0] for t, _, m in rows if t > window_start}),
        "modules": len(rows),
    }


def scrape(url: str, keep: Path | None = None) -> dict[str, Any]:
    from prometheus_client.parser import text_string_to_metric_families

    t = time.monotonic()
    rec: dict[str, Any] = {}
    try:
        with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 - loopback
            body = r.read()
            rec["status"], rec["content_type"] = r.status, r.headers.get("Content-Type")
        rec["ms"], rec["bytes"] = round((time.monotonic() - t) * 1e3, 1), len(body)
        if keep is not None:
            keep.write_bytes(body)
        fams = list(text_string_to_metric_families(body.decode()))
        rec["families"], rec["samples"] = len(fams), sum(len(f.samples) for f in fams)
        rec["ok"] = rec["status"] == 200 and rec["samples"] > 0
        durs = {}
        for f in fams:
            if f.name.startswith("fleettool_agent_collector_duration"):
                durs = {s.labels.get("collector", ""): s.value for s in f.samples}
        rec["collector_duration_s"] = durs
    except Exception as e:  # noqa: BLE001 - a failed scrape is a result
        rec.update(ok=False, error=f"{type(e).__name__}: {e}")
    return rec


def _wait_port_file(p: Path, proc: subprocess.Popen[bytes], timeout: float = 20) -> int:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if p.exists():
            return int(p.read_text())
        if proc.poll() is not None:
            raise SystemExit(f"dcgm stub exited ({proc.returncode})")
        time.sleep(0.05)
    raise SystemExit("dcgm stub did not start")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def store_counts(db: Path) -> dict[str, Any]:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        out: dict[str, Any] = {
            t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
            for t in ("samples", "samples_1m", "events", "alerts", "gpus")
        }
        out["alerts_by_rule"] = dict(
            con.execute("SELECT rule || ' ' || state, count(*) FROM alerts GROUP BY 1 ORDER BY 1").fetchall()
        )
        out["bytes"] = db.stat().st_size
    finally:
        con.close()
    return out


# -- the run ---------------------------------------------------------------------------------------------------
def main() -> None:  # noqa: C901, PLR0915 - one linear script
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", choices=["fake", "nvml"], default="fake")
    ap.add_argument("--gpus", type=int, default=8, help="fake source only; nvml uses every live GPU")
    ap.add_argument("--seconds", type=float, default=180.0, help="measured window")
    ap.add_argument("--warmup", type=float, default=40.0, help="from the agent's start to the window (>= 20)")
    ap.add_argument("--scrape-every", type=float, default=15.0)
    ap.add_argument("--baseline", choices=["concurrent", "sequential", "off"], default="concurrent")
    ap.add_argument("--days", type=float, default=7.0, help="raw samples in the pre-filled store")
    ap.add_argument("--rollup-days", type=float, default=0.0, help="1-minute rollups before those")
    ap.add_argument("--cache-dir", type=Path, default=Path(tempfile.gettempdir()) / "fleettool-bench-cache")
    ap.add_argument("--store-max-age", type=float, default=3600.0, help="seconds a cached store stays usable")
    ap.add_argument("--regenerate", action="store_true")
    ap.add_argument("--template-seconds", type=float, default=65.0)
    ap.add_argument(
        "--kmsg", default="auto", help="auto (/dev/kmsg if readable, else a FIFO), fifo, or a path"
    )
    ap.add_argument("--kmsg-every", type=float, default=60.0, help="seconds between FIFO lines")
    ap.add_argument("--dcgm-counters", choices=["fixture", "deploy"], default="deploy")
    ap.add_argument("--node", default="bench")
    ap.add_argument("--fleettool", default=None, help="command that runs fleettool (default: next to python)")
    ap.add_argument("--agent-arg", action="append", default=[], help="extra agent argument (repeatable)")
    ap.add_argument(
        "--agent-env",
        action="append",
        default=[],
        help="NAME=VALUE in the agent's environment only (repeatable)",
    )
    ap.add_argument(
        "--no-import-log", action="store_true", help="run the agent without PYTHONPROFILEIMPORTTIME"
    )
    ap.add_argument(
        "--cprofile",
        action="store_true",
        help="run the agent under cProfile (its main thread: flushes, rules); the CPU figures of "
        "such a run include the profiler's overhead",
    )
    ap.add_argument(
        "--children",
        action="store_true",
        help="measure the agent's child processes too (a writer process: CPU summed, memory per process)",
    )
    ap.add_argument(
        "--cgroup",
        action="store_true",
        help="run the agent in a memory cgroup of its own (its usage, peak, working set), the store copy's "
        "pages dropped from the page cache first so that its reads are charged to it",
    )
    ap.add_argument(
        "--cgroup-limit", type=float, default=None, help="with --cgroup: its memory limit in MiB (a pod's)"
    )
    ap.add_argument("--prepare-only", action="store_true", help="make (or find) the cached store and stop")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the store copies in the workdir")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    if a.warmup < 20:
        ap.error("--warmup must be at least 20 s")

    work = a.workdir or Path(tempfile.mkdtemp(prefix=f"agent-bench-{a.source}-"))
    work.mkdir(parents=True, exist_ok=True)
    a.cache_dir.mkdir(parents=True, exist_ok=True)
    exe = Path(sys.executable).with_name("fleettool")
    ft = (
        a.fleettool.split()
        if a.fleettool
        else ([str(exe)] if exe.exists() else [sys.executable, "-m", "fleettool"])
    )
    out: dict[str, Any] = {
        "bench": "agent_overhead (as deployed)",
        "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()},
    }
    log = lambda msg: print(f"[agent-bench {a.source}] {msg}", file=sys.stderr, flush=True)  # noqa: E731

    # the GPUs, the dcgm-exporter stub, the kernel log
    from fleettool.sources.base import SourceError

    try:
        snap = source_snapshot(a.source, a.gpus)
    except SourceError as e:  # no GPU or driver here: say so in the JSON
        out["error"] = f"{a.source} source unavailable: {e}"
        if a.json:
            a.json.parent.mkdir(parents=True, exist_ok=True)
            a.json.write_text(json.dumps(out, indent=1, default=str) + "\n")
        raise SystemExit(out["error"]) from None
    n = snap["gpus"]
    out["gpus"], out["driver"] = n, snap["driver"]
    body = dcgm_stub.build_scrape(
        gpus=n,
        node=a.node,
        model=snap["model"] or "NVIDIA H200",
        driver=snap["driver"] or "580.159.04",
        identities=snap["identities"],
        counters=a.dcgm_counters,
        nvml_values=snap["values"],
    )
    (work / "dcgm.prom").write_text(body)
    stub = subprocess.Popen(
        [
            sys.executable,
            str(BENCH / "dcgm_stub.py"),
            "--body",
            str(work / "dcgm.prom"),
            "--port-file",
            str(work / "dcgm.port"),
            "--stats-file",
            str(work / "dcgm.stats"),
        ],
        start_new_session=True,
    )
    kmsg = Kmsg(a.kmsg, work, a.kmsg_every)
    procs: list[Proc] = []
    try:
        dport = _wait_port_file(work / "dcgm.port", stub)
        dcgm_url = f"http://127.0.0.1:{dport}/metrics"
        out["dcgm_exporter"] = {
            "url": dcgm_url,
            "counters": a.dcgm_counters,
            "bytes": len(body),
            "series": sum(1 for ln in body.splitlines() if ln and not ln.startswith("#")),
        }
        out["kmsg"] = {"kind": kmsg.kind, "spec": kmsg.spec}
        src_args = ["--source=fake", f"--gpus={n}", "--fake-costs"] if a.source == "fake" else []

        def agent_cmd(db: Path, port: int | None) -> list[str]:
            cmd = [*ft, "agent", f"--db={db}", f"--node={a.node}"]
            if port is not None:
                cmd += [f"--metrics-port={port}", "--metrics-addr=127.0.0.1"]
            return cmd + [
                f"--kmsg={kmsg.spec}",
                f"--dcgm-exporter={dcgm_url}",
                "--raw-retention=7d",
                "--rollup-retention=400d",
                *src_args,
                *a.agent_arg,
            ]

        # the pre-filled store (cached)
        params = {
            "source": a.source,
            "gpus": n,
            "node": a.node,
            "days": a.days,
            "rollup_days": a.rollup_days,
            "dcgm": a.dcgm_counters,
            "kmsg": kmsg.kind,
            "ids": snap["identities"],
        }
        cstore, cinfo_p, cinfo = agent_store7d.cached(a.cache_dir, params, a.store_max_age)
        if cinfo is None or a.regenerate:
            log(f"no cached store: template run of {a.template_seconds:g} s, then {a.days:g} days")
            tdb = work / "template.duckdb"
            tp = subprocess.run(
                [*agent_cmd(tdb, None), f"--duration={a.template_seconds:g}s", "--no-rules"],
                cwd=work,
                capture_output=True,
                text=True,
                timeout=a.template_seconds + 120,
            )
            if tp.returncode != 0:
                raise SystemExit(f"template run failed ({tp.returncode}): {tp.stderr[-2000:]}")
            tpl = agent_store7d.read_template(tdb)
            gen = agent_store7d.generate(tpl, cstore, days=a.days, rollup_days=a.rollup_days, end=time.time())
            cinfo = {
                "params": params,
                "template": {k: v for k, v in tpl.items() if k != "streams"}
                | {"streams": len(tpl["streams"]), "exit_line": tp.stderr.strip().splitlines()[-1:]},
                "generated": gen,
                "cache_hit": False,
            }
            agent_store7d.save_info(cinfo_p, cinfo)
            log(f"store: {gen['raw_rows']} rows, {gen['bytes'] / 2**20:.0f} MiB in {gen['generate_s']} s")
        else:
            cinfo = {**cinfo, "cache_hit": True}
        out["store"] = {**cinfo, "cache_file": str(cstore)}
        if a.prepare_only:
            out["prepare_only"] = True
            return
        db = work / "agent.duckdb"
        shutil.copyfile(cstore, db)
        if a.cgroup:  # cold: the agent's reads of the store are charged to its cgroup, as in a pod
            fd = os.open(db, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        out["store"]["gap_s"] = round(time.time() - float(cinfo["generated"]["end"]), 1)
        out["store"]["before"] = store_counts(db)

        # the measured processes
        mport = _free_port()
        env = dict(os.environ)
        if not a.no_import_log:
            env["PYTHONPROFILEIMPORTTIME"] = "1"
        for kv in a.agent_env:
            k, _, v = kv.partition("=")
            env[k] = v
        plan = work / "bare-plan.json"
        plan.write_text(json.dumps(bare_plan(a.source, snap)))
        bare_cmd = [sys.executable, str(BENCH / "nvml_bare.py"), "--plan", str(plan)] + (
            ["--fake"] if a.source == "fake" else []
        )
        cmd = agent_cmd(db, mport)
        if a.cprofile:
            cmd = [
                sys.executable,
                "-m",
                "cProfile",
                "-o",
                str(work / "agent.prof"),
                "-m",
                "fleettool",
                *cmd[len(ft) :],
            ]
        cg = MemCgroup(f"agent-bench-{os.getpid()}", a.cgroup_limit) if a.cgroup else None
        if cg is not None and cg.error:
            log(cg.error)
            out["cgroup_error"] = cg.error
            cg = None
        agent = Proc("agent", cmd, work, env, tree=a.children, cgroup=cg)
        out["agent_cmd"] = agent.cmd
        procs.append(agent)
        bare: Proc | None = None
        if a.baseline == "concurrent":
            bare = Proc("bare", bare_cmd, work)
            procs.append(bare)
        url = f"http://127.0.0.1:{mport}/metrics"
        scrapes: list[dict[str, Any]] = []
        t0 = agent.t0
        w0, w1 = t0 + a.warmup, t0 + a.warmup + a.seconds
        next_scrape, next_sample, marked = t0 + 2.0, t0 + 1.0, False
        log(f"agent pid {agent.p.pid}: warm-up {a.warmup:g} s, window {a.seconds:g} s")
        while time.monotonic() < w1:
            now = time.monotonic()
            if not agent.alive():
                raise SystemExit(
                    f"agent exited early ({agent.p.returncode}): "
                    + "\n".join(ln for _, ln in agent.lines[-20:])
                )
            if not marked and now >= w0:
                for p in procs:
                    p.mark("start")
                marked = True
            if now >= next_scrape:
                rec = scrape(url, work / "metrics-last.prom")
                rec["t"] = round(now - t0, 1)
                rec["in_window"] = w0 <= now < w1
                scrapes.append(rec)
                next_scrape += a.scrape_every
            if now >= next_sample:
                for p in procs:
                    p.sample()
                next_sample += 1.0
            kmsg.tick()
            time.sleep(max(0.0, min(next_scrape, next_sample, w1) - time.monotonic()))
        for p in procs:
            p.mark("end")
        stop = agent.stop()
        if bare is not None:
            bare.stop()
        if a.cprofile:
            out["profile"] = summarize_cprofile(work / "agent.prof")
        if a.baseline == "sequential":
            log("bare baseline, alone")
            bare = Proc("bare", bare_cmd, work)
            procs.append(bare)
            time.sleep(min(a.warmup, 10.0))
            bare.mark("start")
            time.sleep(a.seconds)
            bare.mark("end")
            bare.stop()

        # results
        res = agent.result()
        window_start = a.warmup
        res["import_log"] = None if a.no_import_log else import_log(agent.lines, window_start)
        other = [ln for _, ln in agent.lines if not ln.startswith("import time:")]
        res["exit"] = {
            **stop,
            "line": next((ln for ln in reversed(other) if "stopped after" in ln), None),
            "stderr_tail": other[-5:],
        }
        m = re.search(r"(\d+) rows in (\d+) flushes.*?(\d+) failed flushes", res["exit"]["line"] or "")
        if m:
            res["rows_flushed"], res["flushes"], res["flush_failures"] = map(int, m.groups())
        res["cpu_timeline_s"] = agent.timeline
        res["rss_timeline_mib"] = agent.rss
        res["timeline_summary"] = timeline_summary(agent.timeline, a.warmup, a.seconds)
        inw = [r for r in scrapes if r.get("in_window")]
        out["agent"] = res
        out["scrapes"] = {
            "count": len(scrapes),
            "in_window": len(inw),
            "ok": sum(1 for r in scrapes if r.get("ok")),
            "bytes": sorted({r.get("bytes", 0) for r in scrapes}),
            "families": max((r.get("families", 0) for r in scrapes), default=0),
            "samples": max((r.get("samples", 0) for r in scrapes), default=0),
            "content_type": next((r.get("content_type") for r in scrapes if r.get("content_type")), None),
            "ms_max": max((r.get("ms", 0) for r in scrapes), default=0),
            "errors": [r["error"] for r in scrapes if "error" in r][:5],
            "collector_duration_s": _mean_durations(scrapes),
        }
        if bare is not None:
            b = bare.result()
            b["exit_line"] = next((ln for _, ln in reversed(bare.lines) if ln.startswith("{")), None)
            out["bare"] = b
        if bare is not None and "error" not in out["bare"]:
            out["ratio"] = {
                "cpu": round(res["cpu_pct_of_one_core"] / max(b["cpu_pct_of_one_core"], 1e-9), 2),
                "peak_rss": round(res["peak_rss_mib"] / max(b["peak_rss_mib"], 1e-9), 2),
            }
        out["goals"] = {
            "cpu_pct_max": 0.5,
            "rss_mib_max": 100,
            "ratio_max": 2.0,
            "cpu_met": res["cpu_pct_of_one_core"] <= 0.5,
            "rss_met": res["peak_rss_mib"] <= 100,
            "ratio_met": bool(out.get("ratio")) and out["ratio"]["cpu"] <= 2.0,
        }
        out["store"]["after"] = store_counts(db)
        out["kmsg"]["lines_written"] = kmsg.lines
    finally:
        for p in procs:
            if p.alive():
                p.stop(5)
        stub.send_signal(signal.SIGTERM)
        try:
            stub.wait(5)
        except subprocess.TimeoutExpired:
            stub.kill()
        kmsg.close()
        for p in procs:
            if p.cgroup is not None:
                p.cgroup.remove()
        if "dcgm_exporter" in out and (work / "dcgm.stats").exists():
            out["dcgm_exporter"]["served"] = json.loads((work / "dcgm.stats").read_text())["hits"]
        out["workdir"] = str(work)
        if not a.keep:
            for f in ("agent.duckdb", "agent.duckdb.wal", "template.duckdb", "template.duckdb.wal"):
                (work / f).unlink(missing_ok=True)
        text = json.dumps(out, indent=1, default=str)
        if a.json:
            a.json.parent.mkdir(parents=True, exist_ok=True)
            a.json.write_text(text + "\n")
        summary = {k: out.get(k) for k in ("gpus", "ratio", "goals")}
        if "agent" in out:
            summary["agent"] = {
                k: out["agent"].get(k) for k in ("cpu_pct_of_one_core", "peak_rss_mib", "flushes")
            }
        if "bare" in out:
            summary["bare"] = {k: out["bare"].get(k) for k in ("cpu_pct_of_one_core", "peak_rss_mib")}
        print(json.dumps(summary))


def timeline_summary(tl: list[float], warmup: float, seconds: float, spike: float = 0.05) -> dict[str, Any]:
    """The window's seconds split into quiet ones (collection, /metrics) and spikes (flushes, rules): the
    quiet seconds' mean is what the agent costs between flushes."""
    lo, hi = int(warmup), int(warmup + seconds)
    win = [(i + 1, c) for i, c in enumerate(tl) if lo <= i + 1 < hi]  # tl[i]: CPU from second i+1 to i+2
    quiet = [c for _, c in win if c <= spike]
    spikes = [(t, c) for t, c in win if c > spike]
    return {
        "quiet_seconds": len(quiet),
        "quiet_cpu_pct": round(100 * sum(quiet) / max(len(quiet), 1), 3),
        "spike_cpu_s": round(sum(c for _, c in spikes), 2),
        "spikes": spikes,
    }


def _mean_durations(scrapes: list[dict[str, Any]]) -> dict[str, float]:
    acc: dict[str, list[float]] = {}
    for r in scrapes:
        for k, v in (r.get("collector_duration_s") or {}).items():
            acc.setdefault(k, []).append(v)
    return {k: round(sum(v) / len(v), 6) for k, v in acc.items()}


def summarize_cprofile(path: Path, top: int = 30) -> dict[str, Any]:
    """The agent's main thread under cProfile: the functions with most time, cumulative and own."""
    import pstats

    if not path.exists():
        return {"error": "no cProfile output"}
    st = pstats.Stats(str(path))
    rows = []
    for (file, line, fn), (_cc, nc, tt, ct, _) in st.stats.items():  # type: ignore[attr-defined]
        short = re.sub(r"^.*/(site-packages|lib/python3\.\d+)/", "", file).replace(str(ROOT) + "/", "")
        rows.append((f"{short}:{line}({fn})", nc, tt, ct))
    by_cum = sorted(rows, key=lambda r: -r[3])[:top]
    by_own = sorted(rows, key=lambda r: -r[2])[:top]
    return {
        "note": "whole life of the main thread (start-up included); collectors run on other threads",
        "total_s": round(sum(r[2] for r in rows), 2),
        "cumulative_s": [(n, c, round(ct, 3)) for n, c, _, ct in by_cum],
        "own_s": [(n, c, round(tt, 3)) for n, c, tt, _ in by_own],
    }


if __name__ == "__main__":
    main()
