"""What NvlinkLinksFewer costs on a node that has NVLinks, before (its query read every raw row of the 7 days
before its window) and after (whole hours from the store's hourly peaks, peak_1h: store/peaks.py), in one run.

The store: bench/agent_store7d.py's 7-day 8-GPU store, with the NVLink read the NVML collector makes on an SXM
node (collectors/nvml_fabric_samples.py: the `nvlink` read in Tier.DEAR, every 60 s): per GPU nvlink_link_up for
18 links and nvlink_links_active = 18. The template is the given --template-db (a short agent run), or the first
66 s of an existing 7-day store (--from-store, e.g. bench/agent_overhead.py's cache); the generated store is
cached beside it. Then, DuckDB limited as the agent limits it, the same store and the same process:
1. one evaluation of the rule over its agent lookback ending at the newest sample, before and after: CPU ms
   (process time) and wall ms, median of --repeat after a warm-up; on a warm connection and on a file opened
   afresh (the flush's way); x 60 / cadence = ms a minute as scheduled; samples row groups read (EXPLAIN ANALYZE);
2. the agent's scheduler with every built-in rule, the rule's query before or after: start-up pass, then
   --minutes minute steps, CPU ms a minute; the alerts must be the same (the run fails otherwise);
3. what keeping the peaks costs a flush: write_samples of one minute of the node's rows, with and without the
   hour's peak refresh (the refresh alone timed too).

  python bench/nvlink_rule_cost.py --from-store /tmp/fleettool-bench-cache/store-XXXX.duckdb --json out.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from agent_store7d import cache_key, generate, read_template, save_info  # noqa: E402

from fleettool.agent.config import AgentConfig  # noqa: E402
from fleettool.engine.evaluate import evaluate_rule  # noqa: E402
from fleettool.engine.incremental import RuleScheduler, cadence, lookback  # noqa: E402
from fleettool.engine.kinds._sql import ts_param  # noqa: E402
from fleettool.engine.rules import Rule, load_rules  # noqa: E402
from fleettool.model import Sample  # noqa: E402
from fleettool.pipeline import Pipeline  # noqa: E402
from fleettool.store import Store  # noqa: E402

RULE = "NvlinkLinksFewer"
# the rule's query before peak_1h (rules/nvlink.yaml at e88080b)
BEFORE = """SELECT node, gpu, ts, coalesce(value < prior, false) AS active, value FROM (
  SELECT node, gpu, ts, value, max(value) OVER (PARTITION BY node, gpu ORDER BY ts
         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prior
  FROM (SELECT node, gpu, ts, value FROM samples WHERE metric = 'nvlink_links_active'
          AND ts BETWEEN $start - INTERVAL 7 DAY AND $end
        UNION ALL SELECT node, gpu, minute AS ts, vmax AS value FROM samples_1m
          WHERE metric = 'nvlink_links_active' AND minute BETWEEN $start - INTERVAL 7 DAY AND $end))
WHERE ts >= $start"""


def rule_sets() -> dict[str, list[Rule]]:
    after = load_rules()
    before = [
        dataclasses.replace(r, params={**r.params, "query": BEFORE}) if r.alert == RULE else r for r in after
    ]
    return {"before": before, "after": after}


def template_from_store(store: Path, work: Path) -> dict[str, Any]:
    """A template (agent_store7d.read_template) from the first 66 s of a 7-day store, which starts on a
    10-minute boundary (agent_store7d cuts at whole minutes of its end): each tier's period is seen again."""
    tpl = work / "template.duckdb"
    Store(tpl).close()
    con = duckdb.connect(str(tpl))
    try:
        con.execute(f"ATTACH '{store}' AS src (READ_ONLY)")
        t0 = con.execute("SELECT min(ts) FROM src.samples").fetchone()[0]  # type: ignore[index]
        con.execute(
            "INSERT INTO samples SELECT * FROM src.samples WHERE ts < ?::TIMESTAMP + INTERVAL 66 SECOND "
            "ORDER BY ts",
            [t0],
        )
        con.execute("INSERT INTO gpus SELECT * FROM src.gpus")
        con.execute("DETACH src")
    finally:
        con.close()
    return read_template(tpl)


def with_nvlink(tpl: dict[str, Any], links: int) -> dict[str, Any]:
    """The template plus the NVML collector's `nvlink` read of every GPU, every 60 s (Tier.DEAR)."""
    extra = []
    for node, gpu, uuid, *_ in tpl["gpus"]:
        base = {"node": node, "gpu": gpu, "uuid": uuid, "period": 60.0, "counter": False, "slope": 0.0}
        extra += [
            {**base, "metric": "nvlink_link_up", "sub": f"link={k}", "values": [1.0]} for k in range(links)
        ]
        extra.append({**base, "metric": "nvlink_links_active", "sub": "", "values": [float(links)]})
    return {**tpl, "streams": [*tpl["streams"], *extra]}


def build(
    tpl: dict[str, Any], cache_dir: Path, days: float, links: int, max_age_s: float
) -> tuple[Path, dict]:
    params = {"nvlink_rule_cost": 1, "days": days, "links": links, "streams": len(tpl["streams"])}
    key = cache_key(params)
    store, info_p = cache_dir / f"nvlink-{key}.duckdb", cache_dir / f"nvlink-{key}.json"
    if store.exists() and info_p.exists():
        info = json.loads(info_p.read_text())
        if time.time() - float(info["generated"]["end"]) <= max_age_s:
            return store, {**info, "cache_hit": True}
    cache_dir.mkdir(parents=True, exist_ok=True)
    gen = generate(tpl, store, days=days, rollup_days=0.0, end=time.time())
    info = {"params": params, "generated": gen, "cache_hit": False}
    save_info(info_p, info)
    return store, info


def _open(db: Path) -> Store:
    cfg = AgentConfig(db=db, node="bench")
    st = Store(db, wait_s=5, migrate=False)
    st.limit_resources(cfg.duckdb_memory, cfg.duckdb_threads)
    return st


def row_groups(st: Store, rule: Rule, start: float, end: float) -> list[int]:
    plan = "".join(
        str(r[1])
        for r in st.rows(
            "EXPLAIN ANALYZE " + str(rule.p("query")), {"start": ts_param(start), "end": ts_param(end)}
        )
    )
    got = [(int(a), int(b)) for a, b in re.findall(r"Row Groups Scanned: (\d+) / (\d+)", plan)]
    return [sum(a for a, _ in got), max((b for _, b in got), default=0)]


def one_rule(db: Path, rules: dict[str, list[Rule]], repeat: int) -> dict[str, Any]:
    """Step 1, before and after interleaved run by run (the box's drift hits both alike)."""
    pick = {k: next(r for r in v if r.alert == RULE) for k, v in rules.items()}
    out: dict[str, Any] = {}
    st = _open(db)
    try:
        end = float(st.scalar("SELECT epoch(max(ts)) FROM samples"))
        start = end - lookback(pick["after"])
        res = {k: evaluate_rule(st, r, start, end) for k, r in pick.items()}
        assert [f.summary for f in res["before"]] == [f.summary for f in res["after"]]
        for k, r in pick.items():
            out[k] = {"row_groups_read_of": row_groups(st, r, start, end), "findings": len(res[k])}
        for way in ("warm", "reopen"):
            cpu: dict[str, list[float]] = {k: [] for k in pick}
            wall: dict[str, list[float]] = {k: [] for k in pick}
            for _ in range(repeat + 1):
                for k, r in pick.items():
                    if way == "reopen":
                        st.close()
                    c, w = time.process_time(), time.perf_counter()
                    if way == "reopen":
                        st = _open(db)
                    evaluate_rule(st, r, start, end)
                    cpu[k].append((time.process_time() - c) * 1000)
                    wall[k].append((time.perf_counter() - w) * 1000)
            for k, r in pick.items():
                ms = statistics.median(cpu[k][1:])
                out[k][way] = {
                    "cpu_ms": round(ms, 2),
                    "wall_ms": round(statistics.median(wall[k][1:]), 2),
                    "cpu_ms_per_minute_at_cadence": round(ms * 60 / cadence(r), 2),
                }
    finally:
        st.close()
    return out


def scheduled(db: Path, rules: list[Rule], minutes: int) -> dict[str, Any]:
    st = _open(db)
    try:
        end = float(st.scalar("SELECT epoch(max(ts)) FROM samples"))
        sched = RuleScheduler(rules)
        pipe = Pipeline(st, scheduler=sched)
        c = time.process_time()
        pipe.evaluate_due(end)
        startup = (time.process_time() - c) * 1000
        steps = []
        for m in range(1, minutes + 1):
            c = time.process_time()
            pipe.evaluate_due(end + 60 * m)
            pipe.firing_alerts("bench")
            steps.append(round((time.process_time() - c) * 1000, 1))
        alerts = st.rows("SELECT rule, node, gpu, state, epoch(first_seen) FROM alerts ORDER BY ALL")
    finally:
        st.close()
    return {
        "startup_ms": round(startup, 1),
        "minute_ms": steps,
        "avg_ms_per_minute": round(sum(steps) / len(steps), 1),
        "skipped": sched.skipped,
        "alerts": [list(a) for a in alerts],
    }


def flush_cost(db: Path, repeat: int) -> dict[str, Any]:
    """Step 3: one minute of the node's rows written as the agent's flush writes them, with the peak refresh
    (the rows hold nvlink_links_active) and without (the same rows less those 8); and the refresh alone."""
    st = _open(db)
    try:
        end = float(st.scalar("SELECT epoch(max(ts)) FROM samples"))
        last = st.rows(
            "SELECT node, gpu, uuid, metric, sub, value FROM samples WHERE ts > ?::TIMESTAMP - INTERVAL 60 SECOND",
            [ts_param(end)],
        )
        out: dict[str, list[float]] = {"with_nvlink_rows": [], "without": [], "refresh_alone": []}
        for i in range(repeat + 1):
            t = end + 60 * (i + 1)
            rows = [Sample(t, n, g, u, m, v, s) for n, g, u, m, s, v in last]
            for k, batch in (
                ("with_nvlink_rows", rows),
                ("without", [s for s in rows if s.metric != "nvlink_links_active"]),
            ):
                st.begin()
                c = time.process_time()
                st.write_samples(batch)
                out[k].append((time.process_time() - c) * 1000)
                st.rollback()
            c = time.process_time()
            st.refresh_peaks(ts_param(t), ts_param(t))
            out["refresh_alone"].append((time.process_time() - c) * 1000)
    finally:
        st.close()
    return {"rows": len(last), **{k: round(statistics.median(v[1:]), 2) for k, v in out.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--template-db", type=Path, help="store of a short real agent run (agent_store7d.py)")
    src.add_argument(
        "--from-store", type=Path, help="a 7-day store (agent_store7d.py) to take the template from"
    )
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--links", type=int, default=18)
    ap.add_argument("--cache-dir", type=Path, default=Path("/tmp/fleettool-bench-cache"))
    ap.add_argument("--max-age-h", type=float, default=24.0)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--minutes", type=int, default=10)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="nvlink-cost-"))
    try:
        tpl = read_template(a.template_db) if a.template_db else template_from_store(a.from_store, work)
        store, info = build(with_nvlink(tpl, a.links), a.cache_dir, a.days, a.links, a.max_age_h * 3600)
        with Store(store, read_only=True) as st:
            info["rows"] = {
                "samples": int(st.scalar("SELECT count(*) FROM samples")),
                "nvlink_links_active": int(
                    st.scalar("SELECT count(*) FROM samples WHERE metric = 'nvlink_links_active'")
                ),
                "peak_1h": int(st.scalar("SELECT count(*) FROM peak_1h")),
            }
        rules = rule_sets()
        db = work / "r.duckdb"
        shutil.copy(store, db)
        out: dict[str, Any] = {"store": str(store), "info": info, "one_rule": one_rule(db, rules, a.repeat)}
        runs = {}
        for k in ("before", "after", "before ", "after "):  # twice, interleaved
            shutil.copy(store, db)
            runs[k] = scheduled(db, rules[k.strip()], a.minutes)
        out["scheduled"] = runs
        same = all(r["alerts"] == runs["after"]["alerts"] for r in runs.values())
        out["same_alerts"] = same
        shutil.copy(store, db)
        out["flush"] = flush_cost(db, a.repeat)
        o = out["one_rule"]
        summary = {
            "rows": info["rows"],
            "rule_row_groups_read": {k: o[k]["row_groups_read_of"] for k in ("before", "after")},
            "rule_cpu_ms_per_minute": {
                k: (
                    o[k]["warm"]["cpu_ms_per_minute_at_cadence"],
                    o[k]["reopen"]["cpu_ms_per_minute_at_cadence"],
                )
                for k in ("before", "after")
            },
            "rule_wall_ms": {
                k: (o[k]["warm"]["wall_ms"], o[k]["reopen"]["wall_ms"]) for k in ("before", "after")
            },
            "all_rules_ms_per_minute": {k: v["avg_ms_per_minute"] for k, v in runs.items()},
            "startup_ms": {k: v["startup_ms"] for k, v in runs.items()},
            "flush": out["flush"],
            "same_alerts": same,
        }
        print(json.dumps(summary))
        if a.json:
            a.json.write_text(json.dumps(out, indent=1))
        if not same:
            raise SystemExit("the rule's two queries gave different alerts")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
