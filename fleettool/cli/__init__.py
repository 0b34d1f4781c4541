"""The `fleettool` command. Importing this module must stay cheap: no duckdb, pynvml, textual or torch
at import time (a test guards it); each command imports what it needs when it runs."""

from __future__ import annotations

import importlib
import os
from gettext import gettext
from typing import Annotated, Any

import typer
import typer.main
from typer import _click as click  # typer vendors click (pyproject pins a release that does)
from typer._click.utils import make_default_short_help
from typer.core import TyperGroup

from fleettool import __version__
from fleettool.cli.exit_codes import EPILOG, ExitCode
from fleettool.cli.stdout_pipe import flush_stdout, guard_stdout
from fleettool.cli.typer_fast import install as _fast_options

_fast_options()  # option values without pydantic where the answer is certain (fleettool/cli/typer_fast.py)

# Each command module, the function that registers its commands and the names it registers, in the order of
# `fleettool --help`. `fleettool NAME ...` imports and builds only NAME's module (its start-up pays for no
# other command's imports and options); `--help`, completion and anything not named here get them all.
# tests/test_cli_startup.py checks this table against what the functions register.
COMMANDS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("agent_cmd", "register", ("agent",)),
    ("record_cmd", "register", ("record",)),
    ("replay_cmd", "register", ("replay",)),
    ("demo_cmd", "register", ("demo",)),
    ("query_cmd", "register", ("events", "nccl", "gpus")),
    ("rules_cmd", "register", ("rules",)),
    ("rules_cmd", "register_baselines", ("baselines",)),
    ("alerts_cmd", "register", ("alerts", "silence")),
    ("incidents_cmd", "register", ("incidents",)),
    ("burnin_cmd", "register", ("burnin",)),
    ("fleet_cmd", "register", ("export", "fleet")),
    ("fleet_cmd", "register_tui", ("tui",)),
    ("node_cmd", "register", ("node", "report")),
    ("remediate_cmd", "register", ("remediate",)),
    ("store_cmd", "register", ("store",)),
)

# What `fleettool --help` lists, without importing or building any command: each name and the first sentence
# of its help (click shortens it to the width as it would the command's own help), in typer's order (commands
# as registered, then groups). tests/test_cli_startup.py checks it against the built commands at every width.
LISTING: tuple[tuple[str, str], ...] = (
    ("agent", "Collect telemetry into the database until SIGTERM (which flushes first)."),
    (
        "record",
        "Record telemetry as a recording directory: nvml.om.gz (OpenMetrics with timestamps, and the GPU "
        "inventory), kernel.log (the kernel's events as the driver's lines) and events.jsonl (fleettool's own "
        "events: NVML errors, agent health).",
    ),
    ("replay", "Ingest a recording into the store in the recording's own time, and report what it holds."),
    ("demo", "Replay the bundled recording into a store and show what it found."),
    ("events", "List events (XID lines, NVML errors, agent health changes), newest first."),
    (
        "nccl",
        "List nccl-tests runs: op, ranks, nodes, the footer's average busbw and the peak busbw, and how many runs "
        "of the same shape (op, nodes, ranks per node, largest message, GPU model) the straggler rule compares "
        'each with ("no comparable peers" under three of a shape: such a run is never judged).',
    ),
    ("gpus", "List the GPUs the store knows (node, index, UUID, PCI id, model, driver)."),
    (
        "baselines",
        "Fleet baselines per (SKU, driver): median and MAD of loaded clocks, tensor activity, power, NCCL busbw "
        "and burn-in figures.",
    ),
    (
        "burnin",
        "Stress and judge a node: GEMM per dtype (TFLOP/s, silent-data-corruption check within and across GPUs), "
        "HBM copy bandwidth, all-reduce busbw, DCGM diag where installed; telemetry during each test tells power "
        "capping (normal) from thermal or HW slowdown; a GPU another process is using is named (PIDs).",
    ),
    (
        "export",
        "Export the store as Parquet segments (zstd), partitioned by date and node, whole hours only; a segment "
        "is visible whole or not at all and a crash mid-export loses nothing (the next export writes the same "
        "hours again).",
    ),
    (
        "tui",
        "The triage dashboard: incidents root first (Enter: members by node; l: the alerts, i: back to the "
        "incidents); in the alerts, worst first, Enter opens the evidence (series around the alert, its events, "
        "NCCL runs, burn-ins) beside its runbook; a acknowledges, s silences the node, r resolves, f shows the "
        "fleet grid, / filters, ? helps.",
    ),
    (
        "node",
        "A node's lifecycle: healthy -> suspect -> cordoned -> in-repair -> burn-in -> healthy, or -> rma.",
    ),
    (
        "report",
        "Fleet statistics: availability per node and fleet, MTBF, incidents by category, and the interruption "
        "timeline (overlapping incidents of a node merged).",
    ),
    (
        "remediate",
        "Bring a node (or one GPU) back: reset -> reboot -> power-cycle -> rma, each rung closed only by a proof "
        "(recovery action None, no new XID for --quiet, a per-GPU burn-in at the floors, NVLink links back).",
    ),
    ("rules", "Inspect, lint, test and export the alert rules."),
    (
        "alerts",
        "List alerts, firing first, then worst and newest first, with their silences and acknowledgements.",
    ),
    ("silence", "Mute matching alerts until a time."),
    (
        "incidents",
        "List incidents, causes first: each fault once, with the alerts it explains counted under it.",
    ),
    ("fleet", "Fleet-wide views over exported segments."),
    ("store", "Check a store, and salvage a damaged one."),
)


def _version(value: bool) -> None:
    if value:
        print(f"fleettool {__version__}")
        raise typer.Exit(0)


def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="print the version and exit"),
    ] = False,
) -> None:
    """Fleet telemetry and incident triage for NVIDIA GPU clusters."""


def _typer(cls: type[TyperGroup] | None = None) -> typer.Typer:
    a = typer.Typer(
        name="fleettool",
        help="Fleet telemetry and incident triage for NVIDIA GPU clusters.",
        epilog=EPILOG,
        no_args_is_help=True,
        add_completion=True,  # --install-completion / --show-completion [bash|zsh|fish|powershell]
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        cls=cls,
    )
    a.callback()(_root)
    return a


def make_app(only: str | None = None) -> typer.Typer:
    """The command line: every command, or (`only`) the one command named and the root's options."""
    a = _typer()
    for module, register, names in COMMANDS:
        if only is None or only in names:
            getattr(importlib.import_module(f"fleettool.cli.{module}"), register)(a)
    return a


class _LazyGroup(TyperGroup):
    """The root command `main` runs: it lists the commands from LISTING and builds a command (imports its
    module, reads its options) only when it is looked up: run, its help asked, completed. A name that is none
    of COMMANDS builds them all, so that typer's "Did you mean" sees every name."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name, _ in LISTING]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            known = any(cmd_name in names for _, _, names in COMMANDS)
            built = typer.main.get_command(make_app(cmd_name if known else None))
            for name, cmd in getattr(built, "commands", {}).items():
                self.commands.setdefault(name, cmd)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """TyperGroup's listing, from LISTING (the same lines: tests/test_cli_startup.py)."""
        limit = formatter.width - 6 - max(len(name) for name, _ in LISTING)
        with formatter.section(gettext("Commands")):
            formatter.write_dl([(name, make_default_short_help(text, limit)) for name, text in LISTING])


_full: typer.Typer | None = None


def _root_command() -> click.Command:
    """The command `main` runs: `app` itself where it was built already (code that added its own commands to
    it gets them run), every command for shell completion, else the lazy root."""
    if _full is not None:
        return typer.main.get_command(_full)
    if os.environ.get("_FLEETTOOL_COMPLETE"):
        return typer.main.get_command(make_app())
    return typer.main.get_command(_typer(_LazyGroup))


def __getattr__(name: str) -> Any:
    """`fleettool.cli.app`, every command, built on first use (tests and tooling; `main` builds its own)."""
    global _full
    if name == "app":
        if _full is None:
            _full = make_app()
        return _full
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _usage_line(err: Exception) -> str:
    """A click usage error as one line: the command, what was wrong, where help is."""
    ctx = getattr(err, "ctx", None)
    where = ctx.command_path if ctx is not None else "fleettool"
    sub = where.removeprefix("fleettool").strip()
    fmt = getattr(err, "format_message", None)
    msg = " ".join(str(fmt() if fmt else err).split()).rstrip(".")
    return f"fleettool: {sub + ': ' if sub else ''}{msg} (see '{where} --help')"


def main() -> None:
    """Run the command line. Every way out is a documented exit code with at most one line on stderr: usage
    errors are one line (exit 2), commands `die` with their own line, and an unexpected exception, a bug,
    prints one line and exits 70 (FLEETTOOL_DEBUG=1 re-raises it for the traceback)."""
    import sys

    from typer._click import exceptions as cx  # typer vendors click (pyproject pins a release that does)

    # `fleettool rules list | head` ends quietly with 141; SIGPIPE itself stays ignored, so a client of the
    # agent that hangs up early cannot kill it (fleettool/cli/stdout_pipe.py)
    guard_stdout()
    help_errors = tuple(c for c in (getattr(cx, "NoArgsIsHelpError", None),) if c is not None)
    debug = os.environ.get("FLEETTOOL_DEBUG", "") not in ("", "0")
    try:
        cmd = _root_command()
        rv = cmd.main(prog_name="fleettool", standalone_mode=False)
    except help_errors as e:  # `fleettool` or `fleettool rules` alone: the help, as before
        e.show()
        sys.exit(e.exit_code)
    except cx.UsageError as e:
        print(_usage_line(e), file=sys.stderr)
        sys.exit(e.exit_code)
    except cx.ClickException as e:
        print(f"fleettool: {' '.join(e.format_message().split())}", file=sys.stderr)
        sys.exit(e.exit_code)
    except typer.Abort:
        print("fleettool: aborted", file=sys.stderr)
        sys.exit(130)
    except Exception as e:  # the last line of defence: a bug must not reach the user as a traceback
        if debug:
            raise
        msg = " ".join(str(e).split())[:300]
        print(
            f"fleettool: internal error: {type(e).__name__}: {msg} "
            "(set FLEETTOOL_DEBUG=1 for the traceback; please report it)",
            file=sys.stderr,
        )
        sys.exit(int(ExitCode.INTERNAL))
    flush_stdout()
    sys.exit(rv if isinstance(rv, int) else 0)
