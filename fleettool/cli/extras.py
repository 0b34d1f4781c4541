"""The optional extras: which modules each one brings, and the one check a command makes before it first imports
one of them. `pip install fleettool` installs every command but only the agent's dependencies; a command that
needs an extra that is not installed exits 8 with one line naming the extra and the pip command that adds it,
never a traceback or an internal error (70).

The module names here are the import names of pyproject.toml's [project.optional-dependencies]
(tests/test_extras.py checks that the two agree). Finding a module costs a lookup on sys.path, no import.
"""

from __future__ import annotations

import importlib.util

from fleettool.cli.exit_codes import ExitCode

# extra -> the modules it installs, as they are imported (the distributions are pyproject.toml's)
EXTRAS: dict[str, tuple[str, ...]] = {
    "tui": ("textual", "textual_plotext"),
    "analytics": ("polars", "pyarrow", "plotext"),
    "replay": ("numpy", "pyarrow"),
    "fleet": ("pyarrow",),
    "burnin": ("torch",),
}


def missing(extra: str) -> list[str]:
    """The modules of `extra` that cannot be imported here (none when it is installed)."""
    return [m for m in EXTRAS[extra] if importlib.util.find_spec(m) is None]


def require_extra(extra: str, what: str) -> None:
    """Exit 8 before `what` (a command, or a command and the option that needs it) imports a module of `extra`
    that is not installed: `fleettool: tui: needs the [tui] extra (textual is not installed): pip install
    'fleettool[tui]'`."""
    gone = missing(extra)
    if gone:
        from fleettool.cli.common import die

        verb = "is" if len(gone) == 1 else "are"
        raise die(
            f"{what}: needs the [{extra}] extra ({', '.join(gone)} {verb} not installed): "
            f"pip install 'fleettool[{extra}]'",
            ExitCode.UNAVAILABLE,
        )
