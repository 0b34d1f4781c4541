"""The base of every screen that loads data: its workers' errors go to the one handler, and it reads the app's
Source."""

from __future__ import annotations

from textual.screen import Screen

from fleettool.tui.errors import ShowsWorkerErrors
from fleettool.tui.source import Source, app_source


class DataScreen(ShowsWorkerErrors, Screen[None]):
    """A screen whose thread workers read through `self.source` and post a message from fleettool.tui.messages.

    Run every worker as `@work(thread=True, exclusive=True, exit_on_error=False, description="loading ...")`:
    the description is what the error modal names when the worker raises.
    """

    @property
    def source(self) -> Source:
        return app_source(self.app)
