"""The agent's cost with the fabric collector watching 8 CX-7 ports, beside the same agent without it, in one run.

Two `fleettool agent` processes run at the same time, identical but for the fabric collector: the fake GPU source
with --gpus GPUs and --fake-costs (it spins for each NVML call's measured H200 cost), the DaemonSet's 30 s flush,
the built-in rules, /metrics on loopback (scraped by this process every --scrape-every seconds, both alike),
dcgm-exporter and the kernel log off, each its own fresh store:
- `fabric`: `--sysfs-root` a copy of the real H100 tree with 8 CX-7 ports whose counters are all there
  (bench/fabric_tree.py), the BlueField bond excluded (`--fabric-exclude mlx5_bond_*`);
- `bare`: `--no-collector fabric`.
After --warmup seconds (start-up, the first flush and rule pass) each is measured over --seconds of wall time, as
bench/agent_overhead.py measures: CPU = utime+stime of every thread (/proc/PID/stat) over the window's wall time
(% of one core); peak RSS = VmHWM (/proc/PID/status) over the whole life. `ratio` is fabric / bare.

Before the agents start, the collector's own read cost in this process (`read_cost`): the mean time of one
collect() of the state tier (4 files a port) and of one with the counter tier due, and of re-reading the whole tree
with formats.ib_sysfs.read_ib_sysfs plus fabric_samples.reading_samples (what a collector re-reading everything
each second would cost). The tree here is on an ordinary filesystem: on a real node a counter read goes through
the driver to the HCA's firmware (a MAD), which costs more than a page-cache read, so these are floors.

Then `tier10_cost`: one 10 s tick with and without the PCIe widths and the RoCE GID table (fabric_pcie,
fabric_gids), alternated 3 rounds of --calls ticks each (the median round of each reported); `--tier10-only` stops
there.

  python bench/fabric_overhead.py --seconds 180 --json bench/results/fabric-overhead-dev.json
  python bench/fabric_overhead.py --tier10-only --calls 1000 --json bench/results/fabric-tier10-dev.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import fabric_tree  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK  # utime, stime: every thread, live or gone


def peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return float(line.split()[1]) / 1024
    return float("nan")


def read_cost(root: Path, n: int) -> dict[str, Any]:
    """Mean microseconds of the collector's reads, in this process, over `n` calls each."""
    from fleettool.collectors.fabric import FabricCollector
    from fleettool.collectors.fabric_samples import reading_samples
    from fleettool.formats.ib_sysfs import read_ib_sysfs

    t = [0.0]
    # one collector with only the state tier due on each call, one with the counters due on each call
    state = FabricCollector("bench", root, ["mlx5_bond_*"], mono=lambda: t[0], counters_every_s=1e12)
    counters = FabricCollector("bench", root, ["mlx5_bond_*"], mono=lambda: t[0], counters_every_s=0.0)
    for c in (state, counters):
        assert c.start(), c.reason
        c.collect(0.0)  # discovery, the first counters and the notices

    def mean(fn: Any, c: Any) -> tuple[float, float, int]:
        """(microseconds a call, files opened a call, samples of the last call)."""
        reads0, t0 = c.reads, time.perf_counter()
        for _ in range(n):
            samples = fn()
        return (time.perf_counter() - t0) / n * 1e6, (c.reads - reads0) / n, len(samples)

    state_us, state_reads, state_n = mean(lambda: state.collect(1.0).samples, state)
    counter_us, counter_reads, counter_n = mean(lambda: counters.collect(1.0).samples, counters)
    whole_us, _, whole_n = mean(lambda: reading_samples(read_ib_sysfs(root), "bench", 0.0), state)
    return {
        "calls": n,
        "state_tick_us": round(state_us, 1),
        "state_tick_files": state_reads,
        "state_tick_samples": state_n,
        "counter_tick_us": round(counter_us, 1),
        "counter_tick_files": counter_reads,
        "counter_tick_samples": counter_n,
        "read_ib_sysfs_whole_tree_us": round(whole_us, 1),
        "read_ib_sysfs_samples": whole_n,
        "per_second_us": {  # a second of the collector: 9 state ticks and one with counters, vs the whole tree
            "collector": round((9 * state_us + counter_us) / 10, 1),
            "whole_tree_each_second": round(whole_us, 1),
        },
    }


def tier10_cost(root: Path, n: int) -> dict[str, Any]:
    """Mean microseconds of one 10 s tick (state and counter tiers due) with the PCIe widths and the RoCE GID
    table read (fabric_pcie, fabric_gids), and of the same tick without them (the two helpers made no-ops in
    fleettool.collectors.fabric for the baseline), same collector and tree, in this process. The tree: the 8
    CX-7 ports with their PCIe widths and the BlueField bond (included here) with a 255-entry RoCE GID table."""
    import fleettool.collectors.fabric as fab

    fabric_tree.roce_gid_table(root)
    c = fab.FabricCollector("bench", root, mono=lambda: 0.0, counters_every_s=0.0)
    assert c.start(), c.reason
    first = c.collect(0.0)
    got = {s.metric for s in first.samples}
    assert {"nic_pcie_width_lanes", "ib_port_roce_v2_gids"} <= got, got

    def mean() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            c.collect(1.0)
        return (time.perf_counter() - t0) / n * 1e6

    res: dict[str, float] = {}
    saved = fab.pcie_samples, fab.gid_samples
    for rnd in range(3):  # alternated, so a burst of load on the box hits both alike
        res[f"with_us_{rnd}"] = mean()
        fab.pcie_samples = fab.gid_samples = lambda *a, **k: []
        try:
            res[f"without_us_{rnd}"] = mean()
        finally:
            fab.pcie_samples, fab.gid_samples = saved
    w = sorted(res[f"with_us_{r}"] for r in range(3))[1]
    wo = sorted(res[f"without_us_{r}"] for r in range(3))[1]
    return {
        "calls": n,
        "tick_10s_us": round(w, 1),
        "tick_10s_without_pcie_gids_us": round(wo, 1),
        "ratio": round(w / wo, 3),
        "added_us": round(w - wo, 1),
        "rounds": {k: round(v, 1) for k, v in res.items()},
    }


def _metrics(port: int) -> None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            r.read()
    except OSError:
        pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=180.0)
    ap.add_argument("--warmup", type=float, default=40.0)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--scrape-every", type=float, default=15.0)
    ap.add_argument("--calls", type=int, default=2000, help="read_cost: calls of each kind")
    ap.add_argument("--port", type=int, default=19441, help="the fabric agent's; the bare one's is +1")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--tier10-only", action="store_true", help="only tier10_cost (no agents)")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fabric-overhead-"))
    out: dict[str, Any] = {"tier10_cost": tier10_cost(fabric_tree.build(work / "sys10"), a.calls)}
    print(json.dumps(out["tier10_cost"], indent=1), flush=True)
    if a.tier10_only:
        out.update(nproc=os.cpu_count(), loadavg=os.getloadavg())
        if a.json:
            a.json.parent.mkdir(parents=True, exist_ok=True)
            a.json.write_text(json.dumps(out, indent=1) + "\n")
        return
    root = fabric_tree.build(work / "sys")
    out["read_cost"] = read_cost(root, a.calls)
    print(json.dumps(out["read_cost"], indent=1), flush=True)
    exe = shutil.which("fleettool")
    base = [exe, "agent"] if exe else [sys.executable, "-m", "fleettool", "agent"]
    common = [
        "--source",
        "fake",
        "--gpus",
        str(a.gpus),
        "--fake-costs",
        "--kmsg",
        "off",
        "--dcgm-exporter",
        "off",
    ]
    common += ["--flush", "30s", "--raw-retention", "7d", "--rollup-retention", "400d", "-q"]
    runs = {
        "fabric": ["--sysfs-root", str(root), "--fabric-exclude", "mlx5_bond_*"],
        "bare": ["--no-collector", "fabric"],
    }
    procs: dict[str, subprocess.Popen[bytes]] = {}
    ports = {"fabric": a.port, "bare": a.port + 1}
    for name, extra in runs.items():
        cmd = [*base, "--db", str(work / f"{name}.duckdb"), "--node", f"bench-{name}", *common, *extra]
        cmd += ["--metrics-port", str(ports[name])]
        procs[name] = subprocess.Popen(cmd, cwd=work, stderr=(work / f"{name}.stderr").open("wb"))
    try:
        t_end_warm = time.monotonic() + a.warmup
        while time.monotonic() < t_end_warm:
            time.sleep(1.0)
        for name, p in procs.items():
            if p.poll() is not None:
                raise SystemExit(
                    f"{name} agent exited ({p.returncode}): {(work / f'{name}.stderr').read_text()[-1500:]}"
                )
        cpu0 = {n: proc_cpu_s(p.pid) for n, p in procs.items()}
        w0 = time.monotonic()
        next_scrape = w0
        while time.monotonic() - w0 < a.seconds:
            if time.monotonic() >= next_scrape:
                next_scrape += a.scrape_every
                for port in ports.values():
                    _metrics(port)
            time.sleep(0.2)
        wall = time.monotonic() - w0
        res = {
            n: {
                "cpu_pct_of_core": round(100 * (proc_cpu_s(p.pid) - cpu0[n]) / wall, 3),
                "peak_rss_mib": round(peak_rss_mib(p.pid), 1),
            }
            for n, p in procs.items()
        }
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            p.wait(60)
    import duckdb

    for n in runs:
        con = duckdb.connect(str(work / f"{n}.duckdb"), read_only=True)
        res[n]["ib_rows"] = con.execute("SELECT count(*) FROM samples WHERE metric LIKE 'ib_%'").fetchall()[
            0
        ][0]
        res[n]["alerts"] = con.execute("SELECT count(*) FROM alerts").fetchall()[0][0]
        con.close()
    out.update(
        agents=res,
        window_s=round(wall, 1),
        warmup_s=a.warmup,
        ratio={
            "cpu": round(res["fabric"]["cpu_pct_of_core"] / res["bare"]["cpu_pct_of_core"], 3),
            "peak_rss": round(res["fabric"]["peak_rss_mib"] / res["bare"]["peak_rss_mib"], 3),
        },
        nproc=os.cpu_count(),
        loadavg=os.getloadavg(),
    )
    print(json.dumps({k: out[k] for k in ("agents", "ratio", "window_s")}, indent=1))
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(out, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
