"""`fleettool agent` (the collection loop) and `fleettool record` (the same loop, written as a recording)."""

from __future__ import annotations

import errno
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fleettool.cli.common import DEFAULT_DB, die, hostname, open_store, parse_duration, parse_size_option
from fleettool.cli.exit_codes import ExitCode
from fleettool.cli.extras import require_extra
from fleettool.cli.options import NoBuiltinRulesOpt, RulesOpt
from fleettool.cli.topology_opts import (
    DEFAULT_RACK_LABEL,
    RackLabelOpt,
    TopologyOpt,
    agent_topology,
    fake_fabric_from,
    topology_files,
)
from fleettool.collectors import registry

if TYPE_CHECKING:
    from fleettool.collectors.base import Collector
    from fleettool.export.web_config import WebConfig
    from fleettool.sources.base import GpuSource

SourceOpt = Annotated[
    str, typer.Option("--source", help="nvml (live), or fake (recorded H200 data, no GPU needed)")
]
GpusOpt = Annotated[int, typer.Option("--gpus", min=1, help="GPUs the fake source pretends to have")]
_NAMES = ", ".join(registry.names())  # the flags' help comes from the registry, as the names they accept do
CollectorOpt = Annotated[
    list[str] | None,
    typer.Option("--collector", metavar="NAME", help=f"enable a collector by id (repeatable): {_NAMES}"),
]
NoCollectorOpt = Annotated[
    list[str] | None,
    typer.Option("--no-collector", metavar="NAME", help=f"disable a collector by id (repeatable): {_NAMES}"),
]
DCGM_URL = "http://localhost:9400/metrics"
SysfsRootOpt = Annotated[
    str,
    typer.Option(
        "--sysfs-root",
        metavar="DIR",
        help="stands in for /sys (node_exporter's --path.sysfs): the fabric collector reads the InfiniBand/RoCE "
        "ports under DIR/class/infiniband",
    ),
]
FabricExcludeOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--fabric-exclude",
        metavar="PATTERN",
        help="ports the fabric collector skips (repeatable; fnmatch on DEVICE or DEVICE/PORT, e.g. mlx5_bond_* "
        "for a management NIC); each is named once in an event",
    ),
]
RECORD_DEFAULTS = ("nvml",)  # what `record` runs without --collector: the recording is the GPUs' series
InjectOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--inject", help="fault for the fake source, e.g. xid:79@gpu=3, thermal@gpu=1,after=30 (repeatable)"
    ),
]


def _gpu_source(
    source: str, gpus: int, inject: list[str] | None, recording: Path | None, fake_costs: bool
) -> GpuSource:
    """The GPU source the NVML collector reads: live NVML, or the fake playing a recording with faults."""
    if source == "nvml":
        if inject:
            raise typer.BadParameter("--inject needs --source fake", param_hint="--inject")
        from fleettool.sources.nvml import NvmlSource

        return NvmlSource()
    if source != "fake":
        raise typer.BadParameter(f"unknown source {source!r} (nvml, fake)", param_hint="--source")
    from fleettool.sources.fake import FakeSource, parse_injection

    try:
        faults = [parse_injection(s) for s in inject or []]
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--inject") from None
    for spec, f in zip(inject or [], faults, strict=True):
        if f.gpu is not None and not 0 <= f.gpu < gpus:
            raise typer.BadParameter(
                f"{spec!r}: there is no GPU {f.gpu} (--gpus {gpus}: GPUs 0 to {gpus - 1})",
                param_hint="--inject",
            )
    if recording is not None and not recording.is_file():
        what = "is a directory (give its nvml.om.gz)" if recording.is_dir() else "no such file"
        raise die(f"{recording}: {what} (--recording)", ExitCode.BAD_INPUT)
    return FakeSource(gpus=gpus, recording=recording, inject=faults, costs=fake_costs)


def _web_config(path: Path | None) -> WebConfig | None:
    """The metrics port's TLS and auth; a file that cannot be used stops the start (exit 3, file:line)."""
    if path is None:
        return None
    from fleettool.export.metrics_server import PROBE_PATHS
    from fleettool.export.web_config import WebConfigError, load

    try:
        return load(path, PROBE_PATHS)
    except WebConfigError as e:
        raise die(f"{e} (--web-config-file)", ExitCode.BAD_INPUT) from None


def _selected(
    on: list[str] | None, off: list[str] | None, defaults: tuple[str, ...] | None = None
) -> list[str]:
    """The collectors --collector / --no-collector pick, by registry name (a usage error names the flag)."""
    for given, hint in ((on, "--collector"), (off, "--no-collector")):
        try:
            registry.check_names(given or [])
        except registry.UnknownCollector as e:
            raise typer.BadParameter(str(e), param_hint=hint) from None
    if both := sorted(set(on or []) & set(off or [])):
        raise typer.BadParameter(f"{', '.join(both)} also given to --no-collector", param_hint="--collector")
    return registry.select(on or [], off or [], defaults)


def _build(cfg: registry.CollectorConfig, selected: list[str]) -> list[Collector]:
    try:
        return registry.build(cfg, selected)
    except registry.CollectorConfigError as e:
        raise die(str(e), ExitCode.BAD_INPUT) from None


def register(app: typer.Typer) -> None:
    @app.command()
    def agent(
        db: Annotated[Path, typer.Option(help="DuckDB file the agent writes")] = DEFAULT_DB,
        node: Annotated[str, typer.Option(help="node name (default: this host)")] = "",
        interval: Annotated[str, typer.Option(help="sampling interval of the cheap gauges")] = "1s",
        flush: Annotated[
            str, typer.Option(help="how often buffered rows go to the database (events at once)")
        ] = "60s",
        max_buffer: Annotated[
            str,
            typer.Option(
                help="memory for rows held between flushes; past it (a locked or full disk) the oldest samples "
                "are dropped and counted in agent_dropped_rows_total"
            ),
        ] = "64MiB",
        watchdog: Annotated[
            str, typer.Option(help="a collection slower than this marks the collector hung")
        ] = "5s",
        source: SourceOpt = "nvml",
        gpus: GpusOpt = 8,
        inject: InjectOpt = None,
        recording: Annotated[Path | None, typer.Option(help="recording the fake source plays")] = None,
        fake_costs: Annotated[
            bool, typer.Option(help="fake source spins for the measured H200 cost of each call")
        ] = False,
        collector: CollectorOpt = None,
        no_collector: NoCollectorOpt = None,
        expect_gpus: Annotated[
            int | None,
            typer.Option(
                min=1,
                help="GPUs this node should have (fleettool_gpus_expected; NodeMissingGpus fires below it). "
                "Default: the larger of what NVML reports at start and the GPUs this node has in the store's "
                "inventory, so a GPU that fell off before a restart is still missed; give it to lower the count "
                "after taking GPUs out on purpose",
            ),
        ] = None,
        kmsg: Annotated[
            str,
            typer.Option(
                help="kernel log: auto (/dev/kmsg, else journalctl), kmsg, journal, off, or a path read by what it is: "
                "the kernel log device, a FIFO or a log file (a missing path is refused)"
            ),
        ] = "auto",
        dcgm_exporter: Annotated[
            str, typer.Option(help="dcgm-exporter URL to scrape every 10 s, or off")
        ] = DCGM_URL,
        sysfs_root: SysfsRootOpt = "/sys",
        fabric_exclude: FabricExcludeOpt = None,
        rules: RulesOpt = None,
        no_builtin_rules: NoBuiltinRulesOpt = False,
        no_rules: Annotated[
            bool, typer.Option("--no-rules", help="collect only; do not evaluate rules")
        ] = False,
        export_to: Annotated[
            str | None,
            typer.Option(help="fleet location (directory or s3://...) for hourly Parquet segments"),
        ] = None,
        export_every: Annotated[str, typer.Option(help="how often to export")] = "1h",
        raw_retention: Annotated[
            str, typer.Option(help="keep raw samples this long, then 1-minute rollups")
        ] = "7d",
        rollup_retention: Annotated[str, typer.Option(help="keep 1-minute rollups this long")] = "400d",
        metrics_port: Annotated[
            int | None,
            typer.Option(
                min=1,
                max=65535,
                help="serve Prometheus /metrics on this port, and the probes /healthz (the loop is going round) "
                "and /readyz (first collection done, the store writable or the rows buffered within --max-buffer)",
            ),
        ] = None,
        metrics_addr: Annotated[
            str,
            typer.Option(help="address for /metrics (loopback unless given; 0.0.0.0 for every interface)"),
        ] = "127.0.0.1",
        web_config_file: Annotated[
            Path | None,
            typer.Option(
                help="TLS and basic auth for the metrics port, in the format of the Prometheus exporters' "
                "--web.config.file (tls_server_config, basic_auth_users with bcrypt hashes); /healthz and "
                "/readyz are answered without auth",
            ),
        ] = None,
        duration: Annotated[
            str | None, typer.Option(help="stop after this long (default: run until SIGTERM)")
        ] = None,
        quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
        topology: TopologyOpt = None,
        rack_label: RackLabelOpt = DEFAULT_RACK_LABEL,
        jobs_from: Annotated[
            str | None,
            typer.Option(
                help="sacct: store this cluster's jobs from `sacct --parsable2 ... -S now-1hours -a` every 5 "
                "minutes (needs sacct on PATH; a failing sacct is one warning line and counted, never fatal)"
            ),
        ] = None,
        topology_from: Annotated[
            str | None,
            typer.Option(
                help="kubectl: store the nodes' topology labels from `kubectl get nodes -o json` every "
                "10 minutes (needs kubectl on PATH)"
            ),
        ] = None,
        node_condition: Annotated[
            bool | None,
            typer.Option(
                "--node-condition/--no-node-condition",
                help="set this node's GpuHealthy condition through the Kubernetes API (default: on in a pod "
                "with a service-account token, off elsewhere; asked for without one: a warning, never fatal)",
            ),
        ] = None,
        fake_fabric: Annotated[
            Path | None,
            typer.Option(
                help="with --source fake: the NVLink fabric info the fake reports (a JSON file: "
                "clusterUuid, cliqueId, state, status, as nvmlDeviceGetGpuFabricInfoV gives them)"
            ),
        ] = None,
    ) -> None:
        """Collect telemetry into the database until SIGTERM (which flushes first).

        Without a GPU or driver the agent keeps running and says so in its health samples
        (agent_nvml_available=0, agent_collector_up{collector=nvml}=0).

        Example: fleettool agent --db /var/lib/fleettool/fleet.duckdb --metrics-port 9402
        """
        from fleettool.agent.loop import Agent, AgentConfig
        from fleettool.store.kmsg_cursor import this_boot_resume

        # Start-up checks everything the run needs and fails at once, in one line, rather than collecting
        # into nothing: numbers, the database (created, or fleettool's), the fleet location, the port.
        name = node or hostname()
        ivl = parse_duration(interval, "--interval")
        cfg = AgentConfig(
            db=db,
            node=name,
            interval_s=ivl,
            flush_s=parse_duration(flush, "--flush"),
            max_buffer_bytes=_buffer_size(max_buffer),
            watchdog_s=parse_duration(watchdog, "--watchdog"),
            raw_keep_s=parse_duration(raw_retention, "--raw-retention"),
            rollup_keep_s=parse_duration(rollup_retention, "--rollup-retention"),
            duration_s=parse_duration(duration, "--duration") if duration else None,
            quiet=quiet,
            export_to=export_to,
            export_every_s=parse_duration(export_every, "--export-every"),
        )
        selected = _selected(collector, no_collector)
        ccfg = registry.CollectorConfig(
            node=name,
            gpu_source=_gpu_source(source, gpus, inject, recording, fake_costs),
            interval_s=ivl,
            expected_gpus=expect_gpus,
            known_gpus=0 if expect_gpus is not None else _known_gpus(db, name),
            kmsg=kmsg,
            dcgm_url=dcgm_exporter,
            sysfs_root=sysfs_root,
            fabric_exclude=tuple(fabric_exclude or ()),
            kmsg_resume=this_boot_resume(db, name) if kmsg != "off" and "kmsg" in selected else None,
        )
        collectors = _build(ccfg, selected)  # a --kmsg path that is missing is refused here
        topo = agent_topology(
            name, topology_files(topology, rack_label), jobs_from, topology_from, ccfg.gpu_source
        )
        if fake_fabric is not None:
            fake_fabric_from(ccfg.gpu_source, fake_fabric)
        scheduler = None
        if not no_rules:
            from fleettool.cli.rules_cmd import _load
            from fleettool.engine.incremental import RuleScheduler

            scheduler = RuleScheduler(_load(rules, no_builtin_rules))
        ag = Agent(cfg, collectors, scheduler=scheduler, topology=topo)
        topo.log = ag.log
        from fleettool.agent.node_condition import from_option

        try:  # its own thread, started with the loop: a hung API server never holds up collection
            ag.node_condition = from_option(node_condition, name, lambda: list(ag.open_alerts))
        except ValueError as e:  # asked for where no API is reachable: collection goes on, and says why not
            ag.log(str(e))
            ag._event(ag.clock(), str(e), "node-condition")
        web = _web_config(web_config_file)
        # before the port answers: a probe that passes means SIGTERM flushes and stops (a SIGTERM in the moment
        # between the port's first answer and the loop's start killed the agent unflushed, status -15)
        ag.install_signals()
        if metrics_port is not None:
            from fleettool.agent.health import liveness, readiness
            from fleettool.export.metrics_server import AgentMetrics, serve

            try:  # bound now, before the loop: a port in use stops the start, not the 3 a.m. scrape
                serve(
                    metrics_port,
                    metrics_addr,
                    AgentMetrics(
                        name,
                        lambda: dict(ag.latest),
                        lambda: dict(ag.event_counts),
                        lambda: list(ag.open_alerts),
                        lambda: dict(ag.gpus),
                        lambda: dict(ag.incidents),
                        lambda: dict(ag.remediations),
                    ),
                    {"/healthz": lambda: liveness(ag), "/readyz": lambda: readiness(ag)},
                    web=web,
                )
            except OSError as e:
                why = (
                    "is in use (another agent?)"
                    if e.errno == errno.EADDRINUSE
                    else f"cannot be bound: {e.strerror or e}"
                )
                raise die(
                    f"{metrics_addr}:{metrics_port} {why} (--metrics-port)", ExitCode.UNAVAILABLE
                ) from None
        if export_to:
            require_extra("fleet", "agent --export-to")
            from fleettool.fleet.location import open_location

            try:
                open_location(export_to)
            except (OSError, ValueError) as e:
                msg = f"{export_to}: cannot use as a fleet location: {getattr(e, 'strerror', None) or e}"
                raise die(f"{msg} (--export-to)", ExitCode.STORE_ERROR) from None
        with open_store(db, read_only=False):  # creates the store, or refuses a file that is not ours
            pass
        if ag.node_condition is not None:
            ag.node_condition.start()
        stats = ag.run()
        if not quiet:
            print(
                f"fleettool agent: stopped after {stats.ticks} ticks; {stats.flushed_rows} rows in {stats.flushes} flushes "
                f"({stats.urgent_flushes} at once for events), {stats.flush_failures} failed flushes, "
                f"{stats.dropped_rows} rows dropped (buffer full)",
                file=sys.stderr,
            )
        if stats.unsaved_rows:
            raise die(
                f"{db}: {stats.unsaved_rows} rows could not be saved at exit: {stats.last_flush_error}",
                ExitCode.STORE_LOCKED if "locked" in (stats.last_flush_error or "") else ExitCode.STORE_ERROR,
            )


def _known_gpus(db: Path, node: str) -> int:
    """How many GPUs (by index) the store's inventory has for this node; 0 when there is no store yet or it
    cannot be read now (the agent's own open, later, reports why)."""
    import duckdb

    from fleettool.store import Store, StoreError, precheck

    try:
        precheck(str(db), read_only=True)
        with Store(db, read_only=True, wait_s=2.0) as st:
            n = st.scalar("SELECT count(DISTINCT gpu) FROM gpus WHERE node = ? AND gpu IS NOT NULL", [node])
    except (StoreError, duckdb.Error):  # a damaged inventory too: the agent's own open says what is wrong
        return 0
    return int(n or 0)


def _buffer_size(text: str) -> int:
    """--max-buffer as bytes: at least 1 MiB (a usage error, exit 2, otherwise)."""
    return parse_size_option(text, "--max-buffer", minimum=1 << 20, example="64MiB, 256M")
