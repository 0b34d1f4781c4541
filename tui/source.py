"""Where the TUI reads from: an agent's database (opened read-only for each load) or a fleet location.

The screens reach the running app's Source through `app_source`, so no screen imports the app.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


class Source:
    """Where the screens read from: an agent's database (read-only per load) or a fleet location.

    The workers of one app take turns with the file (one lock): DuckDB refuses, at once and without a lock to
    wait on, a read-write connection in a process that has the same file open read-only, so an ack pressed
    while a refresh was reading used to fail."""

    def __init__(
        self, db: Path | None = None, fleet: str | None = None, prepare: Callable[[Any], object] | None = None
    ) -> None:
        self.db = db
        self.fleet = fleet
        self.prepare = prepare  # run on each load's in-memory fleet store (tui --fleet --topology reads them)
        self._turn = threading.RLock()

    @contextlib.contextmanager
    def open(self) -> Iterator[Any]:
        with self._turn:
            if self.fleet:
                from fleettool.incidents.fleet import open_fleet_folded

                # the fleet's incidents folded at open (every node's alerts with the exported topology and jobs)
                with open_fleet_folded(self.fleet, prepare=self.prepare) as store:
                    yield store
                return
            from fleettool.store import Store

            with Store(self.db or Path("fleettool.duckdb"), read_only=True, wait_s=2.0) as store:
                yield store

    @contextlib.contextmanager
    def open_rw(self) -> Iterator[Any]:
        from fleettool.store import Store

        with self._turn, Store(self.db or Path("fleettool.duckdb"), read_only=False, wait_s=5.0) as store:
            yield store


def app_source(app: Any) -> Source:
    """The Source of the running dashboard (`FleetTui.source`), as a screen or worker sees it."""
    source = getattr(app, "source", None)
    if not isinstance(source, Source):
        raise TypeError(f"{type(app).__name__} has no fleettool.tui Source to read from")
    return source
