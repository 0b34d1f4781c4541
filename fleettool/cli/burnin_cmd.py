"""`fleettool burnin --node NAME`: prove a node with GEMM, HBM and all-reduce stress and strict verdicts."""

from __future__ import annotations

import contextlib
import json
import socket
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from fleettool.cli.common import DEFAULT_DB, die, hostname, need_tool, open_store, parse_duration
from fleettool.cli.exit_codes import ExitCode

BACKENDS = ("cuda", "cpu")
# fleettool.burnin.steps.ALL_TESTS, written out: importing the steps (torch-free, but ~40 ms of kernels and
# verdicts) only to print `--help` or parse `--tests` would cost every start-up (tests/test_cli_startup.py)
TESTS = ("gemm", "hbm", "allreduce", "dcgm")
DTYPES = ("bf16", "fp16", "tf32", "fp8", "fp32")
AR_TOOLS = ("torch", "nccl-tests")


def _check_choices(option: str, given: list[str], allowed: tuple[str, ...]) -> list[str]:
    """The comma list's items, each one of `allowed`, or a usage error naming the option."""
    items = [g.strip() for g in given if g.strip()]
    bad = [g for g in items if g not in allowed]
    if bad or not items:
        what = f"unknown {', '.join(map(repr, bad))}" if bad else "nothing given"
        raise typer.BadParameter(f"{what} (one of {', '.join(allowed)})", param_hint=option)
    return items


def parse_gpus(text: str | None) -> tuple[int, ...] | None:
    """--gpus: a comma list of NVML indices (0,3), or a usage error naming the option."""
    if text is None:
        return None
    items = [x.strip() for x in text.split(",")]
    if not items or not all(x.isdigit() for x in items):
        raise typer.BadParameter(
            f"{text!r} is not a comma list of GPU indices (NVML's, as nvidia-smi numbers them: 0,3)",
            param_hint="--gpus",
        )
    return tuple(dict.fromkeys(int(x) for x in items))


def gpus_passthrough(gpus: tuple[int, ...] | None) -> list[str]:
    """--gpus as a remote run is given it."""
    return [] if gpus is None else ["--gpus", ",".join(map(str, gpus))]


def _is_local(node: str) -> bool:
    names = {hostname(), socket.gethostname(), "localhost", "127.0.0.1"}
    with contextlib.suppress(OSError):
        names.add(socket.getfqdn())
    return node in names


def _print_table(rep: Any, code: int) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=f"burn-in {rep.node} ({rep.run_id})")
    for c in ("GPU", "test", "verdict", "figure", "floor", "reason"):
        t.add_column(c)
    colour = {
        "PASS": "green",
        "WARN": "yellow",
        "FAIL": "bold red",
        "SKIPPED": "cyan",
        "INCONCLUSIVE": "magenta",
    }
    for r in rep.results:
        t.add_row(
            "-" if r.gpu is None else str(r.gpu),
            escape(r.test),
            f"[{colour[r.verdict.value]}]{r.verdict.value}[/]",
            "" if r.figure is None else f"{r.figure:g} {r.unit}",
            "" if r.floor is None else f"{r.floor:g}",
            escape(r.reason),  # a reason may hold brackets: pip install 'fleettool[burnin]'
        )
    Console().print(t)
    verdicts = sorted({r.verdict.value for r in rep.results})
    print(f"burn-in {rep.node}: exit code {code} ({', '.join(verdicts) or 'no tests'})", file=sys.stderr)


def register(app: typer.Typer) -> None:
    @app.command()
    def burnin(
        ctx: typer.Context,
        node: Annotated[
            str | None,
            typer.Option(help="the node to prove (default: this host, run here; others need --via)"),
        ] = None,
        via: Annotated[
            str, typer.Option(help="local, ssh, slurm (srun -w NODE) or k8s (a Job pinned to NODE)")
        ] = "",
        backend: Annotated[
            str,
            typer.Option(
                help="cuda, or cpu: the same code paths on the CPU at small sizes (proves the tool, not a GPU: "
                "with no GPU floor its verdicts are WARN, not the PASS a node's return needs)"
            ),
        ] = "cuda",
        tests: Annotated[str, typer.Option(help=f"comma list of {', '.join(TESTS)}")] = ",".join(TESTS),
        gpus: Annotated[
            str | None,
            typer.Option(
                help="comma list of NVML GPU indices (as nvidia-smi numbers them): only those are stressed "
                "and judged (the all-reduce spans them); an index the node lacks is a usage error (2). "
                "Default: every GPU",
                show_default=False,
            ),
        ] = None,
        dtypes: Annotated[
            str | None,
            typer.Option(
                help="GEMM dtypes, a comma list of bf16, fp16, tf32, fp8, fp32 (fp8 where the GPU has it; "
                "tf32 and fp8 need a GPU). Default: bf16,fp16,tf32,fp8 (cuda), fp32,bf16 (cpu)",
                show_default=False,
            ),
        ] = None,
        duration: Annotated[
            str, typer.Option(help="per GEMM dtype and for HBM (the cpu backend runs at most 3s each)")
        ] = "30s",
        gemm_n: Annotated[int, typer.Option(min=1, help="GEMM size (n x n x n)")] = 8192,
        allreduce_max: Annotated[str, typer.Option(help="largest all-reduce message")] = "8G",
        dcgm_level: Annotated[int, typer.Option(min=1, max=4, help="dcgmi diag -r LEVEL")] = 1,
        allreduce_tool: Annotated[
            str, typer.Option(help="torch (torch.distributed), or nccl-tests (all_reduce_perf on PATH)")
        ] = "torch",
        db: Annotated[
            Path, typer.Option(help="store the results, telemetry and all-reduce table here")
        ] = DEFAULT_DB,
        no_store: Annotated[bool, typer.Option("--no-store", help="do not write a database")] = False,
        json_out: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
        cordon: Annotated[
            bool, typer.Option(help="k8s: cordon the node before, uncordon after a pass")
        ] = False,
        image: Annotated[
            str, typer.Option(help="k8s: the fleettool image")
        ] = "ghcr.io/fleettool/fleettool:latest",
        namespace: Annotated[
            str, typer.Option(help="k8s: namespace of the Job (one that enforces Pod Security restricted)")
        ] = "fleettool-burnin",
        partition: Annotated[str | None, typer.Option(help="slurm: partition")] = None,
        timeout: Annotated[str, typer.Option(help="remote runs: give up after this long")] = "2h",
        print_job: Annotated[bool, typer.Option("--print-job", help="k8s: print the Job and exit")] = False,
    ) -> None:
        """Stress and judge a node: GEMM per dtype (TFLOP/s, silent-data-corruption check within and across
        GPUs), HBM copy bandwidth, all-reduce busbw, DCGM diag where installed; telemetry during each test tells
        power capping (normal) from thermal or HW slowdown; a GPU another process is using is named (PIDs).
        Verdicts per GPU and test: PASS; WARN (marginal, or judged against a provisional floor); FAIL;
        SKIPPED (does not apply: no dcgmi, fp8 on an older GPU; counts for nothing unless nothing was
        tested); INCONCLUSIVE (could not say: a GPU busy with another process, a cross-GPU checksum split
        with no majority, an error). Exit 0 when every test PASSed, WARNed or did not apply; 1 on any FAIL;
        7 on any INCONCLUSIVE, or when nothing could be tested (no GPU): a machine with no GPU never passes.

        Example: fleettool burnin --node gpu-17 --via slurm --duration 60s
        """
        from fleettool.burnin import dispatch
        from fleettool.burnin.context import BurninConfig
        from fleettool.burnin.report import save, to_dict
        from fleettool.burnin.verdict import exit_code

        if node is None:
            if via not in ("", "local"):
                raise die(f"--via {via} needs --node: the node to prove", ExitCode.USAGE)
            node = hostname()
        try:
            dispatch.validate_node(node)
        except ValueError as e:
            raise die(str(e), ExitCode.USAGE) from None
        mode = via or ("local" if _is_local(node) else "")
        if mode == "":
            raise die(
                f"{node} is not this host ({hostname()}): say how to reach it with --via ssh|slurm|k8s",
                ExitCode.USAGE,
            )
        if mode == "local" and not _is_local(node):  # a CPU burn-in of this host stored under another node
            raise die(
                f"--via local runs here, on {hostname()}, and --node {node} is another host: reach it with "
                "--via ssh|slurm|k8s, or leave --node out",
                ExitCode.USAGE,
            )
        if mode not in ("local", "ssh", "slurm", "k8s"):
            raise die(f"--via {mode!r}: expected local, ssh, slurm or k8s", ExitCode.USAGE)
        secs = parse_duration(duration, "--duration")
        timeout_s = parse_duration(timeout, "--timeout")
        from fleettool.units import parse_size

        try:
            ar_max = parse_size(allreduce_max)
        except (ValueError, IndexError):
            ar_max = 0
        if ar_max <= 0:
            raise typer.BadParameter(
                f"not a size: {allreduce_max!r} (use e.g. 64M, 8G)", param_hint="--allreduce-max"
            )
        _check_choices("--backend", [backend], BACKENDS)
        wanted = _check_choices("--tests", tests.split(","), TESTS)
        gpu_list = parse_gpus(gpus)
        dtype_list = None if dtypes is None else _check_choices("--dtypes", dtypes.split(","), DTYPES)
        _check_choices("--allreduce-tool", [allreduce_tool], AR_TOOLS)
        # the external tools this run needs are there before anything starts (or the node is cordoned)
        if mode == "ssh":
            need_tool("ssh", f"--via ssh to reach {node}")
        elif mode == "slurm":
            need_tool("srun", f"--via slurm to run on {node}")
        elif mode == "k8s" and not print_job:
            need_tool("kubectl", f"--via k8s to run a Job on {node}")
        elif mode == "local":
            src = ctx.get_parameter_source("tests")  # asked for by name, not the default "where installed"
            if "dcgm" in wanted and src is not None and src.name != "DEFAULT":
                need_tool("dcgmi", "--tests dcgm", "install DCGM or leave dcgm out of --tests")
            if "allreduce" in wanted and allreduce_tool == "nccl-tests":
                need_tool("all_reduce_perf", "--allreduce-tool nccl-tests", "build nccl-tests or use torch")
        # --tests travels only when asked for by name: the remote side then requires dcgmi for an explicit dcgm,
        # and, given the default, runs DCGM diag where it is installed, as a local run does
        tests_src = ctx.get_parameter_source("tests")
        explicit_tests = tests_src is not None and tests_src.name != "DEFAULT"
        passthrough = [
            "--backend",
            backend,
            *(["--tests", tests] if explicit_tests else []),
            *gpus_passthrough(gpu_list),
            *(["--dtypes", ",".join(dtype_list)] if dtype_list else []),  # else the remote backend's default
            "--duration",
            duration,
            "--gemm-n",
            str(gemm_n),
            "--allreduce-max",
            allreduce_max,
            "--dcgm-level",
            str(dcgm_level),
            "--allreduce-tool",
            allreduce_tool,
        ]
        if mode == "local":
            cfg = BurninConfig(
                node=node,
                backend=backend,
                tests=tuple(t.strip() for t in tests.split(",") if t.strip()),
                dtypes=None if dtype_list is None else tuple(dtype_list),
                seconds=secs,
                gemm_n=gemm_n,
                ar_max=ar_max,
                dcgm_level=dcgm_level,
                ar_tool=allreduce_tool,
                gpus=gpu_list,
            )
            from fleettool.burnin.runner import NoSuchGpu

            try:
                rep = _run_local(cfg, db, no_store, json_out)
            except NoSuchGpu as e:
                raise die(f"--gpus: {e}", ExitCode.USAGE) from None
        else:
            rep = _run_remote(
                mode,
                node,
                passthrough,
                timeout_s,
                cordon,
                image,
                namespace,
                partition,
                print_job,
            )
            if rep is None:
                return
            if not no_store:
                with open_store(db, read_only=False, say_created=True) as store:
                    save(store, rep)
            if mode == "k8s" and cordon and exit_code(rep.results) == 0:
                dispatch.cordon(node, False)
        code = exit_code(rep.results)
        if json_out:
            json.dump(to_dict(rep, code), sys.stdout, indent=1, default=str)
            print()
        else:
            _print_table(rep, code)
        raise typer.Exit(code)


def _run_local(cfg: Any, db: Path, no_store: bool, json_out: bool) -> Any:

    if sys.stderr.isatty() and not json_out:
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task("burn-in", total=1.0)
            prog = lambda msg, frac: bar.update(task, completed=frac, description=msg)  # noqa: E731
            return _with_store(cfg, db, no_store, prog)
    prog = lambda msg, frac: print(f"fleettool burnin: {frac:4.0%} {msg}", file=sys.stderr, flush=True)  # noqa: E731
    return _with_store(cfg, db, no_store, prog)


def _with_store(cfg: Any, db: Path, no_store: bool, prog: Any) -> Any:
    from fleettool.burnin.runner import run_burnin

    if no_store:
        return run_burnin(cfg, None, prog)
    with open_store(db, read_only=False, say_created=True) as store:
        return run_burnin(cfg, store, prog)


def _run_remote(
    mode: str,
    node: str,
    passthrough: list[str],
    timeout_s: float,
    cordon: bool,
    image: str,
    namespace: str,
    partition: str | None,
    print_job: bool,
) -> Any:
    from fleettool.burnin import dispatch
    from fleettool.burnin.report import from_dict

    try:
        if mode == "ssh":
            doc = dispatch.run_argv(dispatch.ssh_argv(node, passthrough), timeout_s)
        elif mode == "slurm":
            doc = dispatch.run_argv(dispatch.slurm_argv(node, passthrough, partition), timeout_s)
        else:
            job = dispatch.k8s_job(node, passthrough, image=image, namespace=namespace)
            if print_job:
                json.dump(job, sys.stdout, indent=1)
                print()
                return None
            if cordon:
                dispatch.cordon(node, True)
            doc = dispatch.run_k8s(job, timeout_s)
    except dispatch.DispatchError as e:
        raise die(f"burn-in on {node} via {mode}: {e}", ExitCode.NOT_TESTED) from None
    except Exception as e:  # kubectl errors and the like
        raise die(f"burn-in on {node} via {mode}: {e}", ExitCode.NOT_TESTED) from None
    return from_dict(doc)
