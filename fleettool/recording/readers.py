"""The reader for each recording format, registered with recording.reader.

Each reader stores what its file holds and fills the FileReport: counts, the time source, and what a partial
file kept. Times the file does not carry come from recording.reader.file_time (name, --at, mtime), never from
the clock of the machine replaying.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from fleettool.formats.kmsg import KernelRecord
from fleettool.model import Event
from fleettool.recording.files import exposition_timestamps, iter_lines, read_text
from fleettool.recording.ingest_metrics import iter_metric_tables
from fleettool.recording.reader import FileReport, IngestOptions, XmlRefused, file_time, register
from fleettool.store import Store


# -- OpenMetrics / Prometheus ------------------------------------------------------------------------------
def _metrics(store: Store, path: Path, opts: IngestOptions, rep: FileReport, millis: bool | None) -> None:
    with_ts, without = exposition_timestamps(path)
    default_ts = None
    if without:  # a scrape saved as is (curl node:9400/metrics > gpu-17.prom) carries no sample timestamps
        default_ts, src = file_time(path, opts)
        rep.time_source = (
            f"no sample timestamps: {src}" if not with_ts else f"sample timestamps; lines without one: {src}"
        )
    else:
        rep.time_source = "sample timestamps"
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
    if not opts.node and "unknown" in rep.nodes:
        rep.notes.append("series without a Hostname label stored as node 'unknown' (give --node)")
    if rep.format == "openmetrics" and not parser.saw_eof:
        rep.partial.append(f"no '# EOF' (cut short?): kept {rep.rows} samples up to the last whole line")
    if rep.rows == 0 and not rep.issues:
        names = sorted(ing.map.unknown_names)[:3]
        rep.notes.append("no GPU series fleettool knows" + (f" (e.g. {', '.join(names)})" if names else ""))
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


# -- kernel logs ---------------------------------------------------------------------------------------------
def _context_year(store: Store, path: Path, opts: IngestOptions) -> tuple[int, str]:
    """The year for syslog lines that carry none, and where it came from: --year, the recording's own
    samples, --at, the file's mtime."""
    if opts.year:
        return opts.year, "--year"
    hi = store.scalar("SELECT max(ts) FROM samples")
    if hi is not None:
        return int(hi.year), "the recording's samples"
    if opts.at is not None:
        return dt.datetime.fromtimestamp(opts.at, tz=dt.timezone.utc).year, "--at"
    m = path.stat().st_mtime
    return dt.datetime.fromtimestamp(m, tz=dt.timezone.utc).year, "the file's mtime"


def _default_node(store: Store, opts: IngestOptions, rep: FileReport) -> str:
    if opts.node is not None:
        return opts.node
    nodes = [r["node"] for r in store.query("SELECT DISTINCT node FROM samples LIMIT 2")]
    return nodes[0] if len(nodes) == 1 else "unknown"


def _kernel_records(
    store: Store, path: Path, opts: IngestOptions, rep: FileReport, records: Iterable[KernelRecord]
) -> None:
    """Store the GPU records of one kernel log and say where their times came from."""
    from fleettool.formats.kmsg import record_to_event

    node = _default_node(store, opts, rep)
    events: list[Event] = []
    walled = 0
    for rec in records:
        host = rec.host or node
        if rec.kind == "gpu-announce":
            store.merge_gpu_identity(host, rec.uuid, rec.pci_bus_id, rec.serial, rec.ts or 0.0)
            rep.nodes.add(host)
            rep.identities += 1
            continue
        ev = record_to_event(rec, host, source=f"kmsg:{path.name}")
        if ev is None:
            continue
        if ev.ts is None:
            mark = "boot-relative" if rec.uptime is not None else "none"
            ev = dataclasses.replace(ev, detail={**ev.detail, "time": mark})
            if rec.uptime is not None:
                rep.boot_relative += 1
            else:
                rep.untimed += 1
        else:
            walled += 1
        events.append(ev)
        rep.nodes.add(ev.node)
        if ev.ts is not None:
            rep.t_min = ev.ts if rep.t_min is None else min(rep.t_min, ev.ts)
            rep.t_max = ev.ts if rep.t_max is None else max(rep.t_max, ev.ts)
    # identity learnt in this file (announcements) applies to the events just read
    _fill_from_announcements(events, store)
    rep.events += store.write_events(events)
    if "unknown" in rep.nodes and opts.node is None:
        rep.notes.append("no host name in the file: stored as node 'unknown' (give --node)")
    parts = []
    if walled:
        parts.append(f"{walled} at wall-clock time ({_wall_kind(rep)})")
    if rep.boot_relative:
        parts.append(
            f"{rep.boot_relative} boot-relative: the file has only the uptime since boot, "
            "stored without a wall time (detail.uptime)"
        )
    if rep.untimed:
        parts.append(f"{rep.untimed} with no time in the line")
    rep.time_source = "; ".join(parts) if parts else None


def _wall_kind(rep: FileReport) -> str:
    shape = rep.shape
    if shape == "dmesg -T":
        return "dmesg -T stamps, the capturing host's local time read as UTC"
    if shape in ("syslog / journalctl short", "journalctl short-precise"):
        return "syslog stamps (no year, no zone: UTC assumed)"
    if shape == "journalctl -o json":
        return "journal __REALTIME_TIMESTAMP"
    if shape == "dmesg":
        return "uptime + the boot time learnt from a line carrying both"
    return "the lines' own stamps"


@register("kmsg")
def read_kernel_log(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    from fleettool.formats.kmsg import KernelLogParser

    year, year_src = _context_year(store, path, opts)
    parser = KernelLogParser(year=year, host=None)
    _kernel_records(store, path, opts, rep, parser.feed_all(iter_lines(path)))
    if parser.year_used:  # syslog stamps were read: they carry no year
        rep.notes.append(f"syslog stamps carry no year: {year} taken from {year_src}")


@register("kmsg-journal-json")
def read_journal_json(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    from fleettool.formats.kmsg import parse_journal_entry

    _kernel_records(
        store, path, opts, rep, _decoded_records(path, rep, parse_journal_entry, "a journal JSON entry")
    )


@register("kmsg-raw")
def read_dev_kmsg(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    from fleettool.formats.kmsg import parse_kmsg_record

    def decode(line: str) -> tuple[str, float | None, float | None, str | None] | None:
        if line.startswith(" "):  # continuation lines: the record's KEY=value dictionary
            return ("", None, None, None)
        r = parse_kmsg_record(line)
        if r is None:
            return None
        _pri, _seq, usec, msg = r
        return msg.replace("\\x0a", "\n").split("\n")[0], None, usec / 1e6, None  # \x0a: an escaped newline

    _kernel_records(store, path, opts, rep, _decoded_records(path, rep, decode, "a /dev/kmsg record"))


def _decoded_records(
    path: Path,
    rep: FileReport,
    decode: Callable[[str], tuple[str, float | None, float | None, str | None] | None],
    what: str,
) -> Iterator[KernelRecord]:
    """Kernel records from a file of one message per line (journal JSON, /dev/kmsg records): `decode` gives
    (message, wall time, uptime, host), an empty message for a line to pass over, or None for a bad line."""
    from fleettool.formats.errors import ParseIssue
    from fleettool.formats.kmsg import KernelLogParser

    parser = KernelLogParser()
    for lineno, line in enumerate(iter_lines(path), 1):
        entry = decode(line) if line.strip() else ("", None, None, None)
        if entry is None:
            rep.issues.append(ParseIssue(str(path), lineno, f"not {what}: {line[:60]!r}"))
        if entry is None or not entry[0]:
            parser.lineno += 1
            continue
        msg, ts, up, host = entry
        rec = parser.feed_message(msg, ts=ts, uptime=up, host=host)
        if rec is not None:
            yield rec


def _fill_from_announcements(events: list[Event], store: Store) -> None:
    if not events:
        return
    known = {
        (r["node"], r["pci_bus_id"]): (r["gpu"], r["uuid"])
        for r in store.query("SELECT node, pci_bus_id, gpu, uuid FROM gpus WHERE pci_bus_id IS NOT NULL")
    }
    for i, ev in enumerate(events):
        hit = known.get((ev.node, ev.pci_bus_id))
        if hit and (ev.gpu is None or ev.uuid is None):
            events[i] = dataclasses.replace(
                ev, gpu=ev.gpu if ev.gpu is not None else hit[0], uuid=ev.uuid or hit[1]
            )


# -- nccl-tests ------------------------------------------------------------------------------------------
def _file_op_hint(path: Path) -> str | None:
    m = re.search(r"([a-z_]+?)_perf", path.name)
    return m.group(1) if m else None


def _store_nccl_runs(store: Store, path: Path, opts: IngestOptions, rep: FileReport, runs: list) -> None:  # type: ignore[type-arg]
    import hashlib

    from fleettool.formats.kmsg import parse_iso
    from fleettool.formats.nccl_tests import NcclRun

    sources: set[str] = set()
    for i, run in enumerate(runs):
        assert isinstance(run, NcclRun)
        run_id = hashlib.sha256(f"{path.resolve()}:{i}:{run.first_line}".encode()).hexdigest()[:16]
        nodes = run.nodes or ([opts.node] if opts.node else [])
        ts = parse_iso(run.start_time.replace(" ", "T")) if run.start_time else None
        if ts is not None:
            sources.add("the run's start_time (UTC assumed)")
        else:  # nccl-tests text carries no time: the file's, never the replaying machine's clock
            ts, src = file_time(path, opts)
            sources.add(f"none in the output: {src}")
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
        rep.rows += len(run.rows)
        rep.nodes.update(nodes)
        if getattr(run, "truncated", False):
            rep.partial.append(
                f"run {i + 1} (line {run.first_line}) cut before its footer: kept {len(run.rows)} rows"
            )
        if not nodes:
            rep.notes.append(f"run {i + 1} names no host (no '#  Rank' lines): give --node")
    rep.time_source = "; ".join(sorted(sources)) or None
    if not runs and not rep.issues:
        rep.skipped = "looked like nccl-tests output but holds no run"


@register("nccl-tests")
def read_nccl_text(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    from fleettool.formats.nccl_tests import parse_nccl_text

    runs, issues = parse_nccl_text(iter_lines(path), path=str(path), op_hint=_file_op_hint(path))
    rep.issues.extend(issues)
    _store_nccl_runs(store, path, opts, rep, runs)


@register("nccl-tests-json")
def read_nccl_json(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    from fleettool.formats.nccl_tests import parse_nccl_json

    runs, issues = parse_nccl_json(read_text(path), path=str(path))
    rep.issues.extend(issues)
    _store_nccl_runs(store, path, opts, rep, runs)


# -- nvidia-smi ----------------------------------------------------------------------------------------------
def _store_smi(store: Store, path: Path, opts: IngestOptions, rep: FileReport, report: object) -> None:
    from fleettool.formats.nvidia_smi import SmiReport, gpu_identity, gpu_samples
    from fleettool.model import GpuInfo, Sample

    assert isinstance(report, SmiReport)
    rep.issues.extend(report.issues)
    node = opts.node or "unknown"
    if report.timestamp is not None:
        ts = report.timestamp
        rep.time_source = "the report's Timestamp (the capturing host's local time read as UTC)"
    else:
        ts, src = file_time(path, opts)
        rep.time_source = f"no Timestamp in the report: {src}"
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
    if node == "unknown":
        rep.notes.append("nvidia-smi names no host: stored as node 'unknown' (give --node)")
    rep.t_min = rep.t_max = ts


@register("nvidia-smi-text")
def read_smi_text(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    from fleettool.formats.nvidia_smi import parse_text

    _store_smi(store, path, opts, rep, parse_text(iter_lines(path), path=str(path)))


_RE_ENTITY = re.compile(r"<!ENTITY", re.I)


def complete_xml(text: str) -> tuple[str, str | None]:
    """The document, or for one cut short the part that is whole (the root with its closed children),
    and why it was cut. nvidia-smi never declares entities, so a document that does is refused."""
    import xml.etree.ElementTree as ET

    if _RE_ENTITY.search(text):
        raise XmlRefused("XML declares entities (<!ENTITY>); nvidia-smi never does: refused, not expanded")
    pull: ET.XMLPullParser = ET.XMLPullParser(events=("start", "end"))
    root: ET.Element | None = None
    depth = 0
    closed: list[ET.Element] = []
    err: str | None = None
    try:
        pull.feed(text)
        for ev, item in pull.read_events():  # type: ignore[misc]
            el = item if isinstance(item, ET.Element) else None
            if el is None:
                continue
            if ev == "start":
                if root is None:
                    root = el
                depth += 1
            else:
                depth -= 1
                if depth == 1:
                    closed.append(el)
        pull.close()
    except ET.ParseError as e:
        err = str(e)
    if err is None or root is None:
        return text, None
    whole = ET.Element(root.tag, root.attrib)
    whole.extend(closed)
    gpus = sum(1 for c in closed if c.tag == "gpu")
    return ET.tostring(
        whole, encoding="unicode"
    ), f"XML cut short ({err}): kept {gpus} complete <gpu> sections"


@register("nvidia-smi-xml")
def read_smi_xml(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    from fleettool.formats.nvidia_smi import parse_xml

    text, cut = complete_xml(read_text(path))
    if cut:
        rep.partial.append(cut)
    _store_smi(store, path, opts, rep, parse_xml(text, path=str(path)))
