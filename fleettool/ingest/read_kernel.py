"""Read a kernel log (dmesg in its shapes, syslog, journalctl short / -o json, /dev/kmsg records) into the
store. The lines are parsed by formats.kmsg and turned into events by the live collector's own conversion
(collectors.kmsg.kernel_events), so a replay exercises what the agent runs."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from fleettool.collectors.kmsg import KernelBatch, _settled, kernel_events
from fleettool.formats.errors import ParseIssue
from fleettool.formats.kmsg import KernelLogParser, KernelRecord, parse_journal_entry, parse_kmsg_record
from fleettool.ingest.dedup import FileDedup
from fleettool.ingest.report import FileReport, IngestOptions
from fleettool.model import canonical_pci_bus_id
from fleettool.recording.files import iter_lines
from fleettool.store import Store


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


def _default_node(store: Store, opts: IngestOptions) -> str:
    if opts.node is not None:
        return opts.node
    nodes = [r["node"] for r in store.query("SELECT DISTINCT node FROM samples LIMIT 2")]
    return nodes[0] if len(nodes) == 1 else "unknown"


EVENTS_PER_CHUNK = (
    5000  # events converted, checked for duplicates and inserted at once: a file streams in chunks
)


def _kernel_records(
    store: Store, path: Path, opts: IngestOptions, rep: FileReport, records: Iterable[KernelRecord]
) -> None:
    """Store the GPU records of one kernel log, EVENTS_PER_CHUNK events at a time, and say where their times
    came from. Only a chunk's events are held: a storm's file of 50k lines costs what 5k do."""
    node = _default_node(store, opts)
    mark = store.events_mark()  # this file's events are those above it
    dedup = FileDedup(store, mark)
    identities: set[tuple[str, str | None, str | None]] = set()
    lacking: set[tuple[str, str | None]] = set()  # (node, PCI id as read) of events lacking GPU or UUID
    walled = 0
    for batch in _chunks(records, node, f"kmsg:{path.name}"):
        for g, ts in batch.announced:
            store.merge_gpu_identity(g.node, g.uuid, g.pci_bus_id, g.serial, ts or 0.0)
            rep.nodes.add(g.node)
        # GPUs announced (the serial line that follows an announcement is the same GPU's)
        identities.update((g.node, g.uuid, g.pci_bus_id) for g, _ in batch.announced)
        events = batch.events
        rep.boot_relative += batch.boot_relative
        rep.untimed += batch.untimed
        walled += len(events) - batch.boot_relative - batch.untimed
        for ev in events:
            rep.nodes.add(ev.node)
            if ev.ts is not None:
                rep.t_min = ev.ts if rep.t_min is None else min(rep.t_min, ev.ts)
                rep.t_max = ev.ts if rep.t_max is None else max(rep.t_max, ev.ts)
        events, dropped = dedup.drop(events)  # a line another file (kern.log, its .gz, journalctl) stored
        rep.duplicates += dropped
        lacking.update({(ev.node, ev.pci_bus_id) for ev in events if ev.gpu is None or ev.uuid is None})
        rep.events += store.write_events(events)
    rep.identities += len(identities)
    # identity learnt in this file (announcements, wherever they stand in it) applies to its events
    _fill_from_announcements(store, mark, lacking)
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


def _chunks(records: Iterable[KernelRecord], node: str, source: str) -> Iterator[KernelBatch]:
    """The file's records as events, at most EVENTS_PER_CHUNK events and announcements a batch. An SXid is converted
    the moment the collector's `_settled` lets it go, as `kernel_events` over the whole file would: its
    follow-on lines, folded into it by the parser meanwhile, are in it then and no later ones."""
    pending: list[KernelRecord] = []
    out = KernelBatch()

    def convert() -> None:
        b = kernel_events(pending, node, source)
        out.events.extend(b.events)
        out.announced.extend(b.announced)
        out.boot_relative += b.boot_relative
        out.untimed += b.untimed
        pending.clear()

    for rec in _settled(records):
        pending.append(rec)
        full = len(pending) + len(out.events) + len(out.announced) >= EVENTS_PER_CHUNK
        if rec.kind == "sxid" or full:
            convert()
        if full:  # each record is at most one event or announcement: a batch holds at most EVENTS_PER_CHUNK
            yield out
            out = KernelBatch()
    convert()
    yield out


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
    if shape in ("dmesg -H", "dmesg --time-format delta"):
        return f"{shape}: the last date line's minute (its seconds are not printed) plus the gaps since"
    return "the lines' own stamps"


# how recordings before events.jsonl wrote fleettool's own events: `<stamp> <host> kernel: fleettool[nvml]: KIND: ...`
_OLD_OWN_EVENT = " kernel: fleettool["


def _naming_old_events(path: Path, rep: FileReport, lines: Iterable[str]) -> Iterator[str]:
    """The lines, each of fleettool's own events that an older recording wrote into its kernel log named as
    skipped: no kernel printed it, and it lacks the GPU, UUID and code the event had."""
    for lineno, line in enumerate(lines, 1):
        if _OLD_OWN_EVENT in line:
            rep.issues.append(
                ParseIssue(
                    str(path),
                    lineno,
                    "fleettool's own event as an older recording wrote it (no GPU, UUID or code in the line): "
                    "not read; record again, such events now go to events.jsonl",
                )
            )
        yield line


def read_kernel_log(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    year, year_src = _context_year(store, path, opts)
    parser = KernelLogParser(year=year, host=None)
    lines = _naming_old_events(path, rep, iter_lines(path))
    _kernel_records(store, path, opts, rep, parser.feed_all(lines))
    _nic_notes(rep, parser)
    if parser.year_used:  # syslog or dmesg -H stamps were read: they carry no year
        rep.notes.append(f"syslog stamps carry no year: {year} taken from {year_src}")
    if parser.no_base_records:  # dmesg -H / delta gaps with no date line before them: no wall time to add to
        rep.issues.append(
            ParseIssue(
                str(path),
                parser.no_base_line,
                f"{parser.no_base_records} GPU lines timed only by the gap to the line before ({rep.shape}) "
                "and no date line before them: stored with no time (save `dmesg -T` or `--time-format iso`)",
            )
        )
    elif parser.clock.no_base:
        rep.notes.append(
            f"{parser.clock.no_base} lines timed only by the gap to the line before ({rep.shape}), with no date "
            "line before them: they have no wall time"
        )


def _nic_notes(rep: FileReport, parser: KernelLogParser) -> None:
    """What the NIC driver's lines gave beyond events: the ACCESS_REG lines folded into their device's event of
    the day, and the lines no pattern judges (read, counted, never dropped in silence)."""
    nic = parser.nic
    if nic.deduplicated:
        rep.notes.append(
            f"{nic.deduplicated} NIC ACCESS_REG lines folded into their device's one event a day (noise)"
        )
    if nic.unjudged and nic.first_unjudged is not None:
        line, text = nic.first_unjudged
        rep.notes.append(
            f"{nic.unjudged} NIC driver lines read but not judged (no pattern matches them; first: line {line}: "
            f"{text[:80]!r})"
        )


def read_journal_json(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    parser = KernelLogParser()
    records = _decoded_records(path, rep, parse_journal_entry, "a journal JSON entry", parser)
    _kernel_records(store, path, opts, rep, records)
    _nic_notes(rep, parser)


def _decode_kmsg(line: str) -> tuple[str, float | None, float | None, str | None] | None:
    if line.startswith(" "):  # continuation lines: the record's KEY=value dictionary
        return ("", None, None, None)
    r = parse_kmsg_record(line)
    if r is None:
        return None
    _pri, _seq, usec, msg = r
    return msg.replace("\\x0a", "\n").split("\n")[0], None, usec / 1e6, None  # \x0a: an escaped newline


def read_dev_kmsg(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    parser = KernelLogParser()
    _kernel_records(
        store, path, opts, rep, _decoded_records(path, rep, _decode_kmsg, "a /dev/kmsg record", parser)
    )
    _nic_notes(rep, parser)


def _decoded_records(
    path: Path,
    rep: FileReport,
    decode: Callable[[str], tuple[str, float | None, float | None, str | None] | None],
    what: str,
    parser: KernelLogParser,
) -> Iterator[KernelRecord]:
    """Kernel records from a file of one message per line (journal JSON, /dev/kmsg records): `decode` gives
    (message, wall time, uptime, host), an empty message for a line to pass over, or None for a bad line."""
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


def _fill_from_announcements(store: Store, mark: int, lacking: set[tuple[str, str | None]]) -> None:
    """The GPU index and UUID the store knows by (node, PCI id), given to this file's events (rowid above
    `mark`) that lack them."""
    if not lacking:
        return
    lacking = {(n, canonical_pci_bus_id(p)) for n, p in lacking}  # the store's form
    known = {
        (r["node"], r["pci_bus_id"]): (r["gpu"], r["uuid"])
        for r in store.query("SELECT node, pci_bus_id, gpu, uuid FROM gpus WHERE pci_bus_id IS NOT NULL")
    }
    store.fill_event_identity(mark, [(n, p, g, u) for (n, p), (g, u) in known.items() if (n, p) in lacking])
