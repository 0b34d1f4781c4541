"""`fleettool demo`: the bundled recording replayed into a store, with what it found and what to run next."""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from fleettool.cli.common import die
from fleettool.cli.exit_codes import ExitCode

DEMO_DIR = Path(__file__).resolve().parent.parent / "data" / "demo"


def next_steps(db: Path) -> str:
    """What to run on a kept demo store: the TUI first, then the CLI's views of the same alerts."""
    q = shlex.quote(str(db))
    return (
        "next: open what it found in the dashboard:\n"
        f"  fleettool tui --db {q}\n"
        f"or list it: fleettool incidents --db {q}, fleettool alerts --db {q}, fleettool events --db {q}, "
        f"fleettool gpus --db {q}"
    )


def register(app: typer.Typer) -> None:
    @app.command()
    def demo(
        recording: Annotated[
            Path | None, typer.Argument(help="recording to show (default: the bundled one)")
        ] = None,
        db: Annotated[
            Path | None,
            typer.Option(
                "--db",
                help="keep the store here (a new file, or a store to add to) to open in `fleettool tui` "
                "afterwards (default: a temporary store, removed at the end)",
            ),
        ] = None,
    ) -> None:
        """Replay the bundled recording into a store and show what it found. No GPU, no server. With --db the
        store is kept and the command says how to open it in the TUI.

        Example: fleettool demo --db demo.duckdb && fleettool tui --db demo.duckdb
        """
        from fleettool.cli.extras import require_extra
        from fleettool.cli.replay_cmd import _replay

        require_extra("replay", "demo")
        src = recording or DEMO_DIR
        if not src.exists():
            raise die(f"{src}: no such file or directory", ExitCode.BAD_INPUT)
        if db is not None:
            print(f"fleettool demo: replaying {src} into {db}\n")
            _replay(db, src, None, False, False, True)
            print("\n" + next_steps(db))
            return
        with tempfile.TemporaryDirectory(prefix="fleettool-demo-") as tmp:
            print(f"fleettool demo: replaying {src} into a temporary store\n")
            _replay(Path(tmp) / "demo.duckdb", src, None, False, False, True)
        print(
            "\nthe store was temporary: `fleettool demo --db demo.duckdb` keeps it, "
            "then `fleettool tui --db demo.duckdb` opens it"
        )
