"""`fleettool record`: this node's telemetry as a recording directory, by the agent's own loop and collectors."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fleettool.cli.agent_cmd import (
    DCGM_URL,
    RECORD_DEFAULTS,
    CollectorOpt,
    FabricExcludeOpt,
    GpusOpt,
    InjectOpt,
    NoCollectorOpt,
    SourceOpt,
    SysfsRootOpt,
    _build,
    _gpu_source,
    _selected,
)
from fleettool.cli.common import die, hostname, parse_duration
from fleettool.cli.exit_codes import ExitCode
from fleettool.collectors import registry

if TYPE_CHECKING:
    from fleettool.collectors.base import Collector


def register(app: typer.Typer) -> None:
    @app.command()
    def record(
        out: Annotated[Path, typer.Option(help="directory to write the recording into")],
        duration: Annotated[str, typer.Option(help="how long to record")] = "60s",
        node: Annotated[str, typer.Option(help="node name (default: this host)")] = "",
        interval: Annotated[str, typer.Option(help="sampling interval of the cheap gauges")] = "1s",
        source: SourceOpt = "nvml",
        gpus: GpusOpt = 1,
        inject: InjectOpt = None,
        recording: Annotated[Path | None, typer.Option(help="recording the fake source plays")] = None,
        all_tiers_every: Annotated[
            str | None, typer.Option(help="sample every tier this often (default: tiered by cost)")
        ] = None,
        collector: CollectorOpt = None,
        no_collector: NoCollectorOpt = None,
        sysfs_root: SysfsRootOpt = "/sys",
        fabric_exclude: FabricExcludeOpt = None,
    ) -> None:
        """Record telemetry as a recording directory: nvml.om.gz (OpenMetrics with timestamps, and the GPU
        inventory), kernel.log (the kernel's events as the driver's lines) and events.jsonl (fleettool's own
        events: NVML errors, agent health). Replays with `fleettool replay DIR`.

        Only the nvml collector runs unless --collector adds others (kmsg: the kernel log, found as the
        agent's `--kmsg auto` finds it; fabric: the InfiniBand/RoCE ports under --sysfs-root, their series in
        nvml.om.gz and the collector's notices in events.jsonl). When no selected collector can start (NVML cannot load, and nothing
        else was asked for) it gives up at once with exit 7 and the reason, writing nothing. With nvml
        selected, a recording that holds no GPU (NVML failing later, no GPU answering) is written all the same
        and exits 7.

        Example: fleettool record --out fixtures/h200-gemm --duration 60s
        """
        from fleettool.agent.loop import Agent, AgentConfig
        from fleettool.recording.writer import RecordingWriter

        name = node or hostname()
        ivl = parse_duration(interval, "--interval")
        secs = parse_duration(duration, "--duration")
        every = parse_duration(all_tiers_every, "--all-tiers-every") if all_tiers_every else None
        selected = _selected(collector, no_collector, defaults=RECORD_DEFAULTS)
        ccfg = registry.CollectorConfig(
            node=name,
            gpu_source=_gpu_source(source, gpus, inject, recording, False),
            interval_s=ivl,
            all_tiers_every_s=every,
            dcgm_url=DCGM_URL,
            sysfs_root=sysfs_root,
            fabric_exclude=tuple(fabric_exclude or ()),
        )
        collectors = _build(ccfg, selected)
        if out.exists() and not out.is_dir():
            raise die(f"{out}: exists and is not a directory (--out)", ExitCode.BAD_INPUT)
        made = not out.exists()
        try:  # before recording for minutes, not after
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise die(
                f"{out}: cannot create the directory: {e.strerror or e} (--out)", ExitCode.BAD_INPUT
            ) from None
        writer = RecordingWriter(out, name)
        cfg = AgentConfig(db=None, node=name, interval_s=ivl, duration_s=secs, quiet=True)
        ag = Agent(cfg, collectors, sink=writer.add)
        ag.install_signals()
        _start_or_give_up(ag, collectors, out, made)
        stats = ag.run()
        paths = writer.write()
        n = sum(len(v) for v in writer.series.values())
        print(f"recorded {n} samples and {len(writer.events)} events in {stats.ticks} ticks:")
        for p in paths:
            print(f"  {p}")
        gpu_rows = sum(len(v) for k, v in writer.series.items() if k[1] is not None)
        if "nvml" in selected and not gpu_rows:  # the agent's own health only: say so, never a quiet success
            raise die(
                f"no GPU was recorded: NVML answered for no GPU in {secs:g}s (the agent's health series and "
                f"the reason are in {out}; a node without a driver, or --collector to record without nvml)",
                ExitCode.NOT_TESTED,
            )


def _start_or_give_up(ag: Any, collectors: list[Collector], out: Path, made: bool) -> None:
    """Start the recorder's collectors (under its watchdog). When none can (NVML cannot load, a recording the
    fake source cannot play), nothing can be recorded: give up now with exit 7 and the reasons, leaving no
    directory it made, rather than wait out --duration. One that hangs starting is not given up on."""
    ag.start()
    down = [c for c in collectors if getattr(c, "reason", None)]
    ag.cfg.quiet = False
    if collectors and len(down) == len(collectors):
        ag.stop()
        ag.run()  # closes what was opened; records nothing, the loop is stopped
        if made:
            shutil.rmtree(out, ignore_errors=True)
        why = "; ".join(f"{c.id}: {c.reason}" for c in down)
        raise die(f"nothing can be recorded into {out}: {why}", ExitCode.NOT_TESTED)
    for c in down:  # the others record; this one is retried, as the agent retries it
        ag.log(f"collector {c.id} unavailable: {c.reason} (will retry)")
