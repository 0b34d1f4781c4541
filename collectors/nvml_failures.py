"""Failures as state changes: a read, the device count or the event wait that keeps failing is one event when it
starts failing and one when it answers again (with the count of failures in between), not one per collection.
The collection's `errors` still counts every failure (the collector's health gauge)."""

from __future__ import annotations

from collections.abc import Hashable


class Streaks:
    """Consecutive failures per key (a GPU's read, the device count, the event wait)."""

    def __init__(self) -> None:
        self.failing: dict[Hashable, int] = {}

    def fail(self, key: Hashable) -> bool:
        """Count a failure; True when it is the first of a streak (report it)."""
        n = self.failing.get(key, 0)
        self.failing[key] = n + 1
        return n == 0

    def ok(self, key: Hashable) -> int:
        """A success: the number of failures it ends (0: it was not failing)."""
        return self.failing.pop(key, 0)


def recovered(what: str, failures: int) -> str:
    return f"{what} answers again after {failures} failed {'try' if failures == 1 else 'tries'}"
