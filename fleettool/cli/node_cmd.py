"""`fleettool node NAME ACTION` (the lifecycle, with an audit trail) and `fleettool report` (fleet statistics)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from fleettool.cli.common import DEFAULT_DB, die, open_store
from fleettool.cli.exit_codes import ExitCode
from fleettool.cli.extras import require_extra
from fleettool.cli.options import DbOpt, FleetInsteadOpt, FormatOpt, JsonOpt, ReasonOpt, WhoOpt
from fleettool.cli.output import emit, iso, print_json, print_table, with_iso
from fleettool.model import who_acts

VERBS = {
    "status": None,
    "suspect": "suspect",
    "cordon": "cordoned",
    "repair": "in-repair",
    "burnin": "burn-in",
    "return": "healthy",
    "rma": "rma",
}


def register(app: typer.Typer) -> None:
    @app.command()
    def node(
        name: Annotated[str, typer.Argument(help="the node")],
        action: Annotated[
            str, typer.Argument(help="status, suspect, cordon, repair, burnin, return or rma")
        ] = "status",
        db: DbOpt = DEFAULT_DB,
        by: WhoOpt = "",
        reason: ReasonOpt = "",
        k8s: Annotated[bool, typer.Option("--k8s", help="also kubectl cordon/uncordon the node")] = False,
        slurm: Annotated[bool, typer.Option("--slurm", help="also scontrol drain/resume the node")] = False,
        force: Annotated[
            bool,
            typer.Option(
                "--force",
                help="return without a PASS burn-in since the repair (needs -m; recorded as forced)",
            ),
        ] = False,
        json_out: JsonOpt = False,
        fmt: FormatOpt = "table",
        bundle: Annotated[
            Path | None,
            typer.Option(
                "--bundle",
                help="with rma: also write the evidence for the vendor to this .tar.gz (alerts, events, kernel-log "
                "lines, burn-ins, remediations, serials and UUIDs); on a node already in rma, only the bundle",
            ),
        ] = None,
        bundle_gpu: Annotated[
            int | None, typer.Option("--gpu", min=0, help="with --bundle: the GPU the RMA is for")
        ] = None,
    ) -> None:
        """A node's lifecycle: healthy -> suspect -> cordoned -> in-repair -> burn-in -> healthy, or -> rma. Only
        valid transitions; each recorded with who, when and why. Kubernetes and Slurm side effects only with
        --k8s / --slurm (run before the state changes; a failure leaves it unchanged). `return` from cordoned
        or burn-in needs a burn-in that PASSed since the node was taken out, or --force -m REASON.

        Example: fleettool node gpu-17 cordon --by alice -m "XID 79 twice" --slurm
        Example: fleettool node gpu-17 rma --bundle gpu-17-rma.tar.gz --gpu 3 -m "XID 79 after a power cycle"
        """
        from fleettool.burnin.dispatch import validate_node
        from fleettool.lifecycle import ToolMissing, TransitionError, audit, current, transition

        if action not in VERBS:
            raise die(f"unknown action {action!r} (one of {', '.join(VERBS)})", ExitCode.USAGE)
        if force and not reason.strip():
            raise die(
                "--force needs a reason: -m 'why it goes back without a passing burn-in'", ExitCode.USAGE
            )
        try:
            validate_node(name)
        except ValueError as e:
            raise die(str(e), ExitCode.USAGE) from None
        if bundle is not None and action != "rma":
            raise die(f"--bundle goes with rma (fleettool node {name} rma --bundle FILE)", ExitCode.USAGE)
        if bundle_gpu is not None and bundle is None:
            raise die("--gpu goes with rma --bundle FILE", ExitCode.USAGE)
        from fleettool.remediate.rma import BundleError, check_bundle, write_bundle
        from fleettool.store.nodes import known_nodes, node_known

        if VERBS[action] is not None and not db.exists():  # a typo in --db: never a new, throwaway store
            raise die(
                f"{db}: no such database (--db): a lifecycle move is made in the fleet's store, which the agent "
                "or replay creates; nothing was created",
                ExitCode.BAD_INPUT,
            )
        with open_store(db, read_only=VERBS[action] is None, create=False) as store:
            if not node_known(store, name):
                if VERBS[action] is None:
                    known = known_nodes(store)
                    raise die(
                        f"{name}: not in {db} (no telemetry, events, alerts, burn-ins or lifecycle moves); "
                        + (f"nodes it has: {', '.join(known)}" if known else "the store has no nodes yet"),
                        ExitCode.BAD_INPUT,
                    )
                new_node = True
            else:
                new_node = False
            try:  # a bad --bundle path or --gpu is found before the move, never after it
                if bundle is not None:
                    check_bundle(store, name, bundle, gpu=bundle_gpu)
            except BundleError as e:
                raise die(f"--bundle {e}", ExitCode.BAD_INPUT) from None
            if VERBS[action] is not None and not (bundle is not None and current(store, name).state == "rma"):
                try:
                    transition(
                        store,
                        name,
                        str(VERBS[action]),
                        who=by or who_acts(),
                        reason=reason,
                        now=time.time(),
                        k8s=k8s,
                        slurm=slurm,
                        force=force,
                    )
                except ToolMissing as e:
                    raise die(str(e), ExitCode.UNAVAILABLE) from None
                except TransitionError as e:
                    raise die(str(e), ExitCode.FAILURE) from None
                if new_node:  # said once the move is made: a failure stays one line
                    print(
                        f"fleettool: note: {name} is new to {db}: its lifecycle starts here", file=sys.stderr
                    )
            if bundle is not None:
                m = write_bundle(store, name, bundle, gpu=bundle_gpu)
                known = [f"GPU {g['gpu']} serial {g['serial']}" for g in m["gpus"] if g["serial"]]
                n = len(m["gpus"])
                gpus = f"{n} GPU{'' if n == 1 else 's'}" + (
                    f", serial known for {len(known)}: {', '.join(known)}" if known else ", no serial known"
                )
                print(
                    f"fleettool: wrote {bundle} ({len(m['files'])} files; {gpus if n else 'no GPUs'})",
                    file=sys.stderr,
                )
            st = current(store, name)
            trail = audit(store, name)
            from fleettool.store.alerts import list_alerts

            firing = list_alerts(store, state="firing", node=name)
        out = {
            "node": name,
            "state": st.state,
            "since": iso(st.since),
            "who": st.who,
            "reason": st.reason,
            "audit": [with_iso(r, "ts") for r in trail],
        }
        if fmt in ("csv", "parquet"):  # the audit trail, one row per move
            moves = [with_iso(r, "ts") for r in trail]
            emit(
                moves,
                ["ts", "from_state", "to_state", "who", "reason", "side_effects"],
                as_json=False,
                fmt=fmt,
            )
        elif json_out or fmt == "json":
            print_json(out)
        else:
            since = f" since {iso(st.since)} ({_by(st.who, st.reason)})" if st.since else " (never moved)"
            print(f"{name}: lifecycle {st.state}{since}")
            if firing:
                worst = ", ".join(f"{a['rule']} ({a['severity']})" for a in firing[:5])
                more = f" and {len(firing) - 5} more" if len(firing) > 5 else ""
                print(
                    f"  {len(firing)} alert{'s' if len(firing) != 1 else ''} firing: {worst}{more} "
                    f"(fleettool alerts --db {db} --node {name})"
                )
            for r in trail:
                print(
                    f"  {iso(r['ts'])}  {r['from_state']} -> {r['to_state']}  {_by(r['who'], r['reason'])}"
                    + (f"  [{r['side_effects']}]" if r["side_effects"] else "")
                )

    @app.command()
    def report(
        db: DbOpt = DEFAULT_DB,
        fleet: FleetInsteadOpt = None,
        json_out: JsonOpt = False,
        incidents: Annotated[
            Path | None,
            typer.Option(
                help="an incident log instead of the store: the InfiniteHBD trace's JSON, or a CSV "
                "node,start,end,category[,subcategory]"
            ),
        ] = None,
        servers: Annotated[
            int | None,
            typer.Option(
                min=1,
                help="the fleet's size (a log names only the servers that failed; for a store, default: the nodes seen)",
            ),
        ] = None,
        html_out: Annotated[
            Path | None, typer.Option("--html", help="also write a self-contained HTML page with the charts")
        ] = None,
        span_days: Annotated[
            float | None,
            typer.Option(
                "--span-days",
                min=0.001,
                help="with --incidents: the period the fleet was watched, in days (default: the log's own; a "
                "CSV's runs from its first start to its last time)",
            ),
        ] = None,
        fmt: FormatOpt = "table",
    ) -> None:
        """Fleet statistics: availability per node and fleet, MTBF, incidents by category, and the interruption
        timeline (overlapping incidents of a node merged). With --incidents FILE --servers N: a reliability
        report of an incident log (MTBF, availability, classes, repeat offenders, repair times) with charts;
        with --format csv, the log's faults as a CSV it reads back (times ISO 8601 UTC; the trace's relative days
        counted from 1970-01-01).

        Example: fleettool report --incidents fault_trace.json --servers 400 --html report.html
        """
        require_extra("analytics", "report")
        if incidents is not None:
            _incident_report(incidents, servers, json_out or fmt == "json", html_out, fmt, span_days)
            return
        if html_out is not None:
            raise die("--html goes with --incidents FILE", ExitCode.USAGE)
        if span_days is not None:
            raise die("--span-days goes with --incidents FILE", ExitCode.USAGE)
        from fleettool.stats import report as make_report

        if fleet:
            from fleettool.cli.fleet_cmd import open_fleet_or_die

            with open_fleet_or_die(fleet) as store:
                rep = make_report(store, servers=servers)
        else:
            from fleettool.remediation_stats import remediation_report

            with open_store(db, read_only=True) as store:
                rep = make_report(store, servers=servers)
                rep["remediation"] = remediation_report(store)  # episodes are the store's, not the fleet's
        if json_out or fmt == "json":  # times ISO 8601, as every other command's JSON
            print_json(_iso_times(rep), default=str)
            return
        if fmt in ("csv", "parquet"):  # the per-node figures, one row per node
            cols = ["node", "availability", "interruptions", "down_s", "mtbf_s"]
            emit(rep.get("nodes") or [], cols, as_json=False, fmt=fmt)
            return
        f = rep.get("fleet") or {}
        if rep.get("window") is None:
            print("no telemetry, alerts or lifecycle moves in the store: nothing to report")
            _print_remediation(rep.get("remediation"))
            return
        from fleettool.units import days, human_duration, percent

        mtbf = human_duration(f["mtbf_s"]) if f.get("mtbf_s") is not None else "n/a (no interruptions)"
        cats = (
            ", ".join(f"{k} {v}" for k, v in sorted((f.get("incidents_by_category") or {}).items())) or "none"
        )
        print(
            f"fleet: {f.get('nodes', 0)} node{'' if f.get('nodes', 0) == 1 else 's'}, availability {percent(f.get('availability'))}, "
            f"{f.get('interruptions', 0)} interruptions, MTBF {mtbf}, pages by category: {cats}"
        )
        if rep.get("nodes"):
            print_table(
                rep["nodes"],
                [
                    "node",
                    ("availability", lambda n: percent(n.get("availability"))),
                    "interruptions",
                    ("down", lambda n: human_duration(n.get("down_s"))),
                    ("mtbf", lambda n: human_duration(n.get("mtbf_s"))),
                ],
            )
        rel = rep["reliability"]
        if rel["faults"]:
            rd = rel["repair_days"]
            print(
                f"reliability: {rel['faults']} faults (pages and times out of service, overlapping ones apart) "
                f"on {rel['servers_affected']} of {rel['servers']} servers, "
                f"MTBF {days(rel['mtbf_days'])}, repair time median {days(rd['median'])} / p90 {days(rd['p90'])} "
                "(report --incidents FILE for an incident log)"
            )
        _print_remediation(rep.get("remediation"))


def _print_remediation(rem: dict[str, Any] | None) -> None:
    """The remediation figures (fleettool.remediation_stats): the fleet's line, then a row per node."""
    if not rem or not rem["fleet"]["episodes"]:
        return
    from fleettool.units import human_duration

    def tts(f: dict[str, Any], q: str) -> str:
        return human_duration(f["time_to_service_s"][q])

    def rungs(f: dict[str, Any]) -> str:
        return ", ".join(f"{k} {v}" for k, v in f["rungs"].items())

    f = rem["fleet"]
    print(
        f"remediation: {f['episodes']} episode{'' if f['episodes'] == 1 else 's'} ({f['proven']} proven, {f['failed']} failed, {f['stopped']} "
        f"stopped, {f['open']} open); time to service (page to proven return) median {tts(f, 'median')} / p90 "
        f"{tts(f, 'p90')} over {f['time_to_service_s']['n']}; rungs tried: {rungs(f)}; re-failures within 24 h "
        f"of a proven return: {f['refailures_24h']}"
    )
    cols: list[Any] = ["node", "episodes", "proven", "failed", "open"]
    cols += [("tts median", lambda n: tts(n, "median")), ("tts p90", lambda n: tts(n, "p90"))]
    cols += [(k, lambda n, k=k: n["rungs"].get(k, 0)) for k in f["rungs"]]
    cols.append(("refail 24h", lambda n: n["refailures_24h"]))
    print_table(rem["nodes"], cols, drop=("rma", "power-cycle", "failed", "open", "tts p90"))


def _iso_times(rep: dict[str, Any]) -> dict[str, Any]:
    """The store report with its unix-second times (window, timeline) as ISO 8601 UTC strings."""
    import datetime as dt

    def z(t: float | None) -> str | None:
        return None if t is None else iso(dt.datetime.fromtimestamp(t, dt.timezone.utc).replace(tzinfo=None))

    out = dict(rep)
    if rep.get("window") is not None:
        out["window"] = [z(t) for t in rep["window"]]
    out["timeline"] = [
        {**r, "from": z(r.get("from")), "to": z(r.get("to"))} for r in rep.get("timeline") or []
    ]
    return out


def _by(who: object, reason: object) -> str:
    """'alice: XID 79 twice', or 'alice' when no reason was given."""
    return f"{who}: {reason}" if reason else str(who)


def _incident_report(
    path: Path,
    servers: int | None,
    json_out: bool,
    html_out: Path | None,
    fmt: str = "table",
    span_days: float | None = None,
) -> None:
    from fleettool.reliability import IncidentLogError, TooFewServers, fault_rows, read_incidents, summarize
    from fleettool.reliability_plots import charts, page, terminal

    if servers is None:
        raise die("--incidents needs --servers N: a log names only the servers that failed", ExitCode.USAGE)
    if path.is_dir():
        raise die(f"{path}: is a directory, not an incident log", ExitCode.BAD_INPUT)
    if not path.is_file():
        raise die(f"{path}: no such file", ExitCode.BAD_INPUT)
    if html_out is not None and not html_out.parent.is_dir():
        raise die(f"--html {html_out}: {html_out.parent} does not exist", ExitCode.BAD_INPUT)
    try:
        df, span = read_incidents(path)
        extent = float(df["end"].max() - df["start"].min())  # type: ignore[operator,arg-type]
        if span_days is not None and span_days < extent:
            raise die(
                f"--span-days {span_days:g} is shorter than the log ({extent:.2f} days from its first fault to "
                "its last time)",
                ExitCode.USAGE,
            )
        rep = summarize(df, servers, span if span_days is None else span_days)
    except IncidentLogError as e:
        raise die(str(e), ExitCode.BAD_INPUT) from None
    except TooFewServers as e:
        raise die(str(e), ExitCode.USAGE) from None
    if html_out is not None:
        html_out.write_text(page(rep, f"fleet reliability: {path.name}"), encoding="utf-8")
        print(f"fleettool: wrote {html_out} (the figures and {len(charts(rep))} charts)", file=sys.stderr)
    if json_out:
        print_json(rep)
        return
    if fmt in ("csv", "parquet"):  # the faults themselves, in the CSV form --incidents reads back
        emit(fault_rows(df), [], as_json=False, fmt=fmt)
        return
    from fleettool.units import days, percent

    ro, rd = rep["repeat_offenders"], rep["repair_days"]
    share = f"{ro['top_10pct_share']:.1%}" if ro["top_10pct_share"] is not None else "-"
    print(
        f"{rep['faults']} faults on {rep['servers_affected']} of {rep['servers']} servers over "
        f"{days(rep['span_days'])}: MTBF {days(rep['mtbf_days'])} (server time per fault), availability "
        f"{percent(rep['availability'])}\n"
        f"repair time: median {days(rd['median'])}, mean {days(rd['mean'])}, p90 {days(rd['p90'])}; the top 10 % of affected "
        f"servers ({ro['top_10pct_servers']}) hold {share} of the faults; {ro['servers_5plus']} servers have 5+"
    )
    print_table([{"class": k, "faults": v} for k, v in rep["by_class"].items()], ["class", "faults"])
    print(terminal(rep))
