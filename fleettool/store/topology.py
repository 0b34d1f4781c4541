"""The node_topology and jobs tables: where each node sits (rack, NVLink domain, IB leaf and spine, zone,
clique, GPU product, a CSV's extra keys) and which Slurm job ran on which nodes when.

A node's key takes the latest file that gives it (its `source` names that file); a job is keyed by its id, and
a later dump of the same job (RUNNING, then COMPLETED) replaces it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleettool.store.values import db_time, epoch

if TYPE_CHECKING:
    from fleettool.store.db import Store


@dataclass(frozen=True, slots=True)
class JobRow:
    job_id: str
    name: str
    nodes: list[str]
    start: float | None
    end: float | None
    state: str
    state_detail: str
    source: str


def put_topology(store: Store, nodes: Mapping[str, Mapping[str, str]], source: str) -> int:
    """Store node -> {key: value}, replacing each (node, key) already stored. The rows written."""
    rows = [(n, k, v) for n, keys in nodes.items() for k, v in keys.items()]
    if not rows:
        return 0
    ns, ks, vs = (list(c) for c in zip(*rows, strict=True))
    store.execute(
        "DELETE FROM node_topology WHERE (node, key) IN (SELECT unnest(?::VARCHAR[]) AS n, unnest(?::VARCHAR[]) AS k)",
        [ns, ks],
    )
    store.execute(
        "INSERT INTO node_topology (node, key, value, source, updated) "
        "SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), ?, ?",
        [ns, ks, vs, source, db_time(time.time())],
    )
    return len(rows)


def put_jobs(store: Store, jobs: list[JobRow]) -> int:
    """Store jobs, replacing one of the same id. The jobs written."""
    for j in jobs:
        store.execute("DELETE FROM jobs WHERE job_id = ?", [j.job_id])
        store.execute(
            "INSERT INTO jobs (job_id, name, nodes, start_time, end_time, state, state_detail, source) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                j.job_id,
                j.name,
                j.nodes,
                None if j.start is None else db_time(j.start),
                None if j.end is None else db_time(j.end),
                j.state,
                j.state_detail or None,
                j.source,
            ],
        )
    return len(jobs)


def node_topology(store: Store) -> dict[str, dict[str, str]]:
    """node -> {key: value}, as stored."""
    out: dict[str, dict[str, str]] = {}
    for r in store.query("SELECT node, key, value FROM node_topology ORDER BY node, key"):
        out.setdefault(r["node"], {})[r["key"]] = r["value"]
    return out


def list_jobs(store: Store) -> list[dict[str, Any]]:
    """Every job, oldest start first, times as unix seconds."""
    rows = store.query(
        "SELECT job_id, name, nodes, start_time, end_time, state, state_detail, source FROM jobs "
        "ORDER BY start_time NULLS LAST, job_id"
    )
    return [{**r, "start_time": epoch(r["start_time"]), "end_time": epoch(r["end_time"])} for r in rows]


def topology_counts(store: Store) -> dict[str, int]:
    """Nodes with any topology, and distinct values of each key ('leaf': 2, 'spine': 1, ...)."""
    out = {"nodes": int(store.scalar("SELECT count(DISTINCT node) FROM node_topology") or 0)}
    for r in store.query(
        "SELECT key, count(DISTINCT value) AS n FROM node_topology WHERE key <> 'spine' GROUP BY key"
    ):
        out[r["key"]] = int(r["n"])
    spines = store.query("SELECT DISTINCT value FROM node_topology WHERE key = 'spine'")
    out["spine"] = len({s for r in spines for s in str(r["value"]).split(",")}) if spines else 0
    return out


def job_counts(store: Store) -> dict[str, int]:
    """source file -> jobs stored from it."""
    rows = store.query("SELECT source, count(*) AS n FROM jobs GROUP BY source ORDER BY source")
    return {r["source"]: int(r["n"]) for r in rows}
