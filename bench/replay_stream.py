"""Replay streams (issue 15 part 3): `fleettool replay` of a dense dcgm-exporter recording, next to promtool's
backfill of the same file and a bare DuckDB Arrow insert of the same rows, all in one run.

For each input (bench/gen_dcgm.py: N GPUs x 20 DCGM_FI_* fields x 1 Hz x H hours, OpenMetrics with timestamps),
one after the other, never two at once:

1. `fleettool replay FILE --db FRESH.duckdb -q` as a user runs it: a subprocess of the installed CLI (the one
   beside this Python), bytecode cached as an installed package has it (PYTHONPYCACHEPREFIX under the work
   directory, warmed by one untimed replay of a tiny file). Wall time from spawn to exit; peak RSS of that
   process (its VmHWM, polled every 5 ms). The whole command: start-up, digest, parse, insert, commit, rule
   evaluation, the printed summary. The gzipped twin of the file too (`--gzip`).
2. The stored rows are counted (`SELECT count(*) FROM samples`) and must equal the samples generated, or the
   run fails: a fast wrong path cannot pass.
3. `promtool tsdb create-blocks-from openmetrics FILE OUTDIR` on the plain file: wall, peak RSS, and the
   samples of the blocks it wrote (summed from its own table; checked equal too).
4. The bare peer: the rows replay stored, read back as one ready Arrow table (plain strings), inserted into a
   fresh database with the store's own schema by `INSERT INTO samples SELECT * FROM t` in one transaction,
   in this process; wall of register + insert + commit + close.
5. In this process, fleettool's ingest alone (`fleettool.ingest.run.ingest` into a fresh store, no start-up,
   no rules): where the command's time goes.

Ratios: replay speed / promtool speed (goal >= 2), replay speed / bare insert speed (goal >= 0.25), 6 h peak
RSS / 1 h peak RSS (goal <= 1.3) and peak RSS for 4 GPUs (goal <= 300 MiB).

  python bench/replay_stream.py --gpus 4 8 --hours 1 6 --gzip --json bench/results/replay-stream-dev.json
  python bench/replay_stream.py --gpus 4 --hours 1 6 --repeat 5 --no-ingest-only --before /work/main/.venv/bin/fleettool
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gen_dcgm  # noqa: E402

MiB = 1 << 20


def _hwm_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for ln in f:
                if ln.startswith("VmHWM:"):
                    return int(ln.split()[1])
    except OSError:
        pass
    return 0


def _run(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Wall time and peak RSS of one child process. The peak is the child's own VmHWM, read from /proc every
    5 ms while it runs (its high-water mark, reset at exec): wait4's ru_maxrss would not do, Linux carries the
    parent's high-water mark at fork into the child's, and this process holds the bare insert's table."""
    t = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        hwm = 0
        while True:
            hwm = max(hwm, _hwm_kib(p.pid))
            got, status, ru = os.wait4(p.pid, os.WNOHANG)
            if got:
                break
            time.sleep(0.005)
        wall = time.perf_counter() - t
        out.seek(0)
        err.seek(0)
        text, errs = out.read(), err.read()
    p.returncode = os.waitstatus_to_exitcode(status)
    return {
        "wall_s": round(wall, 3),
        "user_s": round(ru.ru_utime, 3),
        "sys_s": round(ru.ru_stime, 3),
        "peak_rss_mib": round(hwm / 1024, 1),
        "rc": p.returncode,
        "stdout": text.decode("utf-8", "replace"),
        "stderr": errs.decode("utf-8", "replace"),
    }


def _fresh(db: Path) -> Path:
    for f in (db, db.with_name(db.name + ".wal")):
        f.unlink(missing_ok=True)
    return db


def _cli() -> str:
    beside = Path(sys.executable).with_name("fleettool")
    return str(beside) if beside.exists() else (shutil.which("fleettool") or "fleettool")


def _user_env(work: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its bytecode compiled
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    return env


def _stored(db: Path) -> int:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        return int(con.execute("SELECT count(*) FROM samples").fetchall()[0][0])
    finally:
        con.close()


def replay(path: Path, work: Path, env: dict[str, str], cli: str | None = None) -> dict[str, Any]:
    db = _fresh(work / "replay.duckdb")
    r = _run([cli or _cli(), "replay", str(path), "--db", str(db), "-q"], env)
    if r["rc"] != 0:
        raise SystemExit(f"replay of {path} exited {r['rc']}: {r['stderr'][-2000:]}")
    r["rows_stored"] = _stored(db)
    r["db_mib"] = round(db.stat().st_size / MiB, 1)
    del r["stdout"], r["stderr"]
    return r


def promtool(path: Path, work: Path) -> dict[str, Any]:
    out = work / "promtool-blocks"
    shutil.rmtree(out, ignore_errors=True)
    r = _run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(path), str(out)])
    if r["rc"] != 0:
        raise SystemExit(f"promtool on {path} exited {r['rc']}: {r['stderr'][-2000:]}")
    # its table: BLOCK ULID, MIN TIME, MAX TIME, DURATION, NUM SAMPLES, NUM CHUNKS, NUM SERIES, SIZE
    rows = [ln.split() for ln in r["stdout"].splitlines() if re.match(r"^[0-9A-Z]{26}\s", ln)]
    r["samples_written"] = sum(int(c[4]) for c in rows)
    r["blocks"] = len(rows)
    del r["stdout"], r["stderr"]
    shutil.rmtree(out, ignore_errors=True)
    return r


def bare_insert(work: Path) -> dict[str, Any]:
    """The rows replay stored as one ready Arrow table, inserted raw into a fresh store-shaped file."""
    import duckdb
    import pyarrow as pa

    from fleettool.store import Store

    src = duckdb.connect(str(work / "replay.duckdb"), read_only=True)
    table = src.sql("SELECT * FROM samples").to_arrow_table()
    src.close()
    if not isinstance(table, pa.Table):
        table = table.read_all()
    table = table.combine_chunks()
    raw = _fresh(work / "bare.duckdb")
    Store(raw).close()  # the store's schema, exactly
    con = duckdb.connect(str(raw))
    t = time.perf_counter()
    con.register("t", table)
    con.execute("BEGIN")
    con.execute("INSERT INTO samples SELECT * FROM t")
    con.execute("COMMIT")
    con.close()
    wall = time.perf_counter() - t
    rows = table.num_rows
    del table
    _fresh(raw)
    return {"wall_s": round(wall, 3), "rows": rows}


def ingest_only(path: Path, work: Path) -> dict[str, Any]:
    """fleettool's ingest in this process (no start-up, no rule evaluation), into a fresh store."""
    from fleettool.ingest.report import IngestOptions
    from fleettool.ingest.run import ingest
    from fleettool.store import Store

    db = _fresh(work / "ingest.duckdb")
    t = time.perf_counter()
    with Store(db) as s:
        rows = ingest(s, path, IngestOptions(quiet=True))[0].rows
    wall = time.perf_counter() - t
    _fresh(db)
    return {"wall_s": round(wall, 3), "rows": rows}


def _input(work: Path, gpus: int, hours: float, gz: bool) -> tuple[Path, int]:
    name = f"dcgm-{gpus}g-{hours:g}h.om" + (".gz" if gz else "")
    path = work / name
    n = gpus * len(gen_dcgm.FIELDS) * int(round(hours * 3600))
    if not path.exists():
        tmp = path.with_name(path.name + ".part")
        got = gen_dcgm.generate(tmp, gpus, hours, gz=gz)
        assert got == n, (got, n)
        tmp.rename(path)
    return path, n


def _machine() -> dict[str, Any]:
    import duckdb
    import pyarrow

    cpu = ""
    with open("/proc/cpuinfo") as f:
        for ln in f:
            if ln.startswith("model name"):
                cpu = ln.split(":", 1)[1].strip()
                break
    prom = subprocess.run(["promtool", "--version"], capture_output=True, text=True).stdout.splitlines()
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "mem_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30), 1),
        "python": platform.python_version(),
        "duckdb": duckdb.__version__,
        "pyarrow": pyarrow.__version__,
        "promtool": prom[0] if prom else "?",
    }


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median wall time, with every run's wall beside it."""
    mid = sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2]
    return {**mid, "walls_s": [r["wall_s"] for r in runs]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--hours", type=float, nargs="+", default=[1.0, 6.0])
    ap.add_argument("--gzip", action="store_true", help="also replay the gzipped twin of each input")
    ap.add_argument("--no-ingest-only", action="store_true", help="skip the in-process ingest figure")
    ap.add_argument("--work", type=Path, default=Path("/tmp/helperR/replay-bench"))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--repeat", type=int, default=1, help="replay and promtool N times each, alternating; the median run"
    )
    ap.add_argument(
        "--before",
        default=None,
        help="another fleettool executable (e.g. main's) whose replay runs alternating with this one's and promtool",
    )
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    env = _user_env(a.work)
    tiny, _ = _input(a.work, 1, 0.01, False)
    replay(tiny, a.work, env)  # untimed: compiles the bytecode a user's install has
    if a.before:
        replay(tiny, a.work, env, a.before)
    res: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": _machine(),
        "load_before": os.getloadavg(),
        "runs": [],
    }
    failed = []
    for gpus in a.gpus:
        for hours in a.hours:
            path, n = _input(a.work, gpus, hours, False)
            row: dict[str, Any] = {"gpus": gpus, "hours": hours, "samples": n, "file_mib": 0.0}
            row["file_mib"] = round(path.stat().st_size / MiB, 1)
            reps, proms, befores = [], [], []
            for _ in range(a.repeat):  # alternating: load from elsewhere falls on all alike
                reps.append(replay(path, a.work, env))
                if a.before:
                    befores.append(replay(path, a.work, env, a.before))
                proms.append(promtool(path, a.work))
            row["replay"], row["promtool"] = _median_run(reps), _median_run(proms)
            if befores:
                row["replay_before"] = _median_run(befores)
            row["bare_insert"] = bare_insert(a.work)
            if not a.no_ingest_only:
                row["ingest_only"] = ingest_only(path, a.work)
            if a.gzip:
                gz, _ = _input(a.work, gpus, hours, True)
                row["replay_gz"] = replay(gz, a.work, env)
                row["gz_file_mib"] = round(gz.stat().st_size / MiB, 1)
            for key in ("replay", "replay_before", "replay_gz"):
                if key in row and row[key]["rows_stored"] != n:
                    failed.append(f"{path.name} {key}: {row[key]['rows_stored']} rows stored, {n} generated")
            if row["promtool"]["samples_written"] != n:
                failed.append(f"{path.name} promtool: {row['promtool']['samples_written']} samples, {n}")
            rw, pw, bw = row["replay"]["wall_s"], row["promtool"]["wall_s"], row["bare_insert"]["wall_s"]
            row["replay_samples_per_s"] = round(n / rw)
            row["promtool_samples_per_s"] = round(n / pw)
            row["bare_insert_rows_per_s"] = round(n / bw)
            row["replay_vs_promtool"] = round(pw / rw, 2)
            if befores:
                row["replay_before_vs_promtool"] = round(pw / row["replay_before"]["wall_s"], 2)
                row["before_vs_after_wall"] = round(row["replay_before"]["wall_s"] / rw, 2)
            row["replay_vs_bare_insert"] = round(bw / rw, 3)
            if "ingest_only" in row:
                row["ingest_only_samples_per_s"] = round(n / row["ingest_only"]["wall_s"])
                row["ingest_only_vs_bare_insert"] = round(bw / row["ingest_only"]["wall_s"], 3)
            res["runs"].append(row)
            print(json.dumps({k: v for k, v in row.items()}, indent=None), flush=True)
    by = {(r["gpus"], r["hours"]): r for r in res["runs"]}
    growth = {}
    for gpus in a.gpus:
        lo, hi = by.get((gpus, min(a.hours))), by.get((gpus, max(a.hours)))
        if lo and hi and lo is not hi:
            growth[f"{gpus}g"] = round(hi["replay"]["peak_rss_mib"] / lo["replay"]["peak_rss_mib"], 2)
    res["rss_growth_longest_vs_shortest"] = growth
    res["load_after"] = os.getloadavg()
    res["row_count_failures"] = failed
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps({"rss_growth": growth, "failures": failed}))
    if failed:
        raise SystemExit("rows stored differ from samples generated: " + "; ".join(failed))


if __name__ == "__main__":
    main()
