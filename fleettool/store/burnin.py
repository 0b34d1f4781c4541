"""The `burnin_results` table: one row per node, GPU and test of a burn-in run, with its verdict and evidence.

Rows come in as mappings with the keys of a burn-in result (`node`, `gpu`, `uuid`, `test`, `figure`, `unit`,
`floor`, `verdict`, `reason`, `evidence`), so the store needs no burn-in type.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from fleettool.store.values import db_time, dumps_evidence

if TYPE_CHECKING:
    from fleettool.store.db import Store

COLUMNS = (
    "run_id",
    "ts",
    "node",
    "gpu",
    "uuid",
    "test",
    "figure",
    "unit",
    "floor",
    "verdict",
    "reason",
    "evidence",
)
_INSERT = f"INSERT INTO burnin_results ({', '.join(COLUMNS)}) VALUES ({', '.join('?' for _ in COLUMNS)})"


def write_burnin_results(store: Store, run_id: str, ts: float, results: Iterable[Mapping[str, Any]]) -> int:
    """Add one run's results, all stamped `ts` (unix seconds, stored as naive UTC). Returns the row count.
    The caller holds the transaction (a run's results, telemetry and all-reduce table land together)."""
    when = db_time(ts)
    n = 0
    for r in results:
        store.con.execute(
            _INSERT,
            [
                run_id,
                when,
                r["node"],
                r.get("gpu"),
                r.get("uuid"),
                r["test"],
                r.get("figure"),
                r.get("unit", ""),
                r.get("floor"),
                str(r["verdict"]),
                r.get("reason", ""),
                dumps_evidence(r.get("evidence") or {}),
            ],
        )
        n += 1
    return n


def burnin_runs(store: Store, node: str, since: Any | None = None) -> list[dict[str, Any]]:
    """The node's burn-in runs (newest first, after `since`, a naive UTC datetime, when given): run_id, ts
    and the verdicts of its rows."""
    where, params = "node = ?", [node]
    if since is not None:
        where += " AND ts > ?"
        params.append(since)
    return store.query(
        f"SELECT run_id, max(ts) AS ts, list(DISTINCT verdict ORDER BY verdict) AS verdicts FROM burnin_results "
        f"WHERE {where} GROUP BY run_id ORDER BY max(ts) DESC",
        params,
    )
