"""`fleettool node NAME ACTION` (the lifecycle, with an audit trail) and `fleettool report` (fleet statistics)."""

from __future__ import annotations

import os
import time
from typing import Annotated

import typer

from fleettool.cli.common import DEFAULT_DB, die, open_store
from fleettool.cli.exit_codes import ExitCode
from fleettool.cli.options import DbOpt, FleetInsteadOpt, JsonOpt, ReasonOpt, WhoOpt
from fleettool.cli.output import print_json, print_table

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
    ) -> None:
        """A node's lifecycle: healthy -> suspect -> cordoned -> in-repair -> burn-in -> healthy, or -> rma. Only
        valid transitions; each recorded with who, when and why. Kubernetes and Slurm side effects only with
        --k8s / --slurm (run before the state changes; a failure leaves it unchanged). `return` from cordoned
        or burn-in needs a burn-in that PASSed since the node was taken out, or --force -m REASON.

        Example: fleettool node gpu-17 cordon --by alice -m "XID 79 twice" --slurm
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
        with open_store(db, read_only=VERBS[action] is None) as store:
            if VERBS[action] is not None:
                try:
                    transition(
                        store,
                        name,
                        str(VERBS[action]),
                        who=by or os.environ.get("USER") or "unknown",
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
            st = current(store, name)
            trail = audit(store, name)
        out = {
            "node": name,
            "state": st.state,
            "since": str(st.since) if st.since else None,
            "who": st.who,
            "reason": st.reason,
            "audit": [{k: (str(v) if k == "ts" else v) for k, v in r.items()} for r in trail],
        }
        if json_out:
            print_json(out)
        else:
            print(f"{name}: {st.state}" + (f" since {st.since} ({st.who}: {st.reason})" if st.since else ""))
            for r in trail:
                print(
                    f"  {r['ts']}  {r['from_state']} -> {r['to_state']}  {r['who']}: {r['reason']}"
                    + (f"  [{r['side_effects']}]" if r["side_effects"] else "")
                )

    @app.command()
    def report(
        db: DbOpt = DEFAULT_DB,
        fleet: FleetInsteadOpt = None,
        json_out: JsonOpt = False,
    ) -> None:
        """Fleet statistics: availability per node and fleet, MTBF, incidents by category, and the interruption
        timeline (overlapping incidents of a node merged).

        Example: fleettool report --db fleet.duckdb --json
        """
        from fleettool.stats import report as make_report

        if fleet:
            from fleettool.cli.fleet_cmd import open_fleet_or_die

            with open_fleet_or_die(fleet) as store:
                rep = make_report(store)
        else:
            with open_store(db, read_only=True) as store:
                rep = make_report(store)
        if json_out:
            print_json(rep, default=str)
            return
        f = rep.get("fleet") or {}
        if rep.get("window") is None:
            print("no telemetry, alerts or lifecycle moves in the store: nothing to report")
            return
        mtbf = f"{f['mtbf_s']:g} s" if f.get("mtbf_s") is not None else "n/a (no interruptions)"
        cats = (
            ", ".join(f"{k} {v}" for k, v in sorted((f.get("incidents_by_category") or {}).items())) or "none"
        )
        print(
            f"fleet: {f.get('nodes', 0)} nodes, availability {f.get('availability')}, "
            f"{f.get('interruptions', 0)} interruptions, MTBF {mtbf}, pages by category: {cats}"
        )
        if rep.get("nodes"):
            print_table(rep["nodes"], ["node", "availability", "interruptions", "down_s", "mtbf_s"])
