"""The baselines table (median and MAD of a figure per SKU and driver), and the reads that feed it: per-GPU
means under load, NCCL busbw at the largest size, the figures of passed burn-in tests. What the figures are and
how they are combined is fleettool.engine.baselines."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleettool.store.values import db_time

if TYPE_CHECKING:
    from fleettool.store.db import Store


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


def loaded_gpu_means(store: Store, metric: str, load_min: float) -> list[tuple[str, str, float]]:
    """(model, driver, mean) per GPU of `metric` over the minutes its utilisation was >= load_min ('?' for a
    model or driver the inventory does not know)."""
    rows = store.query(
        """WITH v AS (SELECT node, gpu, time_bucket(INTERVAL 1 MINUTE, ts) AS m, avg(value) AS v
                      FROM samples WHERE metric = ? AND gpu IS NOT NULL GROUP BY ALL),
                u AS (SELECT node, gpu, time_bucket(INTERVAL 1 MINUTE, ts) AS m, avg(value) AS u
                      FROM samples WHERE metric = 'gpu_util_pct' GROUP BY ALL),
                inv AS (SELECT node, gpu, any_value(model) AS model, any_value(driver) AS driver FROM gpus
                        WHERE gpu IS NOT NULL GROUP BY ALL)
           SELECT coalesce(inv.model, '?') AS model, coalesce(inv.driver, '?') AS driver, avg(v.v) AS mean
           FROM v JOIN u USING (node, gpu, m) LEFT JOIN inv USING (node, gpu)
           WHERE u.u >= ? GROUP BY v.node, v.gpu, inv.model, inv.driver""",
        [metric, load_min],
    )
    return [(r["model"], r["driver"], float(r["mean"])) for r in rows]


def nccl_largest_busbw(store: Store) -> list[tuple[str, str, str, int, float | None]]:
    """(model, driver, op, ranks, busbw) per NCCL run: the best busbw at its largest message size (the SKU of
    the run's own device list, else of its first node in the inventory)."""
    rows = store.query(
        """SELECT coalesce(r.model, g.model, '?') AS model, coalesce(g.driver, '?') AS driver, r.op, r.ranks,
                  (SELECT max(greatest(coalesce(x.ip_busbw_gbps, 0), coalesce(x.oop_busbw_gbps, 0)))
                     FROM nccl_rows x WHERE x.run_id = r.run_id
                       AND x.size_bytes = (SELECT max(size_bytes) FROM nccl_rows y WHERE y.run_id = r.run_id))
                  AS bw
           FROM nccl_runs r LEFT JOIN (SELECT node, any_value(model) AS model, any_value(driver) AS driver
                                       FROM gpus GROUP BY node) g ON g.node = r.nodes[1]"""
    )
    return [(r["model"], r["driver"], r["op"], r["ranks"], r["bw"]) for r in rows]


def passed_burnin_figures(store: Store) -> list[tuple[str, str, str, float]]:
    """(model, driver, test, figure) of every PASSed burn-in result with a figure, of a GPU the inventory
    knows the model of: a result with no GPU (a CPU burn-in) or of an unknown model never makes a baseline of
    model '?', which every SKU would be compared with."""
    rows = store.query(
        """SELECT g.model AS model, coalesce(g.driver, '?') AS driver, b.test, b.figure
           FROM burnin_results b JOIN gpus g ON g.node = b.node AND g.gpu = b.gpu
           WHERE b.verdict = 'PASS' AND b.figure IS NOT NULL AND g.model IS NOT NULL"""
    )
    return [(r["model"], r["driver"], r["test"], float(r["figure"])) for r in rows]


def save(store: Store, baselines: list[Baseline], now: float) -> None:
    """Replace every stored baseline with these, updated at `now`."""
    t = db_time(now)
    store.execute("DELETE FROM baselines")
    for b in baselines:
        store.execute(
            "INSERT INTO baselines (model, driver, metric, key, median, mad, n, updated) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
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


def list_baselines(store: Store) -> list[dict[str, Any]]:
    """Every stored baseline (model, driver, metric, key, median, mad, n), in a stable order."""
    return store.query("SELECT model, driver, metric, key, median, mad, n FROM baselines ORDER BY ALL")
