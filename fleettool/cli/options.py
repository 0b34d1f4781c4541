"""Options several commands share, declared once (as pip-tools' `piptools/scripts/options.py` does): a command
names its parameter with one of these and gets the same flag, help and checks as every other command.

    from fleettool.cli.options import DbReadOpt, JsonOpt

    def events(db: DbReadOpt = DEFAULT_DB, json_out: JsonOpt = False) -> None: ...

An option that means something of its own in one command (the agent's `--node` names this host, `events --node`
filters) keeps its own declaration there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

DbReadOpt = Annotated[Path, typer.Option("--db", help="DuckDB file to read (opened read-only)")]
DbOpt = Annotated[Path, typer.Option("--db", help="DuckDB file")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON instead of text")]
FORMATS = ("table", "json", "csv", "parquet")


def _format(value: str) -> str:
    if value not in FORMATS:
        raise typer.BadParameter(f"{value!r} is not a format (one of {', '.join(FORMATS)})")
    return value


FormatOpt = Annotated[
    str,
    typer.Option(
        "--format",
        callback=_format,
        help="table, json (as --json), csv, or parquet (binary: redirect it to a file)",
    ),
]
NodeFilterOpt = Annotated[str | None, typer.Option("--node", help="only this node")]
WhoOpt = Annotated[str, typer.Option("--by", help="who (default: $USER)")]
ReasonOpt = Annotated[str, typer.Option("--reason", "-m", help="why")]
FleetOpt = Annotated[str, typer.Option("--fleet", help="a directory (NFS) or s3://bucket/prefix")]
FleetInsteadOpt = Annotated[str | None, typer.Option("--fleet", help="a fleet location instead")]
RulesOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--rules",
        help="rule files or directories, added to the built-in set (a name the built-in set has is refused); "
        "with --no-builtin-rules, instead of it",
    ),
]
NoBuiltinRulesOpt = Annotated[
    bool,
    typer.Option("--no-builtin-rules", help="judge with the --rules files alone, without the built-in set"),
]
