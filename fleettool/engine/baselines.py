"""Fleet baselines per (SKU, driver): the median and a robust spread (MAD) of what healthy GPUs of the same
model and driver do, from the store. Peer rules compare against them; burn-in floors start from them.

Figures:
- telemetry under load (utilisation >= 80 %): per-GPU mean SM clock, tensor activity, power, temperature;
- NCCL: busbw at the largest size of runs with the same op and rank count (key "op/ranks");
- burn-in: the figure of PASSed results per test (key = test name).
Each GPU (or run) counts once, so a chatty node does not outvote a quiet one.
"""

from __future__ import annotations

import datetime as dt
import statistics
from dataclasses import dataclass
from typing import Any

from fleettool.store import Store

LOADED_METRICS = ("sm_clock_mhz", "tensor_active_ratio", "power_w", "gpu_temp_c")


@dataclass(frozen=True)
class Baseline:
    model: str
    driver: str
    metric: str
    key: str
    median: float
    mad: float
    n: int

    def floor(self, k: float = 3.0) -> float:
        """median - k x 1.4826 x MAD (a robust 'k sigma' below the median)."""
        return self.median - k * 1.4826 * self.mad


def _robust(values: list[float]) -> tuple[float, float]:
    med = statistics.median(values)
    return med, statistics.median(abs(v - med) for v in values)


def compute(store: Store, *, load_min: float = 80.0) -> list[Baseline]:
    out: list[Baseline] = []
    groups: dict[tuple[str, str, str, str], list[float]] = {}
    for metric in LOADED_METRICS:
        rows = store.con.execute(
            """WITH v AS (SELECT node, gpu, time_bucket(INTERVAL 1 MINUTE, ts) AS m, avg(value) AS v
                          FROM samples WHERE metric = ? AND gpu IS NOT NULL GROUP BY ALL),
                    u AS (SELECT node, gpu, time_bucket(INTERVAL 1 MINUTE, ts) AS m, avg(value) AS u
                          FROM samples WHERE metric = 'gpu_util_pct' GROUP BY ALL),
                    inv AS (SELECT node, gpu, any_value(model) AS model, any_value(driver) AS driver FROM gpus
                            WHERE gpu IS NOT NULL GROUP BY ALL)
               SELECT coalesce(inv.model, '?'), coalesce(inv.driver, '?'), avg(v.v)
               FROM v JOIN u USING (node, gpu, m) LEFT JOIN inv USING (node, gpu)
               WHERE u.u >= ? GROUP BY v.node, v.gpu, inv.model, inv.driver""",
            [metric, load_min],
        ).fetchall()
        for model, driver, mean in rows:
            groups.setdefault((model, driver, metric, ""), []).append(float(mean))
    for model, driver, op, ranks, bw in store.con.execute(
        """SELECT coalesce(g.model, '?'), coalesce(g.driver, '?'), r.op, r.ranks,
                  (SELECT max(greatest(coalesce(x.ip_busbw_gbps, 0), coalesce(x.oop_busbw_gbps, 0)))
                     FROM nccl_rows x WHERE x.run_id = r.run_id
                       AND x.size_bytes = (SELECT max(size_bytes) FROM nccl_rows y WHERE y.run_id = r.run_id))
           FROM nccl_runs r LEFT JOIN (SELECT node, any_value(model) AS model, any_value(driver) AS driver
                                       FROM gpus GROUP BY node) g ON g.node = r.nodes[1]"""
    ).fetchall():
        if bw:
            groups.setdefault((model, driver, "nccl_busbw_gbps", f"{op}/{ranks}"), []).append(float(bw))
    for model, driver, test, fig in store.con.execute(
        """SELECT coalesce(g.model, '?'), coalesce(g.driver, '?'), b.test, b.figure FROM burnin_results b
           LEFT JOIN gpus g ON g.node = b.node AND g.gpu = b.gpu
           WHERE b.verdict = 'PASS' AND b.figure IS NOT NULL"""
    ).fetchall():
        groups.setdefault((model, driver, "burnin", test), []).append(float(fig))
    for (model, driver, metric, key), vals in sorted(groups.items()):
        med, mad = _robust(vals)
        out.append(Baseline(model, driver, metric, key, med, mad, len(vals)))
    return out


def save(store: Store, baselines: list[Baseline], now: float) -> None:
    t = dt.datetime.fromtimestamp(now, tz=dt.timezone.utc).replace(tzinfo=None)
    store.con.execute("DELETE FROM baselines")
    for b in baselines:
        store.con.execute(
            "INSERT INTO baselines VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [b.model, b.driver, b.metric, b.key, b.median, b.mad, b.n, t],
        )


def lookup(store: Store, model: str, driver: str | None, metric: str, key: str = "") -> Baseline | None:
    """The stored baseline for this SKU (and driver when given; else any driver of the SKU with the most GPUs)."""
    params: list[Any] = [model, metric, key]
    sql = "SELECT model, driver, metric, key, median, mad, n FROM baselines WHERE model = ? AND metric = ? AND key = ?"
    if driver:
        sql += " AND driver = ?"
        params.append(driver)
    sql += " ORDER BY n DESC LIMIT 1"
    rows = store.query(sql, params)
    if not rows:
        return None
    r = rows[0]
    return Baseline(r["model"], r["driver"], r["metric"], r["key"], r["median"], r["mad"], r["n"])
