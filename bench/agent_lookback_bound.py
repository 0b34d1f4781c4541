"""Upper bound of issue 33's "shorter look-backs when no alert is open" lever: each built-in rule the prefilter
does not skip on the store (trend rules left out: hourly), evaluated over its agent lookback (window + for +
keep_firing_for + 600 s) and over window + for only, on one warm read-only connection limited as the agent's,
median of 5, CPU ms; the sum of each at the rule's cadence, ms a minute.

  python bench/agent_lookback_bound.py /tmp/fleettool-bench-cache/store-XXXX.duckdb
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from fleettool.agent.config import AgentConfig
from fleettool.engine import prefilter
from fleettool.engine.evaluate import evaluate_rule
from fleettool.engine.incremental import cadence, lookback
from fleettool.engine.rules import load_rules
from fleettool.store import Store


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("store", type=Path)
    a = ap.parse_args()
    cfg = AgentConfig(db=a.store, node="bench")
    st = Store(a.store, read_only=True)
    st.limit_resources(cfg.duckdb_memory, cfg.duckdb_threads)
    end = float(st.scalar("SELECT epoch(max(ts)) FROM samples"))
    rules = [r for r in load_rules() if r.kind != "trend"]
    quiet = prefilter.quiet(st, [(r, end - lookback(r), end) for r in rules])
    full = short = 0.0
    rows = []
    for r in rules:
        if r.alert in quiet:
            continue
        cut = float(r.p("window", 0) or 0) + r.for_s
        ms = []
        for span in (lookback(r), cut):
            xs = []
            for _ in range(5):
                c = time.process_time()
                evaluate_rule(st, r, end - span, end)
                xs.append((time.process_time() - c) * 1000)
            ms.append(statistics.median(xs))
        full += ms[0] * 60 / cadence(r)
        short += ms[1] * 60 / cadence(r)
        rows.append(
            {"rule": r.alert, "lookback_s": lookback(r), "cut_s": cut, "ms": [round(x, 1) for x in ms]}
        )
    st.close()
    out = {
        "evaluated": len(rows),
        "ms_per_minute_lookback": round(full, 1),
        "ms_per_minute_cut": round(short, 1),
    }
    print(json.dumps({**out, "rules": rows}, indent=1))


if __name__ == "__main__":
    main()
