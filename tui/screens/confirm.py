"""The yes/no modal every action passes through: it names what will be done to which alert (node, GPU, rule)
and for how long; `y` confirms, `n`, Esc or q cancel. The action then runs on the alert id captured when the
key was pressed, whatever the list shows by then."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Static

from fleettool.tui.text import assemble


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = [
        Binding("y", "answer(True)", "yes"),
        Binding("n,escape,q", "answer(False)", "no"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question  # names the rule and node as stored: shown as text, never as markup

    def compose(self) -> ComposeResult:
        yield Static(
            assemble(self.question, "\n\n", ("y", "b"), " yes    ", ("n", "b"), " / Esc no"), id="confirm"
        )

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
