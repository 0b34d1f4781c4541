"""Command start-up (issue 33 part 3): how long `fleettool --help`, `fleettool <cmd> --help` and the read
commands take from spawn to exit, beside `python -c pass` measured in the same run.

Every command runs as a user runs it: the installed `fleettool` script beside this Python, a subprocess, its
bytecode cached as an installed package has it (PYTHONPYCACHEPREFIX under the work directory, warmed by one
untimed run of each command). The runs are interleaved (round r runs every command once, in a shuffled order)
so that a burst of load from elsewhere falls on all of them alike; each command's figure is the median of its
N walls, and the overhead is that median minus the median of `python -c pass`.

The read commands run on a small store: the bundled demo recording replayed once into a fresh file
(`fleettool demo --db`), untimed. Every timed run must exit 0 with output, or the run fails.

Goals: `--help` and `<cmd> --help` at most 100 ms over `python -c pass`; `alerts`, `events`, `gpus`,
`incidents` at most 150 ms over it.

  python bench/startup.py --runs 21 --json bench/results/startup-dev.json
  python bench/startup.py --importtime   # where the import time goes (-X importtime, top entries)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HELP_GOAL_MS = 100.0
READ_GOAL_MS = 150.0
HELP_CMDS = ["agent", "replay", "alerts", "incidents", "rules", "burnin", "tui", "remediate", "fleet"]
READ_CMDS = ["alerts", "events", "gpus", "incidents"]


def _cli() -> str:
    beside = Path(sys.executable).with_name("fleettool")
    return str(beside) if beside.exists() else (shutil.which("fleettool") or "fleettool")


def _env(work: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its bytecode compiled
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    env["COLUMNS"] = "120"
    return env


def _once(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall from spawn to exit, and the child's CPU (user + system: less moved by other load on the box)."""
    for a in cmd:  # a replay's store is made fresh for every run
        if a.endswith("fresh.duckdb"):
            Path(a).unlink(missing_ok=True)
            Path(a + ".wal").unlink(missing_ok=True)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, check=False)
    wall = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if p.returncode != 0 or (cmd[1:] != ["-c", "pass"] and not p.stdout.strip()):
        err = p.stderr.decode("utf-8", "replace")[-800:]
        raise SystemExit(f"{' '.join(cmd)} exited {p.returncode} (stdout {len(p.stdout)} B): {err}")
    return wall, cpu


def commands(db: Path, tiny: Path, before: str | None) -> dict[str, list[str]]:
    cmds: dict[str, list[str]] = {"python -c pass": [sys.executable, "-c", "pass"]}
    for label, fleettool in (("", _cli()), ("before: ", before)):
        if fleettool is None:
            continue
        cmds[f"{label}fleettool --help"] = [fleettool, "--help"]
        for c in HELP_CMDS:
            cmds[f"{label}fleettool {c} --help"] = [fleettool, c, "--help"]
        for c in READ_CMDS:
            cmds[f"{label}fleettool {c}"] = [fleettool, c, "--db", str(db)]
        # replay's fixed cost: a 2-sample recording into a fresh store (start-up, store creation, rules, exit)
        cmds[f"{label}fleettool replay (2 samples)"] = [
            fleettool,
            "replay",
            str(tiny),
            "--db",
            str(tiny.with_name("fresh.duckdb")),
            "-q",
        ]
    return cmds


TINY = (
    "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
    'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-0",Hostname="n1"} 40 1700000000\n'
    'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-0",Hostname="n1"} 41 1700000001\n'
    "# EOF\n"
)


def measure(runs: int, work: Path, before: str | None = None) -> dict[str, Any]:
    env = _env(work)
    db = work / "small.duckdb"
    subprocess.run([_cli(), "demo", "--db", str(db)], env=env, capture_output=True, check=True)
    tiny = work / "tiny.om"
    tiny.write_text(TINY)
    cmds = commands(db, tiny, before)
    for cmd in cmds.values():  # warm: bytecode written, files in the page cache
        _once(cmd, env)
    walls: dict[str, list[float]] = {k: [] for k in cmds}
    cpus: dict[str, list[float]] = {k: [] for k in cmds}
    order = list(cmds)
    rng = random.Random(33)
    for _ in range(runs):
        rng.shuffle(order)
        for k in order:
            w, c = _once(cmds[k], env)
            walls[k].append(w)
            cpus[k].append(c)
    base = statistics.median(walls["python -c pass"])
    base_cpu = statistics.median(cpus["python -c pass"])
    rows = []
    for k, w in walls.items():
        med = statistics.median(w)
        cpu = statistics.median(cpus[k])
        goal = None
        if k.startswith("fleettool") and "replay (" not in k:
            goal = HELP_GOAL_MS if k.endswith("--help") else READ_GOAL_MS
        over = (med - base) * 1000
        rows.append(
            {
                "command": k,
                "median_ms": round(med * 1000, 1),
                "min_ms": round(min(w) * 1000, 1),
                "over_python_ms": round(over, 1),
                "ratio_to_python": round(med / base, 2),
                "cpu_median_ms": round(cpu * 1000, 1),
                "cpu_over_python_ms": round((cpu - base_cpu) * 1000, 1),
                "goal_over_python_ms": goal,
                "met": None if goal is None else over <= goal,
            }
        )
    return {
        "runs": runs,
        "python": sys.version.split()[0],
        "machine": f"{platform.node()} {os.cpu_count()} cpus",
        "loadavg_before": os.getloadavg()[0],
        "rows": rows,
    }


def importtime(work: Path, top: int) -> str:
    """`python -X importtime` of `fleettool --help`, the cumulative top entries (microseconds)."""
    env = _env(work)
    code = "import sys; sys.argv = ['fleettool', '--help']; from fleettool.cli import main; main()"
    subprocess.run([sys.executable, "-c", code], env=env, capture_output=True)  # warm the bytecode
    p = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=env, capture_output=True)
    lines = [ln for ln in p.stderr.decode().splitlines() if ln.startswith("import time:") and "|" in ln]
    parsed = []
    for ln in lines[1:]:
        self_us, cum_us, name = ln.removeprefix("import time:").split("|")
        parsed.append((int(cum_us), int(self_us), name.rstrip()))
    parsed.sort(reverse=True)
    return "\n".join(f"{c / 1000:8.1f} ms cum {s / 1000:7.1f} ms self  {n}" for c, s, n in parsed[:top])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--importtime", action="store_true", help="print where the import time goes, then exit")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--before", help="another fleettool executable (e.g. main's) timed in the same run")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if a.importtime:
            print(importtime(work, a.top))
            return
        res = measure(a.runs, work, a.before)
    w = max(len(r["command"]) for r in res["rows"])
    print(f"{res['runs']} runs each, interleaved; medians; load average before {res['loadavg_before']:.2f}")
    print(f"{'':<{w}}  {'wall':>9}  {'over python':>11}  {'ratio':>6}  {'cpu':>8}  {'cpu over':>8}")
    for r in res["rows"]:
        met = "" if r["met"] is None else ("met" if r["met"] else "MISSED")
        print(
            f"{r['command']:<{w}}  {r['median_ms']:6.1f} ms  {r['over_python_ms']:+8.1f} ms  "
            f"{r['ratio_to_python']:5.2f}x  {r['cpu_median_ms']:5.1f} ms  {r['cpu_over_python_ms']:+5.1f} ms  {met}"
        )
    res["loadavg_after"] = os.getloadavg()[0]
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
