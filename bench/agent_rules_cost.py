"""What the agent's rules cost over a 7-day store, rule by rule, and per minute as the agent runs them.

Input: a store as bench/agent_overhead.py leaves in its cache (bench/agent_store7d.py: 7 days of one node's
raw samples). A copy is made (the rules write alerts). In this process, with DuckDB limited as the agent limits
it (AgentConfig.duckdb_memory, duckdb_threads):
1. each built-in rule evaluated once over its agent lookback ending at the store's newest sample (the second
   of two runs: the first warms the file's pages), CPU ms (process time) and its cadence, and the sum of
   cost x (60 / cadence) as ms of CPU a minute;
2. the agent's scheduler run as the agent runs it after each flush: all rules at start-up, then --minutes
   minute steps, CPU per step and the average, with the threshold prefilter (engine/prefilter.py) on and off;
   the alerts written must be the same both ways (the run fails otherwise).

  python bench/agent_rules_cost.py /tmp/fleettool-bench-cache/store-XXXX.duckdb --json out.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

# fleettool as installed (a source tree is not importable as such: collectors/ is fleettool.collectors)
from fleettool.agent.config import AgentConfig
from fleettool.engine.evaluate import evaluate_rule
from fleettool.engine.incremental import RuleScheduler, cadence, lookback
from fleettool.engine.rules import load_rules
from fleettool.pipeline import Pipeline
from fleettool.store import Store


def _open(db: Path) -> Store:
    cfg = AgentConfig(db=db, node="bench")
    st = Store(db, wait_s=5, migrate=False)
    st.limit_resources(cfg.duckdb_memory, cfg.duckdb_threads)
    return st


def per_rule(db: Path) -> dict[str, object]:
    st = _open(db)
    try:
        end = float(st.scalar("SELECT epoch(max(ts)) FROM samples"))
        rows = []
        for r in load_rules():
            for _ in range(2):
                c = time.process_time()
                evaluate_rule(st, r, end - lookback(r), end)
                ms = (time.process_time() - c) * 1000
            rows.append({"rule": r.alert, "kind": r.kind, "cpu_ms": round(ms, 2), "cadence_s": cadence(r)})
    finally:
        st.close()
    per_min = sum(float(x["cpu_ms"]) * 60 / float(x["cadence_s"]) for x in rows)  # type: ignore[arg-type,misc]
    rows.sort(key=lambda x: -float(x["cpu_ms"]))  # type: ignore[arg-type]
    return {"rules": rows, "cpu_ms_per_minute_at_cadence": round(per_min, 1)}


def scheduled(db: Path, minutes: int, prefilter: bool, reopen: bool = False) -> dict[str, object]:
    """`reopen`: each minute's step opens the file afresh and closes it after, as the agent's flush does (a
    cold DuckDB buffer pool each minute); the open and close are timed in the step."""
    st = _open(db)
    try:
        end = float(st.scalar("SELECT epoch(max(ts)) FROM samples"))
        sched = RuleScheduler(load_rules(), prefilter=prefilter)
        pipe = Pipeline(st, scheduler=sched)
        c = time.process_time()
        pipe.evaluate_due(end)
        startup = (time.process_time() - c) * 1000
        steps = []
        for m in range(1, minutes + 1):
            c = time.process_time()
            if reopen:
                st.close()
                st = _open(db)
                pipe = Pipeline(st, scheduler=sched)
            pipe.evaluate_due(end + 60 * m)
            pipe.firing_alerts("bench")
            if reopen:
                st.execute("CHECKPOINT")
            steps.append(round((time.process_time() - c) * 1000, 1))
        alerts = st.rows("SELECT rule, node, gpu, state, epoch(first_seen) FROM alerts ORDER BY ALL")
    finally:
        st.close()
    return {
        "prefilter": prefilter,
        "reopen": reopen,
        "startup_ms": round(startup, 1),
        "minute_ms": steps,
        "avg_ms_per_minute": round(sum(steps) / len(steps), 1),
        "skipped": sched.skipped,
        "alerts": [list(a) for a in alerts],
    }


def _key(r: dict[str, object]) -> str:
    return str(r["prefilter"]) + (" reopen" if r.get("reopen") else "")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("store", type=Path)
    ap.add_argument("--minutes", type=int, default=10)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--reopen", action="store_true", help="also run each minute on a freshly opened file")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rules-cost-"))
    try:
        out: dict[str, object] = {"store": str(a.store), "bytes": a.store.stat().st_size}
        db = work / "r.duckdb"
        shutil.copy(a.store, db)
        out["per_rule"] = per_rule(db)
        runs = []
        for on in (True, False):
            shutil.copy(a.store, db)
            runs.append(scheduled(db, a.minutes, on))
        if a.reopen:  # as the agent runs them: the file opened for each flush
            for on in (True, False):
                shutil.copy(a.store, db)
                runs.append(scheduled(db, a.minutes, on, reopen=True))
        out["scheduled"] = runs
        same = all(r["alerts"] == runs[0]["alerts"] for r in runs)
        out["same_alerts"] = same
        summary = {
            "cpu_ms_per_minute_at_cadence": out["per_rule"]["cpu_ms_per_minute_at_cadence"],  # type: ignore[index]
            "scheduled_avg_ms_per_minute": {_key(r): r["avg_ms_per_minute"] for r in runs},
            "startup_ms": {_key(r): r["startup_ms"] for r in runs},
            "same_alerts": same,
        }
        print(json.dumps(summary))
        if a.json:
            a.json.write_text(json.dumps(out, indent=1))
        if not same:
            raise SystemExit("the prefilter changed the alerts")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
