"""Helpers shared by commands: the default database path, store errors -> exit codes, durations, external
tools. Every failure leaves through `die`: one line on stderr, `fleettool: <what>: <why>`, and a documented code."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from fleettool.cli.exit_codes import ExitCode

if TYPE_CHECKING:
    from fleettool.store import Store

DEFAULT_DB = Path(os.environ.get("FLEETTOOL_DB", "fleettool.duckdb"))


def hostname() -> str:
    import socket  # here: a read command needs no network module (~4 ms of its start-up)

    return socket.gethostname().split(".")[0]


def one_line(text: str) -> str:
    """A message as one line (a multi-line error from a library must not spill over several)."""
    return " ".join(str(text).split())


def die(msg: str, code: ExitCode) -> typer.Exit:
    print(f"fleettool: {one_line(msg)}", file=sys.stderr)
    return typer.Exit(int(code))


def store_exit(err: Exception) -> typer.Exit:
    """A StoreError as its documented exit: 3 no such database (a missing path, like any other), 4 locked,
    5 not fleettool's, 6 cannot open or write, 9 damaged."""
    from fleettool.store.errors import NoSuchStore, StoreCorrupt, StoreDamaged, StoreLocked

    if isinstance(err, StoreDamaged):
        return die(str(err), ExitCode.STORE_DAMAGED)
    if isinstance(err, NoSuchStore):
        return die(str(err), ExitCode.BAD_INPUT)
    if isinstance(err, StoreLocked):
        return die(str(err), ExitCode.STORE_LOCKED)
    if isinstance(err, StoreCorrupt):
        return die(str(err), ExitCode.STORE_CORRUPT)
    return die(str(err), ExitCode.STORE_ERROR)


@contextmanager
def open_store(
    path: Path, *, read_only: bool, create: bool = True, say_created: bool = False, sql_only: bool = False
) -> Iterator[Store]:
    """The store for one command. A reader never creates the file; create=False for a writer that needs an
    existing store (an ack needs its alert); say_created for a writer whose new store a user may not expect
    (a lifecycle move, a burn-in: a note on stderr names the file). I/O errors while the command works on it
    (disk full, the file vanished) are exit 6; any other DuckDB error is a bug and reaches the internal-error
    handler. sql_only: the command only runs SQL and fetches rows (a read command: fleettool/store/connection.py
    `connect`)."""
    from fleettool.store.errors import StoreError, precheck

    new = not read_only and create and not path.exists()

    try:
        precheck(
            str(path), read_only=read_only, create=create
        )  # before loading duckdb: a bad path fails fast
    except StoreError as e:
        raise store_exit(e) from None
    from fleettool.store.connection import engine  # duckdb's errors, without its Python layer
    from fleettool.store.db import Store

    try:
        store = Store(path, read_only=read_only, create=create, sql_only=sql_only)
    except StoreError as e:
        raise store_exit(e) from None
    try:
        yield store
    except (engine.IOException, engine.PermissionException, engine.OutOfMemoryException) as e:
        from fleettool.store.db import _classify

        raise store_exit(_classify(str(path), e)) from None
    except engine.Error as e:  # a damaged block met by the command's own query is exit 9, not a bug
        from fleettool.store.connection import _classify, is_damage

        if not is_damage(e):
            raise
        raise store_exit(_classify(str(path), e)) from None
    else:  # said after the command's own work, so that a failure stays one line
        if new and say_created:
            print(f"fleettool: note: {path} did not exist: created a new store there", file=sys.stderr)
    finally:
        store.close()


MAX_DURATION_S = 100 * 365 * 86400.0  # past this a timestamp overflows; nobody means it


def parse_duration(text: str, option: str | None = None) -> float:
    """An option's duration in fleettool.units' grammar ('10s', '5m', '1h30m', '2d', '1w', '30' = seconds) ->
    seconds, more than 0. A bad one is a usage error (exit 2) naming the option."""
    from fleettool.units import parse_duration as parse

    hint = option
    try:
        secs = parse(text)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint=hint) from None
    if secs <= 0:
        raise typer.BadParameter(f"{text!r} must be more than 0 (e.g. 1s, 5m)", param_hint=hint)
    if secs > MAX_DURATION_S:
        raise typer.BadParameter(f"{text!r} is longer than 100 years", param_hint=hint)
    return secs


def need_tool(tool: str, needed_by: str, fix: str = "install it or leave that option out") -> str:
    """The path of an external tool, or exit 8 naming it and what needs it, before anything has changed."""
    found = shutil.which(tool)
    if found is None:
        raise die(f"{tool}: not found on PATH (needed by {needed_by}); {fix}", ExitCode.UNAVAILABLE)
    return found


def parse_size_option(text: str, option: str, *, minimum: int = 1, example: str = "64MiB, 2G") -> int:
    """An option's size ('64MiB', '2G', '65536') -> bytes, at least `minimum`; else a usage error (exit 2)
    naming the option."""
    from fleettool.units import parse_size

    try:
        n = parse_size(text)
    except ValueError:
        raise typer.BadParameter(f"not a size: {text!r} (use e.g. {example})", param_hint=option) from None
    if n < minimum:
        floor = "1MiB" if minimum == 1 << 20 else f"{minimum} bytes"
        raise typer.BadParameter(
            f"{text!r} is under {floor}" if minimum > 1 else f"not a size: {text!r}", param_hint=option
        )
    return n
