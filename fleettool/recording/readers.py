"""The reader for each recording format, registered with recording.reader."""

from __future__ import annotations

from pathlib import Path

from fleettool.recording.ingest_metrics import iter_metric_tables
from fleettool.recording.reader import FileReport, IngestOptions, register
from fleettool.store import Store


def _metrics(store: Store, path: Path, opts: IngestOptions, rep: FileReport, millis: bool | None) -> None:
    default_ts = None
    stem = path.name.split(".")[0]
    if stem.isdigit() and len(stem) >= 12:  # <unix-ms>.prom: one scrape without sample timestamps
        default_ts = int(stem) / 1000.0
    parser, ing, tables = iter_metric_tables(
        path, default_node=opts.node or "unknown", millis=millis, strict=opts.strict, default_ts=default_ts
    )
    import pyarrow as pa
    import pyarrow.compute as pc

    pending: list[pa.Table] = []
    size = 0

    def write() -> None:
        nonlocal pending, size
        if pending:  # one insert per ~1 M rows: DuckDB's per-insert cost dominates small batches
            store.write_samples(pa.concat_tables(pending))
            pending, size = [], 0

    for t in tables:  # type: ignore[attr-defined]
        if t.num_rows:
            pending.append(t)
            size += t.num_rows
            rep.rows += t.num_rows
            lo_s, hi_s = pc.min(t["ts"]).as_py().timestamp(), pc.max(t["ts"]).as_py().timestamp()
            rep.t_min = lo_s if rep.t_min is None else min(rep.t_min, lo_s)
            rep.t_max = hi_s if rep.t_max is None else max(rep.t_max, hi_s)
            if size >= 1_000_000:
                write()
    write()
    rep.issues.extend(parser.issues)
    rep.nodes.update(n for n in ing.map.node if n)
    if ing.map.gpus:
        store.upsert_gpus(ing.map.gpus.values(), rep.t_max or 0.0)
    if ing.map.pods:
        from fleettool.model import PodUse

        uses = []
        for node, gpu, uuid, ns, pod, cont in ing.map.pods:
            for t in (rep.t_min, rep.t_max):
                if t is not None:
                    uses.append(PodUse(t, node, gpu, uuid, ns, pod, cont))
        store.record_pods(uses)


@register("openmetrics")
def read_openmetrics(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    _metrics(store, path, opts, rep, millis=False)


@register("prometheus")
def read_prometheus(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    _metrics(store, path, opts, rep, millis=None)


def _context_year(store: Store, path: Path) -> int:
    """The year for syslog lines that carry none: the recording's own samples, else the file's mtime."""
    import datetime as dt

    hi = store.scalar("SELECT max(ts) FROM samples")
    if hi is not None:
        return int(hi.year)
    return dt.datetime.fromtimestamp(path.stat().st_mtime, tz=dt.timezone.utc).year


@register("kmsg")
def read_kernel_log(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    from fleettool.formats.kmsg import KernelLogParser, record_to_event
    from fleettool.recording.files import iter_lines

    node = opts.node
    if node is None:
        nodes = [r["node"] for r in store.query("SELECT DISTINCT node FROM samples LIMIT 2")]
        node = nodes[0] if len(nodes) == 1 else "unknown"
    parser = KernelLogParser(year=opts.year or _context_year(store, path), host=None)
    events = []
    for rec in parser.feed_all(iter_lines(path)):
        host = rec.host or node
        if rec.kind == "gpu-announce":
            store.merge_gpu_identity(host, rec.uuid, rec.pci_bus_id, rec.serial, rec.ts or 0.0)
            rep.nodes.add(host)
            continue
        ev = record_to_event(rec, host, source=f"kmsg:{path.name}")
        if ev is None:
            continue
        events.append(ev)
        rep.nodes.add(ev.node)
        if ev.ts is not None:
            rep.t_min = ev.ts if rep.t_min is None else min(rep.t_min, ev.ts)
            rep.t_max = ev.ts if rep.t_max is None else max(rep.t_max, ev.ts)
    # identity learnt in this file (announcements) applies to the events just read
    _fill_from_announcements(events, store)
    rep.events += store.write_events(events)


def _fill_from_announcements(events: list, store: Store) -> None:  # type: ignore[type-arg]
    if not events:
        return
    known = {
        (r["node"], r["pci_bus_id"]): (r["gpu"], r["uuid"])
        for r in store.query("SELECT node, pci_bus_id, gpu, uuid FROM gpus WHERE pci_bus_id IS NOT NULL")
    }
    import dataclasses

    for i, ev in enumerate(events):
        hit = known.get((ev.node, ev.pci_bus_id))
        if hit and (ev.gpu is None or ev.uuid is None):
            events[i] = dataclasses.replace(
                ev, gpu=ev.gpu if ev.gpu is not None else hit[0], uuid=ev.uuid or hit[1]
            )


def _file_op_hint(path: Path) -> str | None:
    import re

    m = re.search(r"([a-z_]+?)_perf", path.name)
    return m.group(1) if m else None


def _store_nccl_runs(store: Store, path: Path, opts: IngestOptions, rep: FileReport, runs: list) -> None:  # type: ignore[type-arg]
    import hashlib

    from fleettool.formats.nccl_tests import NcclRun

    for i, run in enumerate(runs):
        assert isinstance(run, NcclRun)
        run_id = hashlib.sha256(f"{path.resolve()}:{i}:{run.first_line}".encode()).hexdigest()[:16]
        nodes = run.nodes or ([opts.node] if opts.node else [])
        ts = None
        if run.start_time:
            from fleettool.formats.kmsg import parse_iso

            ts = parse_iso(run.start_time.replace(" ", "T"))
        store.write_nccl_run(
            run_id=run_id,
            ts=ts,
            op=run.op or "unknown",
            ranks=run.nranks,
            nodes=nodes,
            avg_busbw_gbps=run.avg_busbw_gbps,
            peak_busbw_gbps=run.peak_busbw_gbps,
            wrong=run.wrong,
            version=run.version or run.nccl_version,
            source=str(path),
            rows=run.rows,
        )
        rep.runs += 1
        rep.nodes.update(nodes)


@register("nccl-tests")
def read_nccl_text(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    from fleettool.formats.nccl_tests import parse_nccl_text
    from fleettool.recording.files import iter_lines

    runs, issues = parse_nccl_text(iter_lines(path), path=str(path), op_hint=_file_op_hint(path))
    rep.issues.extend(issues)
    _store_nccl_runs(store, path, opts, rep, runs)


@register("nccl-tests-json")
def read_nccl_json(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    from fleettool.formats.nccl_tests import parse_nccl_json
    from fleettool.recording.files import read_text

    runs, issues = parse_nccl_json(read_text(path), path=str(path))
    rep.issues.extend(issues)
    _store_nccl_runs(store, path, opts, rep, runs)


def _store_smi(store: Store, path: Path, opts: IngestOptions, rep: FileReport, report: object) -> None:
    from fleettool.formats.nvidia_smi import SmiReport, gpu_identity, gpu_samples
    from fleettool.model import GpuInfo, Sample

    assert isinstance(report, SmiReport)
    rep.issues.extend(report.issues)
    node = opts.node or "unknown"
    ts = report.timestamp if report.timestamp is not None else path.stat().st_mtime
    samples = []
    infos = []
    for g in report.gpus:
        ident = gpu_identity(g)
        minor = ident.get("minor")
        gpu = int(minor) if minor and minor.isdigit() else g.index
        if ident["uuid"] is None and not gpu_samples(g):
            continue
        for metric, value in gpu_samples(g).items():
            samples.append(Sample(ts, node, gpu, ident["uuid"], metric, value))
        infos.append(
            GpuInfo(
                node, gpu, ident["uuid"], ident["pci_bus_id"], ident["model"], report.driver, ident["serial"]
            )
        )
    rep.rows += store.write_samples(samples) if samples else 0
    if infos:
        store.upsert_gpus(infos, ts)
    rep.nodes.add(node)
    rep.t_min = rep.t_max = ts


@register("nvidia-smi-text")
def read_smi_text(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    from fleettool.formats.nvidia_smi import parse_text
    from fleettool.recording.files import iter_lines

    _store_smi(store, path, opts, rep, parse_text(iter_lines(path), path=str(path)))


@register("nvidia-smi-xml")
def read_smi_xml(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    from fleettool.formats.nvidia_smi import parse_xml
    from fleettool.recording.files import read_text

    _store_smi(store, path, opts, rep, parse_xml(read_text(path), path=str(path)))
