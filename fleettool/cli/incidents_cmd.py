"""`fleettool incidents [show ID]`: incidents above alerts, causes first (fleettool/incidents/)."""

from __future__ import annotations

import sys
from collections import defaultdict
from typing import Annotated, Any

import typer

from fleettool.cli.common import DEFAULT_DB, die, open_store
from fleettool.cli.exit_codes import ExitCode
from fleettool.cli.incidents_view import emit_incidents, root_cell, root_pci
from fleettool.cli.options import DbOpt, FormatOpt, JsonOpt
from fleettool.cli.output import print_json
from fleettool.store.alerts import ALERT_STATES

incidents_app = typer.Typer(invoke_without_command=True)


def _rows(store: Any, state: str | None) -> list[dict[str, Any]]:
    """The stored incidents; folded now from the alerts when the store has alerts but no incidents (written by a
    fleettool before incidents), saying so on stderr."""
    from fleettool.store.incidents import list_incidents

    rows = list_incidents(store, state=state)
    if rows or state is not None or not store.scalar("SELECT count(*) FROM alerts"):
        return rows
    # here, not above: the fold and its inputs are ~20 ms of imports a store with incidents never needs
    from fleettool.incidents.fold import fold_incidents
    from fleettool.incidents.inputs import load

    folded = fold_incidents(*load(store))
    print(f"note: {store.path} holds no incidents; folded {len(folded)} from its alerts now", file=sys.stderr)
    out = []
    for r in folded:
        d = {k: getattr(r, k) for k in r.__dataclass_fields__ if k != "members"}
        out.append(d)
    order = {s: i for i, s in enumerate(ALERT_STATES)}
    out.sort(
        key=lambda d: (order.get(d["state"], 9), d["root_alert"] is None, not d["page"], -d["first_seen"])
    )
    return out


@incidents_app.callback()
def incidents(
    ctx: typer.Context,
    db: DbOpt = DEFAULT_DB,
    json_out: JsonOpt = False,
    fmt: FormatOpt = "table",
    state: Annotated[
        str | None, typer.Option(help=f"only incidents in this state ({', '.join(ALERT_STATES)})")
    ] = None,
) -> None:
    """List incidents, causes first: each fault once, with the alerts it explains counted under it.

    An incident is a root alert and its symptoms (the driver's `caused by previous Xid N`, XID 145 after 149 in
    one NVLink domain, a job's teardown XIDs after a hardware fault), or a storm folded by topology or time.
    PAGE says whether it paged: only a root or a critical storm, never a teardown, never planned work.

    Example: fleettool incidents --db fleet.duckdb --json
    """
    if ctx.invoked_subcommand is not None:
        return
    if state and state not in ALERT_STATES:
        raise typer.BadParameter(
            f"{state!r} is not a state (one of {', '.join(ALERT_STATES)})", param_hint="--state"
        )
    from fleettool.incidents.model import incident_json

    with open_store(db, read_only=True, sql_only=True) as store:
        rows = _rows(store, state or None)
        pci = root_pci(store, rows)
    out = [incident_json(r, pci) for r in rows]
    emit_incidents(out, as_json=json_out, fmt=fmt)


@incidents_app.command("show")
def show(
    incident_id: Annotated[str, typer.Argument(help="the incident's id (a unique prefix will do)")],
    db: DbOpt = DEFAULT_DB,
    json_out: JsonOpt = False,
) -> None:
    """One incident: its root, why each alert is folded under it, and its members grouped by node with counts.

    Example: fleettool incidents show 3fa2 --db fleet.duckdb
    """
    from fleettool.incidents.model import incident_json
    from fleettool.store.incidents import incident_by_id, incident_ids_starting, incident_members

    with open_store(db, read_only=True, sql_only=True) as store:
        ids = incident_ids_starting(store, incident_id)
        if len(ids) != 1:
            why = "no incident" if not ids else f"{len(ids)} incidents ({', '.join(i[:12] for i in ids)})"
            raise die(f"{incident_id}: {why} starts with that id in {db}", ExitCode.BAD_INPUT)
        row = incident_by_id(store, ids[0])
        assert row is not None
        members = incident_members(store, ids[0])
        pci = root_pci(store, [row])
    inc = incident_json(row, pci)
    by_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for m in members:
        by_node[m["node"] or "?"].append(m)
    if json_out:
        print_json({**inc, "members": members}, default=str)
        return
    print(f"incident {inc['id']}  {inc['state']}  {inc['severity']}{'  PAGED' if inc['page'] else ''}")
    print(f"scope {inc['scope']}{' ' + inc['key'] if inc['key'] else ''}: {inc['summary']}")
    print(f"root: {root_cell(inc)}" + (f" (alert {inc['root']['alert']})" if inc["root"] else ""))
    for b in inc["because"]:
        print(f"  because {b}")
    print(f"{_n(inc['alerts'], 'alert')} on {_n(inc['nodes'], 'node')}, {_n(inc['gpus'], 'GPU')}:")
    for node, ms in sorted(
        by_node.items(), key=lambda kv: (not any(m["role"] == "root" for m in kv[1]), kv[0])
    ):
        rules: dict[str, int] = defaultdict(int)
        for m in ms:
            rules[m["rule"] or "?"] += 1
        root = " (root)" if any(m["role"] == "root" for m in ms) else ""
        gpus = sorted({str(m["gpu"]) if m["gpu"] is not None else (m["pci_bus_id"] or "?") for m in ms})
        print(
            f"  {node}{root}: {_n(len(ms), 'alert')} on GPU{'s' * (len(gpus) > 1)} {', '.join(gpus)}: "
            + ", ".join(f"{r} x{n}" for r, n in sorted(rules.items()))
        )
    first = inc["root"]["node"] if inc["root"] else next(iter(sorted(by_node)), "NODE")
    print(f"alerts: fleettool alerts --db {db} --node {first}")


def _n(k: int, what: str) -> str:
    return f"{k} {what}{'s' * (k != 1)}"


def register(app: typer.Typer) -> None:
    app.add_typer(incidents_app, name="incidents")
