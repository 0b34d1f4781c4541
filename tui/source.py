"""Where the TUI reads from: an agent's database (opened read-only for each load) or a fleet location.

The screens reach the running app's Source through `app_source`, so no screen imports the app.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class Source:
    """Where the screens read from: an agent's database (read-only per load) or a fleet location."""

    def __init__(self, db: Path | None = None, fleet: str | None = None) -> None:
        self.db = db
        self.fleet = fleet

    def open(self):  # type: ignore[no-untyped-def]
        if self.fleet:
            from fleettool.fleet.read import open_fleet

            return open_fleet(self.fleet)
        from fleettool.store import Store

        return Store(self.db or Path("fleettool.duckdb"), read_only=True, wait_s=2.0)

    def open_rw(self):  # type: ignore[no-untyped-def]
        from fleettool.store import Store

        return Store(self.db or Path("fleettool.duckdb"), read_only=False, wait_s=5.0)


def app_source(app: Any) -> Source:
    """The Source of the running dashboard (`FleetTui.source`), as a screen or worker sees it."""
    source = getattr(app, "source", None)
    if not isinstance(source, Source):
        raise TypeError(f"{type(app).__name__} has no fleettool.tui Source to read from")
    return source
