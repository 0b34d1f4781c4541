"""`fleettool replay DIR` and `fleettool demo`: ingest a recording, say what was read, evaluate the rules.

The work is fleettool.pipeline.replay's; this module parses the options and prints what it returns.

The summary names every file with its reader and what it stored, or why it was skipped, or what a partial
file kept, and where its times came from. Nothing recognised is exit 3; so is --strict with any skipped or
partial file (after the rest was read), any file whose reading failed, and a replay where no file stored
anything though one held something (malformed lines, series no fleettool metric maps): each such file is named
with why, on stderr, also when others stored rows (then exit 0, as for a partly read directory).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from fleettool.cli.common import DEFAULT_DB, die, open_store, parse_size_option
from fleettool.cli.exit_codes import ExitCode
from fleettool.cli.options import NoBuiltinRulesOpt, RulesOpt
from fleettool.cli.output import with_iso
from fleettool.cli.topology_opts import DEFAULT_RACK_LABEL, RackLabelOpt, TopologyOpt, topology_files


def parse_at(text: str) -> float:
    """--at: unix seconds or milliseconds, or an ISO 8601 date-time (UTC unless it has an offset)."""
    from fleettool.units import parse_iso

    s = text.strip()
    try:
        v = float(s)
    except ValueError:
        try:
            t = parse_iso(s)
        except ValueError:
            raise typer.BadParameter(
                f"not a time: {text!r} (use e.g. 2026-12-02T14:40:00Z or unix seconds)", param_hint="--at"
            ) from None
        return t
    if not math.isfinite(v) or v < 0:
        raise typer.BadParameter(f"not a time: {text!r}", param_hint="--at")
    t = v / 1000.0 if v > 1e11 else v
    if t > 7258118400:
        raise typer.BadParameter(f"not a time: {text!r} (after the year 2200)", param_hint="--at")
    return t


def _line(r: Any) -> str:
    """One file of the summary."""
    what = f"[{r.reader}{': ' + r.shape if r.shape and r.shape != r.reader else ''}]"
    if r.status == "ignored":
        return f"{r.path} ignored: {r.skipped}"
    if r.status in ("skipped", "failed"):
        tag = f"[{r.reader}] " if r.recognised else ""
        return f"{r.path} {tag}skipped: {r.skipped}"
    out = f"{r.path} {what} {r.stored()}"
    if r.issues:
        out += f", {len(r.issues)} issues (first: line {r.issues[0].line})"
    if r.partial:
        out += "\n    partial: " + "; ".join(r.partial)
    if r.time_source:
        out += f"\n    time: {r.time_source}"
    empty = r.nothing_stored()
    for n in r.notes:
        if empty is None or n not in empty:
            out += f"\n    note: {n}"
    if empty is not None:
        out += f"\n    nothing stored: {empty}"
    return out


def _replay(
    db: Path,
    src: Path,
    node: str | None,
    strict: bool,
    as_json: bool,
    quiet: bool,
    rules_paths: list[Path] | None = None,
    at: float | None = None,
    year: int | None = None,
    max_bytes: int | None = None,
    as_agent: tuple[tuple[float, float], ...] | None = None,
    no_builtin_rules: bool = False,
    topology: tuple[list[Path], str] = ([], DEFAULT_RACK_LABEL),
    tz: str | None = None,
) -> None:
    from fleettool.cli.rules_cmd import _load
    from fleettool.ingest.report import IngestOptions
    from fleettool.ingest.run import store_files
    from fleettool.recording.files import MAX_BYTES
    from fleettool.report import render_text, summarize

    if not src.exists():
        raise die(f"{src}: no such file or directory", ExitCode.BAD_INPUT)
    topology_files(*topology)  # each --topology file readable, else exit 3 naming it
    rules = _load(rules_paths, no_builtin_rules)  # the built-in set plus --rules; exit 3 naming a bad file
    opts = IngestOptions(
        node=node,
        strict=strict,
        quiet=quiet,
        at=at,
        year=year,
        exclude=store_files(db),
        max_bytes=max_bytes or MAX_BYTES,
        rack_label=topology[1],
        tz=tz,
    )
    new_db = not db.exists()
    try:
        _replay_into(db, src, opts, rules, strict, as_json, render_text, summarize, as_agent, topology[0])
    except typer.Exit as e:
        if new_db and e.exit_code == int(ExitCode.BAD_INPUT) and _nothing_stored(db):
            for leftover in (db, db.with_name(db.name + ".wal")):
                leftover.unlink(
                    missing_ok=True
                )  # a replay that stored nothing leaves no empty database behind
        raise


def _nothing_stored(db: Path) -> bool:
    from fleettool.store import Store

    try:
        with Store(db, read_only=True) as store:
            return not any(store.counts().values())
    except Exception:  # not ours to judge: leave it
        return False


def _replay_into(
    db: Path,
    src: Path,
    opts: Any,
    rules: Any,
    strict: bool,
    as_json: bool,
    render_text: Any,
    summarize: Any,
    as_agent: tuple[tuple[float, float], ...] | None = None,
    topology: list[Path] | None = None,
) -> None:
    from fleettool.cli.replay_agent import judge_as_agent
    from fleettool.cli.replay_triage import member_ids, print_triage, replay_incidents
    from fleettool.fabric_report import port_summary, render_ports
    from fleettool.ingest.read_topology import ingest_topology, summary_lines
    from fleettool.pipeline import replay

    with open_store(db, read_only=False) as store:
        try:  # --as-agent: ingested here, judged below as the agent judges (nothing judged whole)
            given = ingest_topology(store, topology or [], opts)  # --topology: before the rules judge
            res = replay(store, src, opts, [] if as_agent is not None else rules)
        except (OSError, ValueError) as e:
            raise die(f"{e}", ExitCode.BAD_INPUT) from None
        res.reports[:0] = given
        topo_lines = summary_lines(store)
        if as_agent is not None and res.recognised:
            res.alerts = judge_as_agent(store, rules, as_agent)
        reports = res.reports
        if not res.recognised:
            listed = "; ".join(f"{Path(r.path).name}: {r.skipped}" for r in reports if r.skipped)
            n = len(reports)
            if not as_json:
                for r in reports:
                    print(_line(r))
            if n == 0:
                raise die(f"{src}: an empty directory: no files to read", ExitCode.BAD_INPUT)
            raise die(
                f"nothing recognised in {src} ({n} file{'s' if n != 1 else ''} skipped"
                + (f": {listed})" if listed else ")"),
                ExitCode.BAD_INPUT,
            )
        summaries = summarize(store)
        ports = port_summary(store)
        incidents, members = replay_incidents(store), member_ids(store)
    read, failed, skipped, partial, alerts = res.read, res.failed, res.skipped, res.partial, res.alerts
    if as_json:
        out = {
            "files": [r.as_dict() for r in reports],
            "gpus": [
                {
                    "node": s.node,
                    "gpu": s.gpu,
                    "uuid": s.uuid,
                    "samples": s.samples,
                    "max_temp_c": s.max_temp_c,
                    "max_power_w": s.max_power_w,
                    "clock_event_seconds": s.reasons_s,
                    "findings": s.findings(),
                }
                for s in summaries
            ],
            "ports": ports,
            "incidents": incidents,
            "alerts": [with_iso(a, "first_seen", "last_seen") for a in alerts],
            "topology": topo_lines,
        }
        json.dump(out, sys.stdout, indent=1, default=str)
        print()
    else:
        counts = ", ".join(
            f"{len(x)} {name}"
            for x, name in (
                (read, "read"),
                (partial, "of them partial"),
                (skipped, "skipped"),
                (failed, "failed"),
                (res.having("ignored"), "ignored"),
            )
            if x
        )
        print(f"{src}: {len(reports)} file{'' if len(reports) == 1 else 's'}: {counts}")
        for r in reports:
            print(_line(r))
        boot = sum(r.boot_relative for r in reports)
        if boot:
            print(
                f"\n{boot} kernel events are boot-relative (uptime only, no wall clock in the file): "
                "stored without a time and judged at the end of the recording"
            )
        for block in ("\n".join(topo_lines), render_text(summaries).strip("\n"), render_ports(ports)):
            if block:  # one blank line between blocks, none for an empty one
                print(f"\n{block}")
        print()
        print_triage(incidents, alerts, members, str(db), _when)
    _nothing_from(src, read, res.seen)
    if failed and not strict:
        raise typer.Exit(int(ExitCode.BAD_INPUT))  # each failure was named on stderr as it happened
    if strict and (failed or skipped or partial):
        unsaid = [r for r in skipped + partial]
        if unsaid:
            why = "; ".join(
                f"{Path(r.path).name}: {r.skipped or 'partial: ' + '; '.join(r.partial)}" for r in unsaid
            )
            n = len(unsaid) + len(failed)
            raise die(f"--strict: {n} file{'s' if n != 1 else ''} not fully read ({why})", ExitCode.BAD_INPUT)
        raise typer.Exit(int(ExitCode.BAD_INPUT))


def _nothing_from(src: Path, read: list[Any], seen: list[Any]) -> None:
    """Each file read that stored nothing, named with why on stderr; when no file stored anything (and none was
    stored by an earlier replay), one line and exit 3: a replay that stored nothing is never a quiet 0."""
    empty = [(r, why) for r in read if (why := r.nothing_stored()) is not None]
    if empty and len(empty) == len(read) and not seen:
        n = len(empty)
        listed = "; ".join(f"{Path(r.path).name}: {why}" for r, why in empty)
        raise die(
            f"nothing stored from {src} ({n} file{'s' if n != 1 else ''} read: {listed})", ExitCode.BAD_INPUT
        )
    for r, why in empty:
        print(f"fleettool: note: {r.path}: nothing stored ({why})", file=sys.stderr)


def _when(a: dict[str, Any]) -> str:
    """'firing since 2026-11-30 00:30:00Z (last seen 00:31:00Z)', or 'resolved: ... to ...'."""
    first, last = a.get("first_seen"), a.get("last_seen")
    if first is None:
        return str(a["state"])
    f = f"{first:%Y-%m-%d %H:%M:%S}Z"
    if last is None or last == first:
        l_ = ""
    elif last.date() == first.date():
        l_ = f"{last:%H:%M:%S}Z"
    else:
        l_ = f"{last:%Y-%m-%d %H:%M:%S}Z"
    if a["state"] == "resolved":
        return f"resolved: {f}" + (f" to {l_}" if l_ else "")
    if a["state"] == "stale":  # its series stopped while it fired: neither firing nor resolved
        return f"stale since {f}: no data since {l_ or f}"
    return f"{a['state']} since {f}" + (f" (last seen {l_})" if l_ else "")


def _max_bytes(text: str | None) -> int | None:
    return None if text is None else parse_size_option(text, "--max-file-size", example="512M, 2G")


def register(app: typer.Typer) -> None:
    @app.command()
    def replay(
        recording: Annotated[
            Path, typer.Argument(help="a recording directory or one file (.gz read transparently)")
        ],
        db: Annotated[Path, typer.Option(help="DuckDB file to ingest into")] = DEFAULT_DB,
        node: Annotated[str | None, typer.Option(help="node name for files that do not name one")] = None,
        strict: Annotated[
            bool,
            typer.Option(
                help="fail (exit 3) when any file is skipped, partial or has a malformed line; "
                "such a file is not stored, the others are"
            ),
        ] = False,
        at: Annotated[
            str | None,
            typer.Option(
                help="the time of files that carry none and whose name gives none (a saved scrape, "
                "nccl-tests text): ISO 8601 or unix seconds; default: the file's mtime"
            ),
        ] = None,
        year: Annotated[
            int | None, typer.Option(help="the year of syslog lines (default: the recording's own time)")
        ] = None,
        tz: Annotated[
            str | None,
            typer.Option(
                help="the cluster's time zone (IANA, e.g. America/Los_Angeles) for sacct's local times"
            ),
        ] = None,
        max_file_size: Annotated[
            str | None,
            typer.Option(help="refuse a file that decompresses past this size (default 2G)"),
        ] = None,
        json_out: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="do not list skipped lines")] = False,
        rules: RulesOpt = None,
        no_builtin_rules: NoBuiltinRulesOpt = False,
        topology: TopologyOpt = None,
        rack_label: RackLabelOpt = DEFAULT_RACK_LABEL,
        as_agent: Annotated[
            bool,
            typer.Option(
                "--as-agent",
                help="judge the recording as the agent does while collecting it: its rule scheduler at each "
                "flush (every 60 s, at once for an XID) on the recording's own clock, each evaluation seeing "
                "only the data up to its time",
            ),
        ] = False,
        down: Annotated[
            list[str] | None,
            typer.Option(
                help="with --as-agent: the agent down FROM+DURATION after the recording's start (e.g. 2h+30m; "
                "repeatable): no judgement then, its samples dropped from the store, kernel events kept and "
                "read at the restart, which starts a fresh scheduler"
            ),
        ] = None,
    ) -> None:
        """Ingest a recording into the store in the recording's own time, and report what it holds.

        Files are identified by content, never by name: OpenMetrics / Prometheus text (dcgm-exporter DCGM_FI_*
        names, node_exporter's node_infiniband_*, or fleettool's), kernel logs (dmesg, dmesg -T, --time-format
        iso, journalctl short / short-iso / short-precise / -o json, syslog, kern.log, /dev/kmsg records),
        nccl-tests output, nvidia-smi dumps, InfiniBand snapshots (ibstat, ibstatus, ibv_devinfo, perfquery,
        iblinkinfo, a /sys/class/infiniband tarball).
        Every file is listed with what was stored, or why it was skipped. A file already ingested is not
        stored twice; the database's own files are never read.

        Example: fleettool replay fixtures/scenarios/thermal-throttle --db /tmp/t.duckdb --as-agent --down 20m+10m
        """
        if down and not as_agent:
            raise typer.BadParameter("--down needs --as-agent", param_hint="--down")
        from fleettool.cli.extras import require_extra

        require_extra("replay", "replay")
        downs: tuple[tuple[float, float], ...] = ()
        if down:  # the agent's modules (its flush, the scheduler) only where --as-agent --down asks for them
            from fleettool.agent.as_agent import parse_down

            try:
                downs = tuple(parse_down(d) for d in down)
            except ValueError as e:
                raise typer.BadParameter(str(e), param_hint="--down") from None
        if tz is not None:
            from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

            try:
                ZoneInfo(tz)
            except (ZoneInfoNotFoundError, ValueError):
                raise typer.BadParameter(
                    f"not a time zone: {tz!r} (e.g. UTC, Europe/Berlin)", param_hint="--tz"
                ) from None
        if year is not None and not 1970 <= year <= 2200:
            raise typer.BadParameter(f"not a year: {year}", param_hint="--year")
        t = parse_at(at) if at is not None else None
        mb, judged = _max_bytes(max_file_size), downs if as_agent else None
        topo = (topology or [], rack_label)
        _replay(
            db,
            recording,
            node,
            strict,
            json_out,
            quiet,
            rules,
            t,
            year,
            mb,
            judged,
            no_builtin_rules,
            topo,
            tz,
        )
