"""Exit codes, printed in --help. 2 stays click's usage error. A failure is never 0."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    FAILURE = 1  # the command ran and found a failure (burn-in FAIL, alerts with --fail-on)
    USAGE = 2  # bad command line (click)
    BAD_INPUT = 3  # unreadable or malformed input (file and line are named on stderr)
    STORE_LOCKED = 4  # the database is held by another process and did not free up in time
    STORE_CORRUPT = 5  # the file is not a fleettool database this version can read
    STORE_ERROR = 6  # any other database error (disk full, permissions)
    NOT_TESTED = 7  # nothing could be tested (no GPU): never a pass


EPILOG = (
    "Exit codes: 0 ok; 1 failure found; 2 usage error; 3 bad input (file:line on stderr); "
    "4 database locked; 5 database corrupt or not fleettool's; 6 other database error; "
    "7 nothing could be tested (no GPU)."
)
