"""Worker errors, handled in one place.

Every thread worker runs with `exit_on_error=False`; when one raises, the one `on_worker_state_changed`
handler below shows what failed in a modal over the current screen, and the dashboard stays up. Textual posts
`Worker.StateChanged` only to the node that ran the worker (it does not bubble), so the handler is a mixin that
the app and every data screen (`screens.base.DataScreen`) inherit.
"""

from __future__ import annotations

from typing import Any

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from fleettool.tui.text import assemble


class ErrorScreen(ModalScreen[None]):
    """A modal with one error message; Esc closes it."""

    BINDINGS = [Binding("escape,enter,q", "dismiss", "close")]

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def compose(self) -> ComposeResult:
        yield Static(assemble(("Error", "b"), "\n\n", self.message, "\n\n(press Esc)"), id="error")


def show_error(app: App[Any], message: str) -> None:
    """Show `message` in an ErrorScreen, once: a failure repeated by the 10 s refresh is one modal to close."""
    if any(isinstance(s, ErrorScreen) and s.message == message for s in app.screen_stack):
        return
    app.push_screen(ErrorScreen(message))


def failure_text(worker: Worker[Any]) -> str:
    """'<what the worker does> failed' and the error, e.g. 'loading the alerts failed: database is locked'."""
    error = worker.error
    what = worker.description or worker.name or "a background task"
    return f"{what} failed: {str(error) or type(error).__name__}"


class ShowsWorkerErrors:
    """The one worker-error handler, mixed into the app and every screen that runs workers."""

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state is WorkerState.ERROR and event.worker.error is not None:
            show_error(event.worker.node.app, failure_text(event.worker))
