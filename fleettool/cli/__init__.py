"""The `fleettool` command. Importing this module must stay cheap: no duckdb, pynvml, textual or torch
at import time (a test guards it); each command imports what it needs when it runs."""

from __future__ import annotations

from typing import Annotated

import typer

from fleettool import __version__
from fleettool.cli import (
    agent_cmd,
    alerts_cmd,
    burnin_cmd,
    demo_cmd,
    fleet_cmd,
    incidents_cmd,
    node_cmd,
    query_cmd,
    record_cmd,
    remediate_cmd,
    replay_cmd,
    rules_cmd,
    store_cmd,
)
from fleettool.cli.exit_codes import EPILOG, ExitCode
from fleettool.cli.stdout_pipe import flush_stdout, guard_stdout
from fleettool.cli.typer_fast import install as _fast_options

_fast_options()  # option values without pydantic where the answer is certain (fleettool/cli/typer_fast.py)

app = typer.Typer(
    name="fleettool",
    help="Fleet telemetry and incident triage for NVIDIA GPU clusters.",
    epilog=EPILOG,
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion [bash|zsh|fish|powershell]
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        print(f"fleettool {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="print the version and exit"),
    ] = False,
) -> None:
    """Fleet telemetry and incident triage for NVIDIA GPU clusters."""


agent_cmd.register(app)
record_cmd.register(app)
replay_cmd.register(app)
demo_cmd.register(app)
query_cmd.register(app)
rules_cmd.register(app)
rules_cmd.register_baselines(app)
alerts_cmd.register(app)
incidents_cmd.register(app)
burnin_cmd.register(app)
fleet_cmd.register(app)
fleet_cmd.register_tui(app)
node_cmd.register(app)
remediate_cmd.register(app)
store_cmd.register(app)


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
    import os
    import sys

    import typer.main
    from typer._click import exceptions as cx  # typer vendors click (pyproject pins a release that does)

    # `fleettool rules list | head` ends quietly with 141; SIGPIPE itself stays ignored, so a client of the
    # agent that hangs up early cannot kill it (fleettool/cli/stdout_pipe.py)
    guard_stdout()
    help_errors = tuple(c for c in (getattr(cx, "NoArgsIsHelpError", None),) if c is not None)
    debug = os.environ.get("FLEETTOOL_DEBUG", "") not in ("", "0")
    try:
        rv = typer.main.get_command(app).main(prog_name="fleettool", standalone_mode=False)
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
