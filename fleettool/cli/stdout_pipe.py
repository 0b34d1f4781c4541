"""`fleettool rules list | head`: a reader that closes our stdout ends the command quietly with status 141, as
SIGPIPE ends any Unix tool, and never with click's exit 1 (which means "found a failure") or a traceback.

Only stdout gets that treatment. The process keeps Python's default of ignoring SIGPIPE, so a write to any other
closed pipe or socket is an error where it happens: an HTTP client of the agent that hangs up early costs that
connection, not the agent (setting SIGPIPE to SIG_DFL for every command, as fleettool once did, let the first
such client kill the agent with status 141, no flush and no log line).
"""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO

PIPE_CLOSED = 141  # 128 + SIGPIPE: what a shell reports for a tool ended by its reader


def _end_quietly() -> None:
    """Our reader is gone: point fd 1 at /dev/null so the interpreter's last flush cannot complain, and exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass
    raise SystemExit(PIPE_CLOSED)  # BaseException: no command's `except Exception` can turn it into a failure


class StdoutGuard:
    """sys.stdout, except that a broken pipe on it ends the command quietly (see the module's docstring)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            _end_quietly()
            raise  # unreachable: _end_quietly raises

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            _end_quietly()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guard_stdout() -> None:
    if sys.stdout is not None and not isinstance(sys.stdout, StdoutGuard):
        sys.stdout = StdoutGuard(sys.stdout)  # type: ignore[assignment]


def flush_stdout() -> None:
    """The command's last output, flushed while a broken pipe can still end it quietly."""
    if sys.stdout is not None:
        sys.stdout.flush()
