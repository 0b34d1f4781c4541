"""`fleettool alerts` (list, ack, resolve) and `fleettool silence` (add, list, expire)."""

from __future__ import annotations

import datetime as dt
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from fleettool.cli.common import DEFAULT_DB, die, open_store, parse_duration
from fleettool.cli.exit_codes import ExitCode
from fleettool.cli.options import DbOpt, FormatOpt, JsonOpt, ReasonOpt, WhoOpt
from fleettool.cli.output import emit, iso, with_iso
from fleettool.model import who_acts
from fleettool.store.alerts import ALERT_STATES, AlertOrder, list_alerts
from fleettool.store.incidents import incident_of_alerts

alerts_app = typer.Typer(invoke_without_command=True)
silence_app = typer.Typer(help="Mute matching alerts until a time.", no_args_is_help=True)


def _who(v: str) -> str:
    return v or who_acts()


@alerts_app.callback()
def alerts(
    ctx: typer.Context,
    db: DbOpt = DEFAULT_DB,
    json_out: JsonOpt = False,
    fmt: FormatOpt = "table",
    state: Annotated[
        str | None, typer.Option(help=f"only alerts in this state ({', '.join(ALERT_STATES)})")
    ] = None,
    hide_silenced: Annotated[bool, typer.Option("--hide-silenced", help="leave out silenced alerts")] = False,
    node: Annotated[str | None, typer.Option(help="only this node's alerts")] = None,
) -> None:
    """List alerts, firing first, then worst and newest first, with their silences and acknowledgements.
    Each alert names its incident (`incident`, `incident_role`: root or member; null when it is in none); in
    the table a member's summary starts with ↳ (a symptom counted under its incident's root).

    Example: fleettool alerts --db fleet.duckdb --json
    """
    if ctx.invoked_subcommand is not None:
        return
    if state and state not in ALERT_STATES:
        raise typer.BadParameter(
            f"{state!r} is not a state (one of {', '.join(ALERT_STATES)})", param_hint="--state"
        )
    with open_store(db, read_only=True, sql_only=True) as store:
        rows = list_alerts(
            store,
            state=state or None,
            node=node,
            include_silenced=not hide_silenced,
            order=AlertOrder.TRIAGE,
        )
        of = incident_of_alerts(store)
    for r in rows:
        r["incident"], r["incident_role"] = of.get(r["alert_id"], (None, None))
    emit(
        [with_iso(r, "first_seen", "last_seen", "ack_until") for r in rows],
        [
            "alert_id",
            "rule",
            "severity",
            "category",
            "node",
            "gpu",
            "action",
            "state",
            ("note", _note),
            ("summary", _summary),
        ],
        as_json=json_out,
        fmt=fmt,
        drop=("note", "category", "action", "state", "rule", "gpu"),  # a narrow terminal loses these first
    )


def _note(alert: Mapping[str, Any]) -> str:
    """Silenced and who acknowledged, for the table."""
    parts = (
        "silenced" if alert["silenced"] else "",
        f"ack:{alert['ack_by']}" if alert["acknowledged"] else "",
    )
    return " ".join(p for p in parts if p)


def _summary(alert: Mapping[str, Any]) -> str:
    """The summary, marked ↳ when the alert is a member of an incident (its root is another alert)."""
    return ("↳ " if alert.get("incident_role") == "member" else "") + str(alert["summary"])


def _ack(db: Path, alert_id: str, kind: str, for_: str, who: str, reason: str) -> None:
    from fleettool.engine.silences import acknowledge

    now = time.time()
    until = now + parse_duration(for_, "--for")
    with open_store(db, read_only=False, create=False) as store:
        alert_id = _full_id(store, db, alert_id)
        try:
            acknowledge(
                store,
                alert_id,
                now=now,
                until=until,
                who=_who(who),
                reason=reason,
                kind=kind,
            )
        except KeyError:
            raise die(f"no alert {alert_id!r} in {db}", ExitCode.BAD_INPUT) from None
    print(f"{kind} {alert_id} by {_who(who)}", file=sys.stderr)


MIN_PREFIX = 4  # as git's shortest abbreviation


def _full_id(store: Any, db: Path, given: str) -> str:
    """The alert id a user typed, or a unique prefix of one (as git takes an abbreviated commit): the full id;
    no match, a prefix under MIN_PREFIX characters, or several matches: exit 3 naming them."""
    from fleettool.store.alerts import alert_exists, alert_ids_starting

    if alert_exists(store, given):
        return given
    if len(given) < MIN_PREFIX:
        raise die(
            f"no alert {given!r} in {db} (an id, or a unique prefix of at least {MIN_PREFIX} characters)",
            ExitCode.BAD_INPUT,
        )
    found = alert_ids_starting(store, given)
    if len(found) == 1:
        return found[0]
    if not found:
        raise die(f"no alert {given!r} in {db}", ExitCode.BAD_INPUT)
    more = "" if len(found) < 10 else ", ..."
    raise die(
        f"alert id prefix {given!r} is ambiguous in {db}: it starts {', '.join(found)}{more} (type more of it)",
        ExitCode.BAD_INPUT,
    )


@alerts_app.command()
def ack(
    alert_id: Annotated[
        str,
        typer.Argument(help="the alert's id (fleettool alerts), or a unique prefix of it (4+ characters)"),
    ],
    db: DbOpt = DEFAULT_DB,
    for_: Annotated[str, typer.Option("--for", help="how long the acknowledgement lasts")] = "4h",
    who: WhoOpt = "",
    reason: ReasonOpt = "",
) -> None:
    """Acknowledge an alert: someone is on it, until the acknowledgement expires.

    Example: fleettool alerts ack 3f2a9c0d --for 2h --by alice -m "draining gpu-17"
    """
    _ack(db, alert_id, "ack", for_, who, reason)


@alerts_app.command()
def resolve(
    alert_id: Annotated[str, typer.Argument(help="the alert's id, or a unique prefix of it (4+ characters)")],
    db: DbOpt = DEFAULT_DB,
    who: WhoOpt = "",
    reason: ReasonOpt = "",
) -> None:
    """Mark an alert resolved by hand (recorded with who and why).

    Example: fleettool alerts resolve 3f2a9c0d1e2b4a5c -m "GPU replaced"
    """
    _ack(db, alert_id, "resolve", "3650d", who, reason)


@silence_app.command("add")
def silence_add(
    db: DbOpt = DEFAULT_DB,
    node: Annotated[str | None, typer.Option(help="match this node")] = None,
    gpu: Annotated[int | None, typer.Option(min=0, help="match this GPU index")] = None,
    rule: Annotated[str | None, typer.Option(help="match this rule")] = None,
    category: Annotated[str | None, typer.Option(help="match this category")] = None,
    for_: Annotated[str, typer.Option("--for", help="how long")] = "2h",
    start: Annotated[
        str | None,
        typer.Option(
            help="when it starts, ISO 8601 (2026-12-01T02:00:00Z): a maintenance window ahead, or past"
        ),
    ] = None,
    who: WhoOpt = "",
    reason: ReasonOpt = "",
) -> None:
    """Silence alerts matching every given matcher for a while (e.g. a node under maintenance). A silence
    with a reason is planned work: an incident it covers when the alert fires never pages.

    Example: fleettool silence add --node gpu-17 --for 6h -m "PSU swap"
    """
    from fleettool.engine.silences import add_silence
    from fleettool.store.nodes import known_nodes, node_known

    now = time.time()
    t0 = None if start is None else _iso_time(start)
    until = (now if t0 is None else t0) + parse_duration(for_, "--for")
    with open_store(db, read_only=False, create=False) as store:
        try:
            sid = add_silence(
                store,
                now=now,
                until=until,
                who=_who(who),
                reason=reason,
                node=node,
                gpu=gpu,
                rule=rule,
                category=category,
                start=t0,
            )
        except ValueError as e:
            raise die(str(e), ExitCode.USAGE) from None
        unknown = node is not None and not node_known(store, node)
        known = known_nodes(store, 5) if unknown else []
    print(sid)
    if unknown:  # a typo silences nothing: say so (it is kept: a node may come later)
        print(
            f"fleettool: note: {db} knows no node {node!r}"
            + (f" (it knows {', '.join(known)}, ...)" if known else "")
            + "; the silence is kept for when it appears",
            file=sys.stderr,
        )
    what = ", ".join(
        f"{k} {v}"
        for k, v in (("node", node), ("gpu", gpu), ("rule", rule), ("category", category))
        if v is not None
    )
    frm = "now" if t0 is None else iso(dt.datetime.fromtimestamp(t0, dt.timezone.utc).replace(tzinfo=None))
    to = iso(dt.datetime.fromtimestamp(until, dt.timezone.utc).replace(tzinfo=None))
    print(
        f"silenced {what} from {frm} until {to}"
        + (f": {reason}" if reason else " (no reason: not planned work)"),
        file=sys.stderr,
    )


def _iso_time(v: str) -> float:
    """An ISO 8601 time (naive = UTC) as unix seconds, or a usage error naming --start."""
    import datetime as dt

    try:
        t = dt.datetime.fromisoformat(v.strip())
    except ValueError:
        raise typer.BadParameter(
            f"{v!r} is not an ISO 8601 time (2026-12-01T02:00:00Z)", param_hint="--start"
        ) from None
    return (t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)).timestamp()


@silence_app.command("list")
def silence_list(
    db: DbOpt = DEFAULT_DB,
    json_out: JsonOpt = False,
    fmt: FormatOpt = "table",
    all_: Annotated[bool, typer.Option("--all", help="ended silences too")] = False,
) -> None:
    """List silences in force and those scheduled to start later (a maintenance window given ahead with
    `silence add --start`); `--all` adds the ended ones. STARTS is when each takes effect.

    Example: fleettool silence list --json
    """
    from fleettool.store.silences import listed_silences

    with open_store(db, read_only=True) as store:
        rows = [
            {**with_iso(r, "created", "until"), "starts": iso(r["created"])}
            for r in listed_silences(store, time.time(), past=all_)
        ]
    emit(
        rows,
        ["silence_id", "node", "gpu", "rule", "category", "starts", "until", "who", "reason"],
        as_json=json_out,
        fmt=fmt,
    )


@silence_app.command("expire")
def silence_expire(silence_id: Annotated[str, typer.Argument()], db: DbOpt = DEFAULT_DB) -> None:
    """End a silence now.

    Example: fleettool silence expire 9c0d1e2b4a5c
    """
    from fleettool.engine.silences import expire_silence

    with open_store(db, read_only=False, create=False) as store:
        if not expire_silence(store, silence_id, time.time()):
            raise die(f"no silence {silence_id!r}", ExitCode.BAD_INPUT)
    print(f"silence {silence_id} expired: its alerts show again", file=sys.stderr)


def register(app: typer.Typer) -> None:
    app.add_typer(alerts_app, name="alerts")
    app.add_typer(silence_app, name="silence")
