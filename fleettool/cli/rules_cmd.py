"""`fleettool rules list|check|test|export`: the rule set as data, linted and unit-tested."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fleettool.cli.common import DEFAULT_DB, die, open_store
from fleettool.cli.exit_codes import ExitCode
from fleettool.cli.options import DbOpt, FormatOpt, JsonOpt, RulesOpt
from fleettool.cli.output import emit

if TYPE_CHECKING:
    from fleettool.engine.rules import Rule

rules_app = typer.Typer(help="Inspect, lint, test and export the alert rules.", no_args_is_help=True)


def _load(paths: list[Path] | None) -> list[Rule]:
    """The rules of these files (the built-in set when None), or exit 3 naming the file that is wrong."""
    from fleettool.engine.rules import RuleError, load_rules

    for p in paths or []:
        if not p.exists():
            raise die(f"{p}: no such file or directory (--rules)", ExitCode.BAD_INPUT)
    try:
        rules = load_rules(paths)
    except UnicodeDecodeError:
        raise die(f"{_undecodable(paths or [])}: not a text (YAML) file", ExitCode.BAD_INPUT) from None
    except (RuleError, OSError) as e:
        raise die(str(e), ExitCode.BAD_INPUT) from None
    if paths and not rules:
        raise die(
            f"no rules in {', '.join(map(str, paths))} (a rule file is YAML with groups: [{{rules: [...]}}])",
            ExitCode.BAD_INPUT,
        )
    return rules


def _undecodable(paths: list[Path]) -> str:
    """Which of the rule files given is not UTF-8 text (to name it)."""
    for p in paths:
        for f in sorted(p.glob("*.y*ml")) if p.is_dir() else [p]:
            try:
                f.read_text()
            except UnicodeDecodeError:
                return str(f)
    return ", ".join(map(str, paths))


@rules_app.command("list")
def list_rules(rules: RulesOpt = None, json_out: JsonOpt = False, fmt: FormatOpt = "table") -> None:
    """List the rules: name, kind, severity, category, action, runbook.

    Example: fleettool rules list --json
    """
    rs = _load(rules)
    rows = [
        {
            "alert": r.alert,
            "kind": r.kind,
            "severity": r.severity.value,
            "category": r.category.value,
            "action": r.action.value,
            "for": r.for_s,
            "incident": r.incident_key,
            "runbook": r.runbook,
            "source": r.source,
        }
        for r in rs
    ]
    emit(rows, ["alert", "kind", "severity", "category", "action"], as_json=json_out, fmt=fmt)


@rules_app.command()
def check(rules: RulesOpt = None) -> None:
    """Lint the rules: schema, unique names, known metrics, a runbook for every rule and a rule for every
    runbook, every rule covered by a test with a must-not-fire case. Exit 1 on any problem.

    Example: fleettool rules check
    """
    from fleettool.engine.rules import check_rules
    from fleettool.engine.ruletest import builtin_test_files, coverage

    rs = _load(rules)
    problems = check_rules(rs)
    if rules is None:
        problems += coverage(rs, builtin_test_files())
    for p in problems:
        print(p)
    print(f"{len(rs)} rules, {len(problems)} problems", file=sys.stderr)
    if problems:
        raise typer.Exit(int(ExitCode.FAILURE))


@rules_app.command()
def test(
    files: Annotated[
        list[Path] | None, typer.Argument(help="test files (default: the built-in rules/tests)")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Run rule unit tests written in promtool's format (input_series, alert_rule_test, exp_alerts; empty
    exp_alerts = must not fire), extended with input_events, input_nccl_runs and recorded input_files.

    Example: fleettool rules test rules/tests/thermal.test.yaml
    """
    from fleettool.engine.rules import RuleError
    from fleettool.engine.ruletest import builtin_test_files, run_test_file

    paths = files or builtin_test_files()
    for p in files or []:
        if not p.is_file():
            what = "is a directory (give the test files)" if p.is_dir() else "no such file"
            raise die(f"{p}: {what}", ExitCode.BAD_INPUT)
    failed = 0
    unreadable = 0
    total = 0
    for p in paths:  # one bad file does not stop the others; it is named, and the exit is 3
        try:
            results = run_test_file(p)
        except (RuleError, OSError, KeyError, ValueError, TypeError, AttributeError) as e:
            print(f"fleettool: {p}: not a rule test file: {' '.join(str(e).split())}", file=sys.stderr)
            unreadable += 1
            continue
        for r in results:
            total += 1
            if not r.ok:
                failed += 1
                print(f"FAIL {p.name} test {r.test} {r.alertname} @ {r.eval_time:g}s: {r.message}")
            elif verbose:
                print(f"ok   {p.name} test {r.test} {r.alertname} @ {r.eval_time:g}s")
    if unreadable:
        raise typer.Exit(int(ExitCode.BAD_INPUT))
    print(f"{total - failed}/{total} rule tests passed", file=sys.stderr)
    if failed:
        raise typer.Exit(int(ExitCode.FAILURE))


@rules_app.command()
def export(
    prometheus: Annotated[
        bool, typer.Option("--prometheus", help="Prometheus alerting rules (the only format)")
    ] = True,
    rules: RulesOpt = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="write here instead of stdout")] = None,
) -> None:
    """Write the rules PromQL can express as Prometheus alerting rules over the agent's /metrics names.

    Example: fleettool rules export --prometheus -o fleettool-rules.yml
    """
    from fleettool.engine.promql import export_prometheus

    text, skipped = export_prometheus(_load(rules))
    if out:
        try:
            out.write_text(text)
        except OSError as e:
            raise die(f"{out}: cannot write: {e.strerror or e}", ExitCode.BAD_INPUT) from None
    else:
        sys.stdout.write(text)
    if skipped:
        print(f"fleettool: not expressible in PromQL: {', '.join(skipped)}", file=sys.stderr)


def register(app: typer.Typer) -> None:
    app.add_typer(rules_app, name="rules")


def register_baselines(app: typer.Typer) -> None:
    @app.command()
    def baselines(
        db: DbOpt = DEFAULT_DB,
        update: Annotated[bool, typer.Option("--update", help="recompute from the store and save")] = False,
        json_out: JsonOpt = False,
        fmt: FormatOpt = "table",
    ) -> None:
        """Fleet baselines per (SKU, driver): median and MAD of loaded clocks, tensor activity, power, NCCL
        busbw and burn-in figures. --update recomputes them from the store.

        Example: fleettool baselines --db fleet.duckdb --update --json
        """
        import time

        from fleettool.engine.baselines import compute
        from fleettool.store.baselines import list_baselines, save

        with open_store(db, read_only=not update, create=False) as store:
            if update:
                bs = compute(store)
                save(store, bs, time.time())
            rows = list_baselines(store)
        emit(rows, ["model", "driver", "metric", "key", "median", "mad", "n"], as_json=json_out, fmt=fmt)
