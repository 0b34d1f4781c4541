"""How the TUI colours an alert's severity (Rich markup styles), shared by the alert list and the evidence."""

from __future__ import annotations

SEV_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
