"""Rule kinds not covered by the built-in rule set: the SQL escape hatch and fleet-scope peers; baselines."""

from __future__ import annotations

from fleettool.engine.baselines import compute, lookup, save
from fleettool.engine.evaluate import evaluate, evaluate_rule
from fleettool.engine.rules import parse_rules
from fleettool.model import GpuInfo, Sample
from fleettool.store import Store

T0 = 1_800_000_000.0


def _loaded_fleet(st: Store, slow: tuple[str, int] | None = None) -> None:
    rows = []
    for n in range(3):
        node = f"n{n}"
        st.upsert_gpus([GpuInfo(node, g, f"GPU-{n}-{g}", None, "NVIDIA H200", "580.1") for g in range(2)], T0)
        for g in range(2):
            for i in range(30):
                clk = 900.0 if slow == (node, g) else 1800.0 + g
                rows += [
                    Sample(T0 + 60 * i, node, g, None, "sm_clock_mhz", clk),
                    Sample(T0 + 60 * i, node, g, None, "gpu_util_pct", 99.0),
                ]
    st.write_samples(rows)


def test_sql_escape_hatch() -> None:
    (rule,) = parse_rules(
        """groups: [{name: custom, rules: [{alert: HotAndBusy, kind: sql, severity: warning, category: thermal,
            action: none, for: 5m, summary: "hot and busy",
            query: "SELECT a.node, a.gpu, a.ts, a.value > 80 AND b.value > 90 AS active, a.value
                    FROM samples a JOIN samples b ON a.node = b.node AND a.gpu = b.gpu AND a.ts = b.ts
                    WHERE a.metric = 'gpu_temp_c' AND b.metric = 'gpu_util_pct' AND a.ts BETWEEN $start AND $end"}]}]""",
        "custom.yaml",
    )
    with Store() as st:
        st.write_samples(
            [Sample(T0 + 60 * i, "n", 0, None, "gpu_temp_c", 85.0) for i in range(10)]
            + [Sample(T0 + 60 * i, "n", 0, None, "gpu_util_pct", 99.0) for i in range(10)]
            + [Sample(T0 + 60 * i, "n", 1, None, "gpu_temp_c", 85.0) for i in range(10)]
            + [Sample(T0 + 60 * i, "n", 1, None, "gpu_util_pct", 10.0) for i in range(10)]
        )
        got = evaluate_rule(st, rule, T0, T0 + 540)
    assert [(f.node, f.gpu, f.state) for f in got] == [("n", 0, "firing")]


def test_peer_against_the_fleet_of_the_same_sku() -> None:
    (rule,) = parse_rules(
        """groups: [{name: custom, rules: [{alert: SlowVsFleet, kind: peer, scope: fleet, metric: sm_clock_mhz,
            below_fraction: 0.3, window: 1m, min_peers: 4, when_metric: gpu_util_pct, when_min: 80, for: 5m,
            severity: warning, category: straggler, action: inspect-hardware, summary: s}]}]""",
        "custom.yaml",
    )
    with Store() as st:
        _loaded_fleet(st, slow=("n1", 1))
        got = evaluate_rule(st, rule, T0, T0 + 29 * 60)
        assert [(f.node, f.gpu) for f in got] == [("n1", 1)]
    with Store() as st:
        _loaded_fleet(st)
        assert evaluate_rule(st, rule, T0, T0 + 29 * 60) == []


def test_baselines_median_and_mad_per_sku_and_driver() -> None:
    with Store() as st:
        _loaded_fleet(st, slow=("n1", 1))
        bs = compute(st)
        save(st, bs, T0)
        b = lookup(st, "NVIDIA H200", "580.1", "sm_clock_mhz")
        assert b is not None and b.n == 6
        assert b.median == 1800.0 and b.mad == 0.5  # the slow GPU (900 MHz) does not drag the median
        assert b.floor() < 1800 and lookup(st, "NVIDIA H100", None, "sm_clock_mhz") is None


def test_evaluate_on_an_empty_store() -> None:
    with Store() as st:
        assert evaluate(st, []) == []
