"""How a list of incidents is printed (`fleettool incidents`, `fleettool fleet incidents`): the JSON contract of
fleettool.incidents.model.incident_json, or a table with the root in one cell."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleettool.cli.output import emit


def root_pci(store: Any, rows: list[dict[str, Any]]) -> dict[str, str | None]:
    """root alert id -> its GPU's PCI id, for the incidents' rows (none for a NIC's alert: its PCI address is
    the NIC's, not a GPU's)."""
    from fleettool.store.alerts import PCI_SQL

    ids = [r["root_alert"] for r in rows if r.get("root_alert")]
    if not ids:
        return {}
    got = store.query(
        f"SELECT alert_id, CASE WHEN category = 'nic' THEN NULL ELSE {PCI_SQL} END AS pci FROM alerts "
        "WHERE alert_id IN (SELECT unnest(?))",
        [ids],
    )
    return {g["alert_id"]: g["pci"] for g in got}


def root_cell(i: Mapping[str, Any]) -> str:
    r = i["root"]
    if r is None:
        return "-"
    pci = r.get("pci_bus_id") or ""
    gpu = f"/{r['gpu']}" if r["gpu"] is not None else (f"/{pci[-7:]}" if pci else "")  # 5D:00.0
    code = f" XID {r['code']}" if r["code"] is not None else ""
    return f"{r['node']}{gpu}{code}"


def emit_incidents(out: list[dict[str, Any]], *, as_json: bool, fmt: str) -> None:
    """Print incidents (incident_json items) as JSON or the triage table."""
    emit(
        out,
        [
            ("id", lambda i: i["id"][:8]),
            "state",
            "severity",
            ("page", lambda i: "PAGE" if i["page"] else "planned" if i.get("planned") else ""),
            "scope",
            ("key", lambda i: i["key"] or ""),
            ("root", root_cell),
            "nodes",
            "gpus",
            "alerts",
            "summary",
        ],
        as_json=as_json,
        fmt=fmt,
        drop=("key", "gpus", "nodes", "scope", "page", "severity"),
    )
