"""The dashboard's screens, one module each, and SCREENS: the one registry the app's keys, footer and help read.

Adding a screen is a module here (a DataScreen subclass whose workers post a message from
fleettool.tui.messages) plus one SCREENS line; the app binds its key, labels it in the footer and lists it in
the help. Enter (DetailScreen), `?` (HelpScreen), the confirmation of an action (ConfirmScreen) and the
worker-error modal are opened by the app itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from textual.screen import Screen

from fleettool.tui.screens.confirm import ConfirmScreen
from fleettool.tui.screens.detail import DetailScreen
from fleettool.tui.screens.fleet import FleetScreen
from fleettool.tui.screens.help import HelpScreen
from fleettool.tui.screens.incident import IncidentScreen
from fleettool.tui.screens.incidents import IncidentsScreen
from fleettool.tui.screens.node import NodeScreen
from fleettool.tui.screens.stats import StatsScreen


@dataclass(frozen=True)
class Nav:
    """How the alert list opens a screen: `key` pushes `screen`, labelled `label` in the footer, `help` in `?`."""

    screen: Callable[..., Screen[Any]]
    key: str
    label: str
    help: str
    of_alert: str | None = None
    """The selected alert's field the screen is built from (NodeScreen(alert["node"])); None: no argument.
    A screen built from the alert does not open while no alert is selected."""


SCREENS: dict[str, Nav] = {
    "incidents": Nav(
        IncidentsScreen,
        "i",
        "incidents",
        "incidents, root first; Enter: by node",
    ),
    "fleet": Nav(
        FleetScreen, "f", "fleet", "fleet grid: every node and GPU by worst alert (Enter: the node)"
    ),
    "node": Nav(
        NodeScreen,
        "n",
        "node",
        "the selected alert's node: GPUs, events, burn-ins, lifecycle (c/b/h move it)",
        of_alert="node",
    ),
    "stats": Nav(
        StatsScreen,
        "t",
        "statistics",
        "fleet statistics: availability, MTBF, incidents by category, interruptions",
    ),
}

__all__ = [
    "SCREENS",
    "ConfirmScreen",
    "DetailScreen",
    "FleetScreen",
    "HelpScreen",
    "IncidentScreen",
    "IncidentsScreen",
    "Nav",
    "NodeScreen",
    "StatsScreen",
]
