"""The node_topology and jobs tables: where each node sits (rack, NVLink domain, IB leaf and spine, zone,
clique, GPU product, a CSV's extra keys) and which Slurm job ran on which nodes when.

A node's key takes the latest file that gives it (its `source` names that file); a job is keyed by its id, and
a later dump of the same job (RUNNING, then COMPLETED) replaces it.
"""

from __future__ import annotations

import re
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


# Pods -> workloads. dcgm-exporter labels each GPU's series with the pod using it (gpu_pods); the pods of one
# multi-node workload are named by its controller, and the workload is the pod name with the controller's
# suffix removed. The rules, tried in this order (K8S_RAND: the alphabet of Kubernetes' generated suffixes,
# consonants and digits without vowels or 0/1/3, k8s.io/apimachinery/pkg/util/rand):
#   jobset       <jobset>-<replicatedJob>-<jobIndex>-<podIndex>-<5>   network-jobset-leader-0-0-2qphg
#                (the replicatedJob name taken as one word: a dashed one keeps its first words in the group)
#   kubeflow     <job>-<launcher|master|worker|chief|ps|evaluator>[-<n>][-<5>]
#                tensorflow-benchmarks-job1-launcher-k9r6m, ...-worker-0 (MPIJob), pytorchjob-example-82cjcqdz-master-0
#   indexed job  <job>-<index>-<5>
#   deployment   <name>-<pod-template-hash, 6-10>-<5>                 tts-predictor-00011-deployment-5554f75554-8j8pl
#   statefulset  <name>-<ordinal>                                     web-0
#   job/daemon   <name>-<5>                                           kindnet-7q2qb
# A name no rule takes is its own workload. Not told apart: LeaderWorkerSet groups (<lws>-<g>, <lws>-<g>-<w>:
# a leader groups with the set, its workers with their group), static pods (<name>-<node name>).
K8S_RAND = "[bcdfghjklmnpqrstvwxz2456789]"
POD_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("jobset", re.compile(rf"^(?P<w>.+)-[a-z0-9]+-\d+-\d+-{K8S_RAND}{{5}}$")),
    (
        "kubeflow",
        re.compile(
            rf"^(?P<w>.+)-(?:launcher|master|worker|chief|ps|evaluator)(?:-\d+)?(?:-{K8S_RAND}{{5}})?$"
        ),
    ),
    ("indexed-job", re.compile(rf"^(?P<w>.+)-\d+-{K8S_RAND}{{5}}$")),
    ("deployment", re.compile(rf"^(?P<w>.+)-{K8S_RAND}{{6,10}}-{K8S_RAND}{{5}}$")),
    ("statefulset", re.compile(r"^(?P<w>.+)-\d+$")),
    ("job", re.compile(rf"^(?P<w>.+)-{K8S_RAND}{{5}}$")),
)
POD_SOURCE = "dcgm-exporter pod labels"


def pod_workload(pod: str) -> str:
    """The workload a pod belongs to: its name with the controller's ordinal or hash removed (POD_RULES)."""
    for _, rule in POD_RULES:
        if m := rule.match(pod):
            return m.group("w")
    return pod


def pod_jobs(store: Store) -> list[JobRow]:
    """Each (namespace, workload) that held a GPU, as a job: `job_id` 'namespace/workload', its nodes where its
    pods ran, start and end when a pod of it was first and last seen on a GPU; state '' (dcgm-exporter does not
    say how it ended), state_detail 'N pods'. Oldest first."""
    rows = store.query(
        "SELECT namespace, pod, node, min(first_seen) AS t0, max(last_seen) AS t1 FROM gpu_pods "
        "WHERE coalesce(pod, '') <> '' GROUP BY ALL"
    )
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        ns = r["namespace"] or ""
        g = groups.setdefault(
            (ns, pod_workload(r["pod"])), {"nodes": set(), "pods": set(), "t0": None, "t1": None}
        )
        g["nodes"].add(r["node"])
        g["pods"].add(r["pod"])
        t0, t1 = epoch(r["t0"]), epoch(r["t1"])
        g["t0"] = t0 if g["t0"] is None or (t0 is not None and t0 < g["t0"]) else g["t0"]
        g["t1"] = t1 if g["t1"] is None or (t1 is not None and t1 > g["t1"]) else g["t1"]
    out = [
        JobRow(
            f"{ns}/{w}" if ns else w,
            w,
            sorted(g["nodes"]),
            g["t0"],
            g["t1"],
            "",
            f"{len(g['pods'])} pod{'s' if len(g['pods']) != 1 else ''}",
            POD_SOURCE,
        )
        for (ns, w), g in groups.items()
    ]
    return sorted(out, key=lambda j: (j.start is None, j.start or 0.0, j.job_id))


def job_rows(store: Store) -> list[JobRow]:
    """Every job the store knows, as JobRows: Slurm's (the jobs table) and the pods' workloads (pod_jobs)."""
    slurm = [
        JobRow(
            j["job_id"],
            j["name"] or "",
            list(j["nodes"] or []),
            j["start_time"],
            j["end_time"],
            j["state"] or "",
            j["state_detail"] or "",
            j["source"] or "",
        )
        for j in list_jobs(store)
    ]
    return slurm + pod_jobs(store)
