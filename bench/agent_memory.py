"""Issue 33's 100 MiB goal: the alternatives, each a run of bench/agent_overhead.py (8 fake GPUs at the H200's
call costs, every default collector, a 7-day store, the bare loop beside it in the same run), one at a time:

- DuckDB's memory settings, applied to the agent's flush and rule connections after its own limit_resources
  (bench/duckdb_settings_hook/sitecustomize.py on PYTHONPATH, FLEETTOOL_BENCH_DUCKDB_SET; the agent prints the
  values DuckDB reads back, `bench duckdb settings: ...`, into its stderr);
- the agent's own options: a shorter flush interval (a smaller buffer), a smaller --max-buffer;
- a long-lived writer process (bench/agent_writer_proc.py: a parent without DuckDB, a child that owns it),
  both processes measured (--children): CPU summed, RSS and PSS per process and summed per node.

Each run also has the agent in a memory cgroup of its own where this machine allows one (--cgroup: usage,
peak, the kubelet's working set) and /proc/PID/smaps_rollup once a second (RSS, PSS, anonymous, file-backed).

  python bench/agent_memory.py --seconds 120 --out bench/results/agent-memory-dev
  python bench/agent_memory.py --table bench/results/agent-memory-dev      # the table from the JSONs
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent

# name -> (DuckDB settings, extra agent arguments, run through the writer-process prototype)
VARIANTS: dict[str, tuple[str, list[str], bool]] = {
    "base": ("", [], False),
    "alloc-flush-4MB": ("allocator_flush_threshold=4MB", [], False),
    "bulk-flush-4MB": ("allocator_bulk_deallocation_flush_threshold=4MB", [], False),
    "alloc-bg-threads": ("allocator_background_threads=true", [], False),
    "memory-32MB": ("memory_limit=32MB", [], False),
    "memory-8MB": ("memory_limit=8MB", [], False),
    "memory-12MB": ("memory_limit=12MB", [], False),
    "flush-15s": ("", ["--flush=15s"], False),
    "max-buffer-4MiB": ("", ["--max-buffer=4MiB"], False),
    "writer-process": ("", [], True),
}
# name -> the agent's cgroup memory limit in MiB (a pod's limit): does the agent run within it, at what CPU
LIMITS: dict[str, float] = {
    "base-limit-100MiB": 100.0,
    "writer-process-limit-100MiB": 100.0,
    "base-cold-lib-limit-100MiB": 100.0,
}
# the agent imports a fresh copy of the duckdb package, dropped from the page cache before it starts: its library
# pages are then charged to the agent's cgroup, as in a pod whose image nobody else on the node has read
COLD_LIB = {"base-cold-lib", "base-cold-lib-limit-100MiB"}
VARIANTS["base-limit-100MiB"] = VARIANTS["base"]
VARIANTS["writer-process-limit-100MiB"] = VARIANTS["writer-process"]
VARIANTS["base-cold-lib"] = VARIANTS["base"]
VARIANTS["base-cold-lib-limit-100MiB"] = VARIANTS["base"]


def cold_duckdb(dest: Path) -> Path:
    """A copy of the installed duckdb package (and its _duckdb extension module) in `dest`, out of the page cache."""
    import shutil

    import _duckdb
    import duckdb  # noqa: F401 - only its location

    site = Path(_duckdb.__file__).parent
    shutil.copytree(site / "duckdb", dest / "duckdb")
    shutil.copy2(_duckdb.__file__, dest / Path(_duckdb.__file__).name)
    for f in dest.rglob("*"):
        if f.is_file():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    return dest


def run(name: str, a: argparse.Namespace) -> Path:
    sets, args, writer = VARIANTS[name]
    out = a.out / f"{name}.json"
    env = dict(os.environ)
    if sets:
        env["PYTHONPATH"] = os.pathsep.join([str(BENCH / "duckdb_settings_hook"), env.get("PYTHONPATH", "")])
        env["FLEETTOOL_BENCH_DUCKDB_SET"] = sets
    cmd = [
        sys.executable,
        str(BENCH / "agent_overhead.py"),
        "--source=fake",
        f"--gpus={a.gpus}",
        f"--seconds={a.seconds:g}",
        f"--warmup={a.warmup:g}",
        f"--cache-dir={a.cache_dir}",
        f"--store-max-age={a.store_max_age:g}",
        "--children",
        "--json",
        str(out),
        *([] if a.no_cgroup else ["--cgroup"]),
        *([f"--cgroup-limit={LIMITS[name]:g}"] if name in LIMITS else []),
        *[f"--agent-arg={x}" for x in args],
    ]
    if name in COLD_LIB:
        lib = cold_duckdb(Path(tempfile.mkdtemp(prefix="cold-duckdb-")))
        path = os.pathsep.join(filter(None, [str(lib), env.get("PYTHONPATH", "")]))
        cmd.append(f"--agent-env=PYTHONPATH={path}")
    if writer:
        cmd.append(f"--fleettool={sys.executable} {BENCH / 'agent_writer_proc.py'}")
    print(
        f"[agent-memory] {name}: {sets or ''} {' '.join(args)}{' writer process' if writer else ''}",
        flush=True,
    )
    try:
        subprocess.run(cmd, env=env, check=False)
    finally:
        if name in COLD_LIB:
            import shutil

            shutil.rmtree(lib, ignore_errors=True)
    return out


def row(name: str, d: dict[str, Any]) -> dict[str, Any]:
    ag, bare = d.get("agent", {}), d.get("bare", {})
    sm = ag.get("smaps_rollup", {})
    cg = (ag.get("cgroup") or {}).get("end") or {}
    procs = sm.get("processes", [])
    after = d.get("store", {}).get("after", {})
    said = [ln for ln in ag.get("exit", {}).get("stderr_tail", []) if "bench duckdb settings" in ln]
    return {
        "variant": name,
        "cpu_pct": ag.get("cpu_pct_of_one_core"),
        "bare_cpu_pct": bare.get("cpu_pct_of_one_core"),
        "cpu_ratio": (d.get("ratio") or {}).get("cpu"),
        "peak_rss": ag.get("peak_rss_mib"),
        "startup_peak": ag.get("startup_peak_rss_mib"),
        "window_peak": ag.get("window_peak_rss_mib"),
        "rss_end": ag.get("rss_end_mib"),
        "per_process_vmhwm": [p.get("vmhwm_mib") for p in procs],
        "sum_vmhwm": sm.get("sum_vmhwm_mib"),
        "sum_end": sm.get("sum_end"),
        "sum_sampled_peak": sm.get("sum_sampled_peak"),
        "node_unique_end": sm.get("node_unique_end"),
        "cgroup_peak": cg.get("peak_usage_mib"),
        "cgroup_usage_end": cg.get("usage_mib"),
        "working_set_end": cg.get("working_set_mib"),
        "cgroup_anon_end": cg.get("anon_mib"),
        "cgroup_limit": cg.get("limit_mib"),
        "oom_kill": cg.get("oom_kill"),
        "bare_peak_rss": bare.get("peak_rss_mib"),
        "alerts": after.get("alerts_by_rule"),
        "flushes": ag.get("flushes"),
        "flush_failures": ag.get("flush_failures"),
        "settings_read_back": said[:1],
    }


def table(d: Path) -> str:
    runs = [(p.stem, json.loads(p.read_text())) for p in sorted(d.glob("*.json"))]
    rows = [row(name, run) for name, run in runs if isinstance(run, dict)]  # rule-pass.json is a list
    order = list(VARIANTS)
    rows.sort(key=lambda r: order.index(r["variant"]) if r["variant"] in order else 99)
    head = (
        "| variant | agent CPU % | bare CPU % | ratio | peak RSS (start-up / window) | RSS end | "
        "per-process peak | PSS end (sum) | node-unique end | anon / file end | cgroup peak | working set end | bare RSS | "
        "alerts | failed flushes | limit / OOM kills |\n|" + "---|" * 16
    )
    lines = [head]
    for r in rows:
        se = r["sum_end"] or {}
        lines.append(
            f"| {r['variant']} | {r['cpu_pct']} | {r['bare_cpu_pct']} | {r['cpu_ratio']} | "
            f"{r['peak_rss']} ({r['startup_peak']} / {r['window_peak']}) | {r['rss_end']} | "
            f"{' + '.join(str(x) for x in r['per_process_vmhwm'])} = {r['sum_vmhwm']} | {se.get('pss')} | "
            f"{(r['node_unique_end'] or {}).get('total')} | "
            f"{se.get('anonymous')} / {se.get('file')} | {r['cgroup_peak']} | {r['working_set_end']} | "
            f"{r['bare_peak_rss']} | {r['alerts']} | {r['flush_failures']} | {r['cgroup_limit']} / {r['oom_kill']} |"
        )
    return "\n".join(lines)


def _status_mib(key: str) -> float:
    with open("/proc/self/status") as f:
        return next(float(ln.split()[1]) / 1024 for ln in f if ln.startswith(key + ":"))


def rule_pass_child(db: Path, mode: str, sets: str) -> None:
    """One process: the agent's first rule pass (every built-in rule over the store, as the first flush runs it,
    on a connection limited as the agent's), RSS after each rule; `trim`: malloc_trim after each rule too."""
    import time

    from fleettool.agent import memory
    from fleettool.agent.config import AgentConfig
    from fleettool.engine import incremental
    from fleettool.engine.rules import load_rules
    from fleettool.store import Store

    memory.limit_arenas()
    cfg = AgentConfig(db=db, node="bench")
    per_rule: list[tuple[str, float, float]] = []
    orig = incremental.evaluate_rule

    def spy(store: Any, r: Any, *args: Any, **kw: Any) -> Any:
        t = time.process_time()
        out = orig(store, r, *args, **kw)
        if mode == "trim":
            memory.trim()
        per_rule.append((r.alert, round(_status_mib("VmRSS"), 1), round(time.process_time() - t, 4)))
        return out

    incremental.evaluate_rule = spy  # type: ignore[assignment]
    with Store(db, read_only=False) as st:
        st.limit_resources(cfg.duckdb_memory, cfg.duckdb_threads)
        for kv in filter(None, sets.split(";")):
            k, _, v = kv.partition("=")
            st.execute(f"SET {k} = '{v}'")
        now = float(st.scalar("SELECT epoch(max(ts)) FROM samples")) + 1.0
        rss0 = _status_mib("VmRSS")
        t0 = time.process_time()
        sched = incremental.RuleScheduler(load_rules())
        written = sched.run(st, now, final=True)
        cpu = time.process_time() - t0
        findings = sorted((k, len(v)) for k, v in sched.findings.items() if v)
    memory.trim()
    top = sorted(per_rule, key=lambda x: -x[1])[:5]
    print(
        json.dumps(
            {
                "mode": mode,
                "sets": sets,
                "rss_before_mib": round(rss0, 1),
                "vmhwm_mib": round(_status_mib("VmHWM"), 1),
                "rss_after_trim_mib": round(_status_mib("VmRSS"), 1),
                "cpu_s": round(cpu, 2),
                "rules": len(per_rule),
                "alerts_written": written,
                "findings": findings,
                "highest_rss_after_rule": top,
            }
        )
    )


def rule_pass(a: argparse.Namespace) -> None:
    """The first rule pass alone, in fresh processes: as the agent runs it, with a trim between rules, with an
    allocator setting, at other memory limits; each on its own copy of the cached 7-day store."""
    import shutil

    src = sorted(a.cache_dir.glob("store-*.duckdb"), key=lambda p: p.stat().st_mtime)[-1]
    res = []
    modes = [("as-is", ""), ("trim", ""), ("as-is", "allocator_flush_threshold=4MB")]
    modes += [("as-is", f"memory_limit={m}") for m in ("10MB", "12MB", "32MB")]
    for mode, sets in modes * a.repeat:
        with tempfile.TemporaryDirectory() as td:
            db = Path(td) / "s.duckdb"
            shutil.copyfile(src, db)
            p = subprocess.run(
                [sys.executable, __file__, "--rule-pass-child", str(db), mode, sets],
                capture_output=True,
                text=True,
                check=False,
            )
            err = {"mode": mode, "sets": sets, "error": (p.stderr.strip().splitlines() or [""])[-1][:300]}
            line = p.stdout.strip().splitlines()[-1:] or [json.dumps(err)]
            print(line[0], flush=True)
            res.append(json.loads(line[0]))
    if a.json:
        a.json.write_text(json.dumps(res, indent=1) + "\n")


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--rule-pass-child":
        rule_pass_child(Path(sys.argv[2]), sys.argv[3], sys.argv[4])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", choices=list(VARIANTS), help="these variants (repeatable)")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--warmup", type=float, default=40.0)
    ap.add_argument("--cache-dir", type=Path, default=Path(tempfile.gettempdir()) / "fleettool-bench-cache")
    ap.add_argument("--store-max-age", type=float, default=3600.0)
    ap.add_argument("--no-cgroup", action="store_true")
    ap.add_argument("--out", type=Path, default=BENCH / "results" / "agent-memory-dev")
    ap.add_argument("--rule-pass", action="store_true", help="the first rule pass alone (item 3) and stop")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--table", type=Path, default=None, help="print the table of a finished --out and stop")
    a = ap.parse_args()
    if a.table is not None:
        print(table(a.table))
        return
    if a.rule_pass:
        rule_pass(a)
        return
    a.out.mkdir(parents=True, exist_ok=True)
    for name in a.only or list(VARIANTS):
        run(name, a)
    print(table(a.out))


if __name__ == "__main__":
    main()
