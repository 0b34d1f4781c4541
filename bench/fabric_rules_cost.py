"""What the port rules cost the agent per evaluation: a day of the fabric collector's 1 s tier (9 ports: state,
rate, link layer; 2.3 M samples) in a DuckDB store, each fabric rule judged over its lookback ending at the
day's end, as the agent's scheduler judges it (engine/incremental.lookback), beside a bare scan of the same
points (SELECT count(*), min(value) of the rule's metric over the same window).

    python bench/fabric_rules_cost.py [--db /tmp/fabric-cost.duckdb] [--repeat 5]

Prints, per rule: its lookback, its cadence, the median time of an evaluation, the bare scan's, their ratio,
and the share of a core at its cadence.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from fleettool.engine.evaluate import evaluate_rule
from fleettool.engine.incremental import cadence, lookback
from fleettool.engine.kinds._sql import ts_param
from fleettool.engine.rules import load_rules
from fleettool.model import Sample
from fleettool.store import Store

T0 = 1_796_000_000.0
PORTS = 9


def fill(store: Store) -> None:
    for h in range(24):
        rows = []
        for i in range(3600):
            t = T0 + h * 3600 + i
            for d in range(PORTS):
                sub = f"port=mlx5_{d}/1"
                rows += [
                    Sample(t, "n", None, None, "ib_port_state", 4.0, sub),
                    Sample(t, "n", None, None, "ib_port_rate_gbps", 400.0, sub),
                    Sample(t, "n", None, None, "ib_port_link_layer", 1.0, sub),
                ]
        store.write_samples(rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", type=Path, default=Path("/tmp/fabric-cost.duckdb"))
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    rules = [
        r
        for r in load_rules()
        if r.source.endswith("fabric.yaml") and r.p("metric") in ("ib_port_state", "ib_port_rate_gbps")
    ]
    end = T0 + 86400 - 1
    with Store(a.db) as store:
        if not store.scalar("SELECT count(*) FROM samples"):
            fill(store)
        print(f"{store.scalar('SELECT count(*) FROM samples')} samples")
        print("rule                  lookback  cadence  eval ms  bare ms  ratio  core %")
        for r in rules:
            lb = lookback(r)
            ev, bare = [], []
            for _ in range(a.repeat):
                t = time.perf_counter()
                evaluate_rule(store, r, end - lb, end)
                ev.append(time.perf_counter() - t)
                t = time.perf_counter()
                store.query(
                    "SELECT count(*), min(value) FROM samples WHERE metric = ? AND ts BETWEEN ? AND ?",
                    [r.p("metric"), ts_param(end - lb), ts_param(end)],
                )
                bare.append(time.perf_counter() - t)
            e, b = statistics.median(ev), statistics.median(bare)
            print(
                f"{r.alert:<21} {lb:>8.0f} {cadence(r):>8.0f} {e * 1e3:>8.1f} {b * 1e3:>8.1f} {e / b:>6.1f}"
                f" {100 * e / cadence(r):>7.3f}"
            )


if __name__ == "__main__":
    main()
