"""`fleettool store check` and `fleettool store salvage`: what of a damaged store still reads, and a fresh store
holding it (README, "When the store is damaged")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fleettool.cli.common import DEFAULT_DB, die, store_exit
from fleettool.cli.exit_codes import ExitCode
from fleettool.cli.options import DbOpt, JsonOpt

if TYPE_CHECKING:
    from fleettool.store.salvage import TableCheck

store_app = typer.Typer(help="Check a store, and salvage a damaged one.", no_args_is_help=True)


def _precheck(db: Path) -> None:
    from fleettool.store.errors import StoreError, precheck

    try:
        precheck(str(db), read_only=True)
    except StoreError as e:
        raise store_exit(e) from None


def _ranges(t: TableCheck) -> str:
    shown = ", ".join(f"{lo}-{hi}" for lo, hi, _ in t.lost[:4]) + (" ..." if len(t.lost) > 4 else "")
    return f"rows {shown}: {t.lost[0][2]}" if t.lost else ""


def _describe(t: TableCheck, verb_ok: str, verb_lost: str) -> str:
    if t.error is not None:
        return f"{verb_lost} {t.name}: cannot be read ({t.error})"
    if t.ok:
        return f"{verb_ok} {t.name}: {t.rows} rows"
    lost = (t.rows or 0) - t.readable
    return f"{verb_lost} {t.name}: {lost} of {t.rows} rows ({_ranges(t)}); {verb_ok} {t.readable}"


def _table_json(t: TableCheck) -> dict[str, Any]:
    return {
        "table": t.name,
        "rows": t.rows,
        "readable": t.readable,
        "ok": t.ok,
        "error": t.error,
        "lost_ranges": [{"from_rowid": lo, "to_rowid": hi, "error": why} for lo, hi, why in t.lost],
    }


@store_app.command("check")
def check_cmd(db: DbOpt = DEFAULT_DB, json_out: JsonOpt = False) -> None:
    """Read every table of the store, every column of every row, and say which tables read whole and how many
    rows each has. Only reads the file.

    Exit 0: every table reads; 9: the file is damaged (the tables or row ranges that do not read are listed;
    `fleettool store salvage` copies what does into a fresh store).

    Example: fleettool store check --db /var/lib/fleettool/fleet.duckdb
    """
    from fleettool.store.errors import StoreError
    from fleettool.store.salvage import check

    _precheck(db)
    try:
        res = check(db)
    except StoreError as e:
        raise store_exit(e) from None
    if json_out:
        out = {
            "path": str(db),
            "ok": res.ok,
            "error": res.error,
            "tables": [_table_json(t) for t in res.tables],
        }
        print(json.dumps(out, indent=2))
    else:
        for t in res.tables:
            print(_describe(t, "readable", "DAMAGED"))
    if res.error is not None:
        raise die(
            f"{db}: the database is damaged: the file cannot be opened, its header or catalog is damaged "
            f"({res.error}); no table can be read; "
            f"`fleettool store salvage --db {db}` keeps the file and starts a fresh store",
            ExitCode.STORE_DAMAGED,
        )
    bad = [t.name for t in res.tables if not t.ok]
    if bad:
        raise die(
            f"{db}: the database is damaged: {len(bad)} of {len(res.tables)} tables do not read whole "
            f"({', '.join(bad)}); `fleettool store salvage --db {db}` copies what reads into a fresh store",
            ExitCode.STORE_DAMAGED,
        )


@store_app.command("salvage")
def salvage_cmd(
    db: DbOpt = DEFAULT_DB,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="write the fresh store here and leave the damaged file where it is (default: the fresh store "
            "takes --db's place, the damaged file is renamed <name>.damaged-<UTC time> beside it)",
        ),
    ] = None,
) -> None:
    """Copy every table, every row range that still reads, of a damaged store into a fresh store, and keep the
    damaged file (never deleted). Prints what was saved and what was lost. Stop the agent first.

    Exit 0: everything was saved; 1: the fresh store holds what could be read and some rows were lost (listed).

    Example: fleettool store salvage --db /var/lib/fleettool/fleet.duckdb
    """
    from fleettool.store.errors import StoreError
    from fleettool.store.salvage import check, salvage

    _precheck(db)
    if out is not None and (out.exists() or not out.parent.is_dir()):
        why = "already exists" if out.exists() else f"is in a directory that does not exist ({out.parent})"
        raise typer.BadParameter(f"{out} {why}: salvage writes a new store", param_hint="--out")
    try:
        first = check(db)  # the file is not locked by a running agent (StoreLocked) before it is renamed
        if first.error is None and all(t.ok for t in first.tables):
            print(f"{db}: healthy: every table reads whole; nothing to salvage (nothing renamed or written)")
            return
        res = salvage(db, out)
    except StoreError as e:
        raise store_exit(e) from None
    for t in res.check.tables:
        print(_describe(t, "saved", "LOST"))
    if res.check.error is not None:
        print(
            f"LOST everything: the file cannot be opened, its header or catalog is damaged ({res.check.error})"
        )
    print(f"fresh store: {res.out}; the damaged file is kept as {res.kept}")
    lost = res.check.error is not None or any(not t.ok for t in res.check.tables)
    if lost:
        raise typer.Exit(int(ExitCode.FAILURE))


def register(app: typer.Typer) -> None:
    app.add_typer(store_app, name="store")
