"""Helpers shared by commands: the default database path, store errors -> exit codes, durations."""

from __future__ import annotations

import os
import re
import socket
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
    return socket.gethostname().split(".")[0]


def die(msg: str, code: ExitCode) -> typer.Exit:
    print(f"fleettool: {msg}", file=sys.stderr)
    return typer.Exit(int(code))


@contextmanager
def open_store(path: Path, *, read_only: bool) -> Iterator[Store]:
    from fleettool.store import Store, StoreCorrupt, StoreError, StoreLocked

    try:
        store = Store(path, read_only=read_only)
    except StoreLocked as e:
        raise die(str(e), ExitCode.STORE_LOCKED) from None
    except StoreCorrupt as e:
        raise die(str(e), ExitCode.STORE_CORRUPT) from None
    except StoreError as e:
        raise die(str(e), ExitCode.STORE_ERROR) from None
    try:
        yield store
    finally:
        store.close()


_DUR = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")


def parse_duration(text: str) -> float:
    """'10s', '5m', '1.5h', '2d', '30' (seconds) -> seconds."""
    m = _DUR.match(text)
    if not m:
        raise typer.BadParameter(f"not a duration: {text!r} (use e.g. 30s, 5m, 2h, 7d)")
    mult = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}[m.group(2)]
    return float(m.group(1)) * mult
