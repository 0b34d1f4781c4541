"""What replay prints after the GPUs: incidents first, causes first, then the alerts a person reads (the roots
and lone alerts; the symptoms folded under an incident are counted, and listed by `fleettool alerts`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fleettool.store import Store

LIST_ALL_UP_TO = 20  # alerts listed whole when there are at most this many


def _n(k: int, what: str) -> str:
    return f"{k} {what}{'s' * (k != 1)}"


def replay_incidents(store: Store) -> list[dict[str, Any]]:
    """The store's incidents as `fleettool incidents --json` gives them."""
    from fleettool.cli.incidents_view import root_pci as _root_pci
    from fleettool.incidents.model import incident_json
    from fleettool.store.incidents import list_incidents

    rows = list_incidents(store)
    pci = _root_pci(store, rows)
    return [incident_json(r, pci) for r in rows]


def member_ids(store: Store) -> set[str]:
    """Alerts folded under an incident's root (its symptoms), not the root itself."""
    from fleettool.store.incidents import incident_of_alerts

    return {a for a, (_, role) in incident_of_alerts(store).items() if role == "member"}


def print_triage(
    incidents: list[dict[str, Any]],
    alerts: list[dict[str, Any]],
    members: set[str],
    db: str,
    when: Callable[[dict[str, Any]], str],
) -> None:
    if incidents:
        pages = sum(1 for i in incidents if i["page"])
        print(f"incidents ({len(incidents)}, {pages} paged), causes first:")
        for i in incidents:
            r = i["root"]
            gpu = r and (r["gpu"] if r["gpu"] is not None else r["pci_bus_id"])
            root = "no single root" if r is None else f"root {r['node']}" + (f" GPU {gpu}" if gpu else "")
            page = "PAGE " if i["page"] else "planned " if i.get("planned") else ""
            key = f" {i['key']}" if i["key"] else ""
            print(
                f"  {page}{i['severity']:8s} {i['state']:8s} {i['scope']}{key}: {root}; {_n(i['alerts'], 'alert')} on {_n(i['nodes'], 'node')}"
            )
            print(f"  {'':8s} {i['summary']}")
            for b in i["because"][:3]:
                print(f"  {'':8s} because {b}")
        print()
    if not alerts:
        print("alerts: none")
        return
    shown = (
        alerts if len(alerts) <= LIST_ALL_UP_TO else [a for a in alerts if a.get("alert_id") not in members]
    )
    folded = len(alerts) - len(shown)
    more = f"; {folded} symptoms folded under incidents: fleettool alerts --db {db}" if folded else ""
    print(f"alerts ({len(alerts)}{more}):")
    for a in shown:
        gpu = "-" if a["gpu"] is None else a["gpu"]
        mark = "↳ " if a.get("alert_id") in members else ""  # a symptom folded under an incident's root
        print(
            f"  {a['severity']:8s} {a['category']:10s} {a['node']} gpu {gpu}  {a['action']:16s} {mark}{a['summary']}"
        )
        print(f"  {'':8s} {when(a)}; runbook: {a['runbook']}")
