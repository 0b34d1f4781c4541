"""Exit codes, printed in `fleettool --help`: one contract for every command. A failure is never 0.

Every failure prints one line on stderr, `fleettool: <what>: <why>`, naming the file, option, port or tool.
2 stays click's usage error. 70 is EX_SOFTWARE of sysexits.h: a bug, never an expected outcome.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    FAILURE = (
        1  # the command ran and found a failure (burn-in FAIL, rules check problems, invalid transition)
    )
    USAGE = 2  # bad command line: unknown option, a bad number or duration (--limit -1, --interval 0s)
    BAD_INPUT = (
        3  # a path that does not exist (a --db too), an empty directory, nothing recognised, a bad file
    )
    STORE_LOCKED = 4  # the database is held by another process and did not free up in time
    STORE_CORRUPT = 5  # not a fleettool database (a foreign DuckDB, a text file): nothing was changed
    STORE_ERROR = 6  # the database cannot be opened or written (no permission, disk full, an I/O error)
    NOT_TESTED = 7  # nothing could be tested (no GPU), or a burn-in was INCONCLUSIVE: never a pass
    UNAVAILABLE = (
        8  # something the command needs is unavailable (port in use, scontrol/kubectl/ssh/dcgmi missing)
    )
    STORE_DAMAGED = (
        9  # the database file is damaged: `fleettool store check` / `store salvage` (never "a bug")
    )
    INTERNAL = 70  # a bug in fleettool (one line; FLEETTOOL_DEBUG=1 shows the traceback)


EPILOG = (
    "Exit codes: 0 ok; 1 failure found; 2 usage error (bad option or number); "
    "3 bad input (a missing path, a --db that does not exist or whose directory does not, an empty directory, "
    "nothing recognised, file:line on stderr); "
    "4 database locked; 5 not a fleettool database (nothing was changed); "
    "6 database cannot be opened or written (no permission, disk full); "
    "7 nothing could be tested or a burn-in was inconclusive (no GPU, a GPU busy with another process); "
    "8 something needed is unavailable (port in use, scontrol/kubectl/ssh/dcgmi or an extra not installed); "
    "9 the database is damaged (run `fleettool store check --db PATH`, then `fleettool store salvage`); "
    "70 internal error (a bug: please report it). Every failure is one line on stderr."
)
