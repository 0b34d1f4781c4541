"""`fleettool remediate NODE`: choose the first rung of the ladder, print the plan, and with --yes run it until a
proof closes a rung (exit 0) or the ladder ends in RMA / a refusal (exit 1)."""

from __future__ import annotations

import sys
import time
from typing import Annotated

import typer

from fleettool.cli.common import DEFAULT_DB, die, open_store, parse_duration
from fleettool.cli.exit_codes import ExitCode
from fleettool.cli.options import DbOpt, JsonOpt, WhoOpt
from fleettool.cli.output import print_json
from fleettool.model import who_acts

RUNGS = ("reset", "reboot", "power-cycle", "rma")
VIAS = ("local", "ssh", "slurm", "k8s")


def register(app: typer.Typer) -> None:
    @app.command()
    def remediate(
        node: Annotated[str, typer.Argument(help="the node")],
        gpu: Annotated[
            int | None, typer.Option("--gpu", help="the GPU (default: the worst firing alert's)")
        ] = None,
        via: Annotated[str, typer.Option("--via", help="local, ssh, slurm or k8s")] = "ssh",
        dry_run: Annotated[bool, typer.Option("--dry-run", help="print the plan, run nothing")] = False,
        yes: Annotated[bool, typer.Option("--yes", help="run the plan (without it: print it)")] = False,
        json_out: JsonOpt = False,
        db: DbOpt = DEFAULT_DB,
        by: WhoOpt = "",
        quiet: Annotated[str, typer.Option("--quiet", help="the proof's XID quiet window")] = "10m",
        drain_timeout: Annotated[
            str, typer.Option("--drain-timeout", help="how long the GPU's processes may take to end")
        ] = "10m",
        boot_timeout: Annotated[
            str, typer.Option("--boot-timeout", help="how long a rebooted node may take to come back")
        ] = "20m",
        bmc: Annotated[str | None, typer.Option("--bmc", help="the node's BMC (power-cycle rung)")] = None,
        bmc_method: Annotated[str, typer.Option("--bmc-method", help="ipmi or redfish")] = "ipmi",
        bmc_user: Annotated[
            str | None,
            typer.Option("--bmc-user", help="the BMC user for ipmitool (the password: $IPMI_PASSWORD)"),
        ] = None,
        from_rung: Annotated[
            str | None, typer.Option("--from", help="start at this rung: reset, reboot, power-cycle, rma")
        ] = None,
        per_rack: Annotated[
            int, typer.Option("--per-rack", help="blast guard: remediations open at once per rack")
        ] = 1,
        fleet_pct: Annotated[
            float,
            typer.Option("--fleet-pct", help="blast guard: percent of the fleet in remediation at once"),
        ] = 5.0,
    ) -> None:
        """Bring a node (or one GPU) back: reset -> reboot -> power-cycle -> rma, each rung closed only by a proof
        (recovery action None, no new XID for --quiet, a per-GPU burn-in at the floors, NVLink links back).
        Without --yes (or with --dry-run) it prints the plan and runs nothing. Exit 0 proven, 1 not proven or
        refused by the blast guard, 2 usage, 8 a tool missing.

        Example: fleettool remediate gpu-17 --gpu 3 --via slurm --db fleet.duckdb --yes
        """
        from fleettool.burnin.dispatch import ToolMissing, validate_node
        from fleettool.remediate import ladder, loop
        from fleettool.remediate import plan as plans
        from fleettool.remediate.model import Rung, Via
        from fleettool.remediate.runner import NodeRunner

        if via not in VIAS:
            raise die(f"--via {via!r}: one of {', '.join(VIAS)}", ExitCode.USAGE)
        if from_rung is not None and from_rung not in RUNGS:
            raise die(f"--from {from_rung!r}: one of {', '.join(RUNGS)}", ExitCode.USAGE)
        if bmc_method not in ("ipmi", "redfish"):
            raise die(f"--bmc-method {bmc_method!r}: ipmi or redfish", ExitCode.USAGE)
        if gpu is not None and gpu < 0:
            raise die(f"--gpu {gpu}: a GPU index is 0 or more", ExitCode.USAGE)
        if per_rack < 1 or not 0 < fleet_pct <= 100:
            raise die("--per-rack is at least 1 and --fleet-pct in (0, 100]", ExitCode.USAGE)
        if bmc is not None:
            from fleettool.remediate.bmc import BmcError, _check_bmc, credentials_problem

            try:
                _check_bmc(bmc, bmc_method)
            except BmcError as e:
                raise die(f"--bmc: {e}", ExitCode.USAGE) from None
            if bmc_method == "ipmi" and not bmc_user:
                raise die(
                    "--bmc with ipmitool needs --bmc-user (the password comes from IPMI_PASSWORD)",
                    ExitCode.USAGE,
                )
            missing = credentials_problem(bmc_method) if yes and not dry_run else None
            if missing:
                raise die(f"--bmc {bmc}: {missing}; nothing was run", ExitCode.UNAVAILABLE)
        quiet_s = parse_duration(quiet, "--quiet")
        drain_s = parse_duration(drain_timeout, "--drain-timeout")
        boot_s = parse_duration(boot_timeout, "--boot-timeout")
        try:
            validate_node(node)
        except ValueError as e:
            raise die(str(e), ExitCode.USAGE) from None
        if not db.exists():
            raise die(
                f"{db}: no such database (--db): remediation reads the fleet's alerts from its store",
                ExitCode.BAD_INPUT,
            )
        run_it = yes and not dry_run
        popts = plans.Options(bmc=bmc, bmc_method=bmc_method, bmc_user=bmc_user)
        opts = loop.LoopOptions(
            who=by or who_acts(), quiet_s=quiet_s, drain_timeout_s=drain_s, boot_timeout_s=boot_s,
            per_rack=per_rack, fleet_pct=fleet_pct, plan=popts,
        )  # fmt: skip
        runner = NodeRunner(node, Via(via))
        with open_store(db, read_only=not run_it, create=False) as store:
            try:
                choice = ladder.choose(
                    store, node, gpu=gpu, runner=runner, from_rung=Rung(from_rung) if from_rung else None
                )
                first = plans.build(
                    node, choice.gpu, choice.rung, Via(via), choice.why, runner, opts=popts,
                    alerts=choice.alerts, incident_id=choice.incident_id,
                    recovery_action=choice.recovery_action, uuid=choice.uuid,
                )  # fmt: skip
                blast = loop.guard_line(store, node, opts)
                if not run_it:
                    if json_out:
                        print_json({"plan": plans.to_dict(first, popts) | {"guard": blast}, "ran": False})
                    else:
                        print(plans.render(first, popts) + f"\n  blast guard: {blast}")
                        print("dry run: nothing was run" if dry_run else "run again with --yes to do it")
                    return
                if not json_out:
                    print(plans.render(first, popts) + f"\n  blast guard: {blast}")
                    sys.stdout.flush()
                out = loop.run(store, first, choice, runner, opts, clock=time.time, sleep=time.sleep)
            except ladder.NoRung as e:
                raise die(str(e), ExitCode.FAILURE) from None
            except ladder.WhichGpu as e:
                raise die(str(e), ExitCode.USAGE) from None
            except ToolMissing as e:
                raise die(f"{e}; nothing more was run", ExitCode.UNAVAILABLE) from None
            except RuntimeError as e:  # no agent pod to exec in (k8s)
                raise die(str(e), ExitCode.UNAVAILABLE) from None
        if json_out:
            print_json({"plan": plans.to_dict(first, popts), "ran": True, "outcome": out.to_dict()})
        elif out.state == "refused":
            pass
        else:
            print(out.message)
        if out.state == "refused":
            raise die(f"remediate {node} refused: {out.message}; nothing was run", ExitCode.FAILURE)
        if out.exit_code != 0:
            raise typer.Exit(int(ExitCode.FAILURE))
