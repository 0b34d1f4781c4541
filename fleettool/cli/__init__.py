"""The `fleettool` command. Importing this module must stay cheap: no duckdb, pynvml, textual or torch
at import time (a test guards it); each command imports what it needs when it runs."""

from __future__ import annotations

import typer

from fleettool.cli import (
    agent_cmd,
    alerts_cmd,
    burnin_cmd,
    fleet_cmd,
    node_cmd,
    query_cmd,
    replay_cmd,
    rules_cmd,
)
from fleettool.cli.exit_codes import EPILOG

app = typer.Typer(
    name="fleettool",
    help="Fleet telemetry and incident triage for NVIDIA GPU clusters.",
    epilog=EPILOG,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
agent_cmd.register(app)
replay_cmd.register(app)
query_cmd.register(app)
rules_cmd.register(app)
rules_cmd.register_baselines(app)
alerts_cmd.register(app)
burnin_cmd.register(app)
fleet_cmd.register(app)
fleet_cmd.register_tui(app)
node_cmd.register(app)


def main() -> None:
    app()
