"""The help modal (`?`): one row per key, as the app lists them (its own keys and the screens' registry)."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Markdown


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "close")]

    def __init__(self, keys: Sequence[tuple[str, str]]) -> None:
        super().__init__()
        self.key_rows = list(keys)

    def compose(self) -> ComposeResult:
        yield Markdown(
            "# fleettool tui\n\n"
            "| key | |\n|---|---|\n" + "".join(f"| {key} | {text} |\n" for key, text in self.key_rows),
            id="help",
        )
