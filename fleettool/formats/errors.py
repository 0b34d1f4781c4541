"""The error every parser raises or reports: one line naming the file and the line."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ParseIssue:
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


class ParseError(ValueError):
    """A malformed input line, raised when the caller asked to stop on bad input."""

    def __init__(self, issue: ParseIssue) -> None:
        super().__init__(str(issue))
        self.issue = issue
