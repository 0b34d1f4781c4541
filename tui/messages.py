"""What the thread workers post back to the UI thread: one past-tense message per finished load.

The workers only read (through fleettool.views and fleettool.stats) and post; the handlers only render.
"""

from __future__ import annotations

from typing import Any

from textual.message import Message


class AlertsLoaded(Message):
    """The alert list, worst first (fleettool.views.alerts)."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        super().__init__()
        self.rows = rows


class DetailLoaded(Message):
    """One alert's evidence and runbook (fleettool.views.alert_detail); None when it is gone."""

    def __init__(self, detail: dict[str, Any] | None) -> None:
        super().__init__()
        self.detail = detail


class FleetLoaded(Message):
    """Every node by its worst alert (fleettool.views.fleet_grid)."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        super().__init__()
        self.nodes = nodes


class NodeLoaded(Message):
    """One node's GPUs, events, burn-ins and lifecycle (fleettool.views.node_view)."""

    def __init__(self, view: dict[str, Any]) -> None:
        super().__init__()
        self.view = view


class StatsLoaded(Message):
    """The fleet statistics report (fleettool.stats.report)."""

    def __init__(self, rep: dict[str, Any]) -> None:
        super().__init__()
        self.rep = rep


class IncidentsLoaded(Message):
    """The incidents, root first (fleettool.store.incidents.list_incidents), and how many alerts the store has
    (what the alert list one key away holds)."""

    def __init__(self, rows: list[dict[str, Any]], alerts: int) -> None:
        super().__init__()
        self.rows = rows
        self.alerts = alerts


class IncidentLoaded(Message):
    """One incident (None when it is gone) and its member alerts, the root first
    (fleettool.store.incidents.incident_members)."""

    def __init__(self, incident: dict[str, Any] | None, members: list[dict[str, Any]]) -> None:
        super().__init__()
        self.incident = incident
        self.members = members
