"""The `fleettool` command. Importing this module must stay cheap: no duckdb, pynvml, textual or torch
at import time (a test guards it); each command imports what it needs when it runs."""

from __future__ import annotations

import importlib
import os
from typing import Annotated, Any

import typer

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


def make_app(only: str | None = None) -> typer.Typer:
    """The command line: every command, or (`only`) the one command named and the root's options."""
    a = typer.Typer(
        name="fleettool",
        help="Fleet telemetry and incident triage for NVIDIA GPU clusters.",
        epilog=EPILOG,
        no_args_is_help=True,
        add_completion=True,  # --install-completion / --show-completion [bash|zsh|fish|powershell]
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )
    a.callback()(_root)
    for module, register, names in COMMANDS:
        if only is None or only in names:
            getattr(importlib.import_module(f"fleettool.cli.{module}"), register)(a)
    return a


_full: typer.Typer | None = None


def _app_for(args: list[str]) -> typer.Typer:
    """The app `fleettool ARGS` needs: only the command named first, when it is one of COMMANDS; `app` itself
    where it was built already (code that added its own commands to it gets them run)."""
    if _full is not None:
        return _full
    known = bool(args) and any(args[0] in names for _, _, names in COMMANDS)
    if known and not os.environ.get("_FLEETTOOL_COMPLETE"):
        return make_app(args[0])
    return make_app()


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

    import typer.main
    from typer._click import exceptions as cx  # typer vendors click (pyproject pins a release that does)

    # `fleettool rules list | head` ends quietly with 141; SIGPIPE itself stays ignored, so a client of the
    # agent that hangs up early cannot kill it (fleettool/cli/stdout_pipe.py)
    guard_stdout()
    help_errors = tuple(c for c in (getattr(cx, "NoArgsIsHelpError", None),) if c is not None)
    debug = os.environ.get("FLEETTOOL_DEBUG", "") not in ("", "0")
    try:
        cmd = typer.main.get_command(_app_for(sys.argv[1:]))
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
