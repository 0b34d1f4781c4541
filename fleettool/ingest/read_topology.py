"""Read topology and job files into the store: Slurm topology.conf (tree and block), `sacct --parsable2`,
`kubectl get nodes -o json` and a topology CSV, each through its pure parser in fleettool.formats. A bad line is a
`file:line` issue (skipped; --strict fails the file); what the file says of each node goes in node_topology,
its jobs in jobs, with the file as their source. Also what replay says of them all (`summary_lines`).
"""

from __future__ import annotations

from pathlib import Path

from fleettool.formats.kube_nodes import parse_kube_nodes
from fleettool.formats.sacct import parse_sacct
from fleettool.formats.slurm_topology import parse_topology_conf
from fleettool.formats.topology_csv import parse_topology_csv
from fleettool.ingest.report import FileReport, IngestOptions
from fleettool.recording.files import iter_lines, read_text
from fleettool.store import Store
from fleettool.store.topology import JobRow, job_counts, put_jobs, put_topology, topology_counts

TOPOLOGY_FORMATS = ("slurm-topology", "sacct", "kube-nodes", "topology-csv")


def _store_nodes(store: Store, path: Path, rep: FileReport, nodes: dict[str, dict[str, str]]) -> None:
    rep.rows += put_topology(store, nodes, str(path))
    rep.topology_nodes += len(nodes)


def read_slurm_topology(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    topo = parse_topology_conf(iter_lines(path), str(path))
    rep.issues.extend(topo.issues)
    _store_nodes(store, path, rep, topo.nodes)
    parts = (
        [f"{_plural(len(topo.leaves), 'leaf', 'leaves')}, {_plural(len(topo.spines), 'spine')}"]
        if topo.leaves
        else []
    )
    if topo.blocks:
        sizes = f" (BlockSizes={','.join(map(str, topo.block_sizes))})" if topo.block_sizes else ""
        parts.append(f"{_plural(len(topo.blocks), 'block')}{sizes}")
    rep.notes.extend(parts)


def read_sacct(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    from zoneinfo import ZoneInfo

    jobs, issues = parse_sacct(iter_lines(path), str(path), ZoneInfo(opts.tz) if opts.tz else None)
    rep.issues.extend(issues)
    rows = [
        JobRow(j.job_id, j.name, j.nodes, j.start, j.end, j.state, j.state_detail, str(path)) for j in jobs
    ]
    rep.jobs += put_jobs(store, rows)
    rep.rows += len(rows)
    for j in jobs:
        for t in (j.start, j.end):
            if t is not None:
                rep.t_min = t if rep.t_min is None else min(rep.t_min, t)
                rep.t_max = t if rep.t_max is None else max(rep.t_max, t)
    if rows:
        rep.time_source = (
            f"sacct's Start/End, the cluster's local time in {opts.tz} (--tz)"
            if opts.tz
            else "sacct's Start/End (the cluster's local time read as UTC; --tz ZONE names the cluster's zone)"
        )


def read_kube_nodes(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    nodes, issues = parse_kube_nodes(read_text(path), str(path), opts.rack_label)
    rep.issues.extend(issues)
    _store_nodes(store, path, rep, {n: k for n, k in nodes.items() if k})
    bare = sorted(n for n, k in nodes.items() if not k)
    if bare:
        rep.notes.append(
            f"{_plural(len(bare), 'node')} with no topology label (first: {bare[0]}): not stored"
        )


def read_topology_csv(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    nodes, issues = parse_topology_csv(iter_lines(path), str(path))
    rep.issues.extend(issues)
    _store_nodes(store, path, rep, nodes)


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else plural or word + 's'}"


def summary_lines(store: Store) -> list[str]:
    """What the store holds of topology and jobs: 'topology: 16 nodes in 2 leaves, 1 spine', 'jobs: 3 from
    sacct (FILE)'; nothing when it holds none."""
    c = topology_counts(store)
    out = []
    if c["nodes"]:
        parts = [
            _plural(c[k], word, plural)
            for k, word, plural in (
                ("leaf", "leaf", "leaves"),
                ("spine", "spine", None),
                ("nvlink_domain", "NVLink domain", None),
                ("rack", "rack", None),
                ("zone", "zone", None),
            )
            if c.get(k)
        ]
        out.append(f"topology: {_plural(c['nodes'], 'node')}" + (f" in {', '.join(parts)}" if parts else ""))
    for source, n in job_counts(store).items():
        out.append(f"jobs: {n} from sacct ({source})")
    return out


def ingest_topology(store: Store, paths: list[Path], opts: IngestOptions) -> list[FileReport]:
    """`replay --topology FILE`: each file read as the topology or job file its content says it is. A file
    that is none of them raises ValueError naming it and what it is instead (nothing of it stored)."""
    from fleettool.ingest.run import ingest
    from fleettool.recording.identify import identify_why

    reports: list[FileReport] = []
    for p in paths:
        ident = identify_why(p)
        if ident.format not in TOPOLOGY_FORMATS:
            what = ident.why or f"it reads as {ident.format}"
            raise ValueError(
                f"{p}: not a topology or jobs file (topology.conf, sacct --parsable2, kubectl get nodes -o json, "
                f"a node,rack,nvlink_domain,leaf CSV): {what}"
            )
        reports.extend(ingest(store, p, opts))
    return reports
