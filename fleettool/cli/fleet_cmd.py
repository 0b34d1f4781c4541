"""`fleettool export` (store -> Parquet segments in a fleet location) and `fleettool fleet` (rules and alerts
over a fleet location)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fleettool.cli.common import DEFAULT_DB, die, hostname, open_store
from fleettool.cli.exit_codes import ExitCode
from fleettool.cli.extras import require_extra
from fleettool.cli.options import FleetInsteadOpt, FleetOpt, FormatOpt, JsonOpt
from fleettool.cli.output import emit, print_json, with_iso
from fleettool.cli.topology_opts import (
    DEFAULT_RACK_LABEL,
    RackLabelOpt,
    TopologyOpt,
    load_topology,
    say_topology,
    topology_files,
)

if TYPE_CHECKING:
    from fleettool.store import Store

fleet_app = typer.Typer(help="Fleet-wide views over exported segments.", no_args_is_help=True)


def open_fleet_or_die(fleet: str, **kw: Any) -> Store:
    """The fleet location as a store for a reader, or exit: 3 when it does not exist or nothing was exported
    there, 6 when it cannot be read (S3 unreachable, permissions)."""
    require_extra("fleet", "--fleet")
    from fleettool.fleet.read import FleetError, check_fleet, open_fleet

    try:
        return open_fleet(check_fleet(fleet), **kw)
    except FleetError as e:
        raise die(str(e), ExitCode.BAD_INPUT) from None
    except OSError as e:
        raise die(f"{fleet}: cannot read the fleet location: {e}", ExitCode.STORE_ERROR) from None


def register(app: typer.Typer) -> None:
    @app.command("export")
    def export_cmd(
        to: Annotated[str, typer.Option("--to", help="a directory (NFS) or s3://bucket/prefix")],
        db: Annotated[Path, typer.Option(help="the store to export")] = DEFAULT_DB,
        exporter: Annotated[str, typer.Option(help="name of this exporter (default: this host)")] = "",
        include_current_hour: Annotated[
            bool, typer.Option(help="also the hour in progress (default: whole hours only)")
        ] = False,
        json_out: JsonOpt = False,
    ) -> None:
        """Export the store as Parquet segments (zstd), partitioned by date and node, whole hours only; a
        segment is visible whole or not at all and a crash mid-export loses nothing (the next export writes the
        same hours again). Rows that arrived in an hour already exported (a replay, a clock stepped back) are
        exported again with their hour ("late"). Counts are read back from the written segments. Runs within
        the agent's DuckDB memory limit. S3: set FLEETTOOL_S3_ENDPOINT (or AWS_ENDPOINT_URL) and AWS_*
        credentials.

        Example: fleettool export --db /var/lib/fleettool/fleet.duckdb --to s3://gpu-fleet/segments
        """
        require_extra("fleet", "export")
        from fleettool.agent.config import AgentConfig
        from fleettool.fleet.location import open_location
        from fleettool.fleet.segments import export

        with open_store(
            db, read_only=False, create=False
        ) as store:  # the store first: nothing created for a bad one
            cfg = AgentConfig  # the agent's default bounds: the export streams, so it fits them (in its pod)
            store.limit_resources(cfg.duckdb_memory, cfg.duckdb_threads)
            try:
                loc = open_location(to)
            except (OSError, ValueError) as e:
                why = getattr(e, "strerror", None) or e
                raise die(f"{to}: cannot use as a fleet location: {why}", ExitCode.STORE_ERROR) from None
            try:
                rep = export(
                    store, loc, exporter or hostname(), time.time(), include_current_hour=include_current_hour
                )
            except OSError as e:
                raise die(
                    f"export to {to} failed (nothing half-written is visible; run it again): {e}",
                    ExitCode.STORE_ERROR,
                ) from None
        out = {
            "segments": rep.segments,
            "rows": rep.rows,
            "bytes": rep.bytes,
            "tables": rep.by_table,
            "late": rep.late,
        }
        if json_out:
            print_json(out, indent=None)
        else:
            late = f" ({rep.late} written again for late rows)" if rep.late else ""
            print(f"{rep.segments} segments{late}, {rep.rows} rows, {rep.bytes} bytes -> {to}")

    app.add_typer(fleet_app, name="fleet")


@fleet_app.command("alerts")
def fleet_alerts(
    fleet: FleetOpt,
    evaluate: Annotated[
        bool,
        typer.Option("--evaluate", help="evaluate the rules over the whole fleet (fleet-wide peers, NCCL)"),
    ] = False,
    json_out: JsonOpt = False,
    fmt: FormatOpt = "table",
    topology: TopologyOpt = None,
    rack_label: RackLabelOpt = DEFAULT_RACK_LABEL,
) -> None:
    """Alerts of every node of a fleet location: the agents' own (exported), or with --evaluate the rules run
    over every node's segments at once (GPUs against the fleet baseline of their SKU, NCCL localisation across
    nodes).

    Example: fleettool fleet alerts --fleet s3://gpu-fleet/segments --evaluate --json
    """
    from fleettool.engine.evaluate import evaluate as run_rules
    from fleettool.engine.evaluate import write_alerts
    from fleettool.engine.rules import load_rules
    from fleettool.store.alerts import LIST_COLUMNS, AlertOrder, clear_alerts, list_alerts

    files = topology_files(topology, rack_label)  # each readable, before the fleet is opened
    # the inventory beside the alerts: an alert names its GPU's PCI id and UUID as `alerts --json` does
    with open_fleet_or_die(
        fleet, materialize=evaluate, tables=None if evaluate else ("alerts", "gpus")
    ) as store:
        if files.paths:  # beside the segments, in the fleet's in-memory store: the rules see it
            load_topology(store, files)
            say_topology(store)
        if evaluate:
            clear_alerts(store)
            write_alerts(store, run_rules(store, load_rules()))
        rows = list_alerts(store, order=AlertOrder.TRIAGE)
    # silences (exported for the incident fold) and acknowledgements are each agent's own: not applied here
    cols = (*LIST_COLUMNS, "pci_bus_id", "uuid")
    out = [with_iso({c: r[c] for c in cols}, "first_seen", "last_seen") for r in rows]
    gpu = ("gpu", lambda r: "-" if r["gpu"] is None else r["gpu"])
    emit(out, ["severity", "category", "node", gpu, "action", "state", "summary"], as_json=json_out, fmt=fmt)


@fleet_app.command("incidents")
def fleet_incidents(
    fleet: FleetOpt,
    evaluate: Annotated[
        bool,
        typer.Option("--evaluate", help="fold the alerts the rules give over the whole fleet's data"),
    ] = False,
    cache: Annotated[
        Path | None,
        typer.Option(
            help="local cache of the segments already read (default ~/.cache/fleettool/fleet/<hash of --fleet>)"
        ),
    ] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="read every segment, keep nothing")] = False,
    state: Annotated[
        str | None, typer.Option(help="only incidents in this state (firing, pending, stale, resolved)")
    ] = None,
    json_out: JsonOpt = False,
    fmt: FormatOpt = "table",
    topology: TopologyOpt = None,
    rack_label: RackLabelOpt = DEFAULT_RACK_LABEL,
) -> None:
    """Incidents across the fleet, causes first: every node's alerts folded together with the topology, jobs,
    lifecycle and silences the agents export, so a fault that hit many nodes (a job crash, an NVLink domain, a
    rack) is one incident. Same table and JSON as `fleettool incidents`. Incremental: segments already read are
    kept in the cache and only new or rewritten ones are read again (a line on stderr says how many).

    Example: fleettool fleet incidents --fleet s3://gpu-fleet/segments --json
    """
    require_extra("fleet", "fleet incidents")
    from fleettool.cli.incidents_view import emit_incidents, root_pci
    from fleettool.fleet.cache import default_cache
    from fleettool.fleet.read import FleetError, check_fleet
    from fleettool.incidents.fleet import open_fleet_incidents
    from fleettool.incidents.model import incident_json
    from fleettool.store.alerts import ALERT_STATES
    from fleettool.store.incidents import list_incidents

    if state and state not in ALERT_STATES:
        raise typer.BadParameter(
            f"{state!r} is not a state (one of {', '.join(ALERT_STATES)})", param_hint="--state"
        )
    files = topology_files(topology, rack_label)  # each readable, before the fleet is opened
    where = None if no_cache else (cache or default_cache(fleet))
    try:
        loc = check_fleet(fleet)
    except FleetError as e:
        raise die(str(e), ExitCode.BAD_INPUT) from None
    except OSError as e:
        raise die(f"{fleet}: cannot read the fleet location: {e}", ExitCode.STORE_ERROR) from None
    if where is not None and where.exists() and not where.is_dir():
        raise die(f"--cache {where}: not a directory", ExitCode.BAD_INPUT)

    def judge(store: Store) -> None:  # the rules over every node's data replace the agents' alerts
        from fleettool.engine.evaluate import evaluate as run_rules
        from fleettool.engine.evaluate import write_alerts
        from fleettool.engine.rules import load_rules
        from fleettool.store.alerts import clear_alerts

        clear_alerts(store)
        write_alerts(store, run_rules(store, load_rules()))

    try:
        store, rep = open_fleet_incidents(
            loc,
            cache=where,
            prepare=(lambda st: load_topology(st, files)) if files.paths else None,  # beside the exported
            judge=judge if evaluate else None,
        )
    except OSError as e:
        raise die(f"{fleet} (cache {where}): cannot read the fleet: {e}", ExitCode.STORE_ERROR) from None
    with store:
        rows = list_incidents(store, state=state or None)
        pci = root_pci(store, rows)
        out = [incident_json(r, pci) for r in rows]
    if rep is not None:
        print(f"note: {rep.line(where)}", file=sys.stderr)  # type: ignore[arg-type]
    emit_incidents(out, as_json=json_out, fmt=fmt)


def register_tui(app: typer.Typer) -> None:
    @app.command()
    def tui(
        db: Annotated[
            Path, typer.Option(help="the agent's database (read-only; acks and silences write)")
        ] = DEFAULT_DB,
        fleet: FleetInsteadOpt = None,
        refresh: Annotated[float, typer.Option(min=0.1, help="seconds between refreshes")] = 10.0,
        topology: TopologyOpt = None,
        rack_label: RackLabelOpt = DEFAULT_RACK_LABEL,
    ) -> None:
        """The triage dashboard: incidents root first (Enter: members by node; l: the alerts, i: back to
        the incidents); in the alerts, worst first, Enter opens the evidence (series around the alert, its
        events, NCCL runs, burn-ins) beside its runbook; a acknowledges, s silences the node, r resolves, f
        shows the fleet grid, / filters, ? helps.

        Example: fleettool tui --db /var/lib/fleettool/fleet.duckdb
        """
        require_extra("tui", "tui")
        # what the dashboard will read is checked before the screen takes over the terminal
        files = topology_files(topology, rack_label)
        if fleet:
            with open_fleet_or_die(fleet, tables=("alerts",)) as store:
                load_topology(store, files)  # said once here; each reload of the fleet reads them again
        else:
            with open_store(db, read_only=not files.paths, create=False) as store:  # --topology: into it
                load_topology(store, files)
        from fleettool.tui.app import FleetTui
        from fleettool.tui.source import Source

        prepare = (lambda store: load_topology(store, files, quiet=True)) if fleet and files.paths else None
        FleetTui(Source(db=db, fleet=fleet, prepare=prepare), refresh_s=refresh).run()
