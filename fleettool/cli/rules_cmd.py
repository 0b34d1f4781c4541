"""`fleettool rules list|check|test|export`: the rule set as data, linted and unit-tested."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fleettool.cli.common import die
from fleettool.cli.exit_codes import ExitCode
from fleettool.cli.options import FormatOpt, JsonOpt, NoBuiltinRulesOpt, RulesOpt
from fleettool.cli.output import emit, print_json

if TYPE_CHECKING:
    from fleettool.engine.rules import Rule

rules_app = typer.Typer(help="Inspect, lint, test and export the alert rules.", no_args_is_help=True)


def _load(paths: list[Path] | None, no_builtin: bool = False) -> list[Rule]:
    """The built-in rules plus those of these files (without the built-in set: `no_builtin`), or exit 3 naming
    the file that is wrong (a rule named as a built-in one too), 2 for --no-builtin-rules with no --rules."""
    from fleettool.engine.rules import RuleError, load_rules

    if no_builtin and not paths:
        raise die("--no-builtin-rules needs --rules FILE|DIR: no rule would be left to judge", ExitCode.USAGE)
    for p in paths or []:
        if not p.exists():
            raise die(f"{p}: no such file or directory (--rules)", ExitCode.BAD_INPUT)
    try:
        rules = load_rules(paths, builtin=not no_builtin)
    except UnicodeDecodeError:
        raise die(f"{_undecodable(paths or [])}: not a text (YAML) file", ExitCode.BAD_INPUT) from None
    except (RuleError, OSError) as e:
        raise die(str(e), ExitCode.BAD_INPUT) from None
    if paths and not any(r.source in _given(paths) for r in rules):
        raise die(
            f"no rules in {', '.join(map(str, paths))} (a rule file is YAML with groups: [{{rules: [...]}}])",
            ExitCode.BAD_INPUT,
        )
    return rules


def _given(paths: list[Path]) -> set[str]:
    """The sources (rule.source) of the rule files given."""
    return {str(f) for p in paths for f in (sorted(p.glob("*.y*ml")) if p.is_dir() else [p])}


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
def list_rules(
    rules: RulesOpt = None,
    no_builtin: NoBuiltinRulesOpt = False,
    json_out: JsonOpt = False,
    fmt: FormatOpt = "table",
) -> None:
    """List the rules: name, kind, severity, category, action, runbook.

    Example: fleettool rules list --json
    """
    rs = _load(rules, no_builtin)
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
def check(rules: RulesOpt = None, no_builtin: NoBuiltinRulesOpt = False, json_out: JsonOpt = False) -> None:
    """Lint the rules: schema, unique names, known metrics, a runbook for every rule and a rule for every
    runbook, every rule covered by a test with a must-not-fire case. Exit 1 on any problem.

    The built-in rules are judged on fleettool's runbooks and tests; the rules of a --rules folder on that
    folder's own: its runbooks in DIR/runbooks (or a runbooks/ beside DIR) and its tests in DIR/tests/*.test.yaml
    (a file given: its folder's).

    --json prints one object: {"rules": number of rules, "problems": [one line per problem, naming the file and
    rule], "ok": true when there are none}.

    Example: fleettool rules check --json
    """
    from fleettool.engine.rules import check_rules
    from fleettool.engine.ruletest import builtin_test_files, coverage

    rs = _load(rules, no_builtin)
    given = _given(rules or [])
    site = [r for r in rs if r.source in given]
    own = [r for r in rs if r.source not in given]
    problems = []
    if not no_builtin:
        problems += check_rules(own) + coverage(own, builtin_test_files())
    problems += _site_problems(site)
    if json_out:
        print_json({"rules": len(rs), "problems": problems, "ok": not problems})
    else:
        for p in problems:
            print(p)
        print(f"{len(rs)} rules, {len(problems)} problems", file=sys.stderr)
    if problems:
        raise typer.Exit(int(ExitCode.FAILURE))


def _site_problems(site: list[Rule]) -> list[str]:
    """The rules of each folder given, judged on that folder's runbooks and tests (never fleettool's)."""
    from fleettool.engine.rules import check_rules, runbook_names, site_runbooks
    from fleettool.engine.ruletest import coverage

    problems: list[str] = []
    by_dir: dict[Path, list[Rule]] = {}
    for r in site:
        by_dir.setdefault(Path(r.source).parent, []).append(r)
    for d, rs in by_dir.items():
        books = site_runbooks(d)
        if books is None:
            problems.append(f"{d}: no runbooks (looked in {d / 'runbooks'} and {d.parent / 'runbooks'})")
        problems += check_rules(rs, runbook_names(books) if books else set(), f"{books or d / 'runbooks'}/")
        tests = sorted((d / "tests").glob("*.test.y*ml"))
        if not tests:
            problems.append(f"{d / 'tests'}: no rule tests (*.test.yaml): {len(rs)} rules not covered")
        problems += coverage(rs, tests)
    return problems


@rules_app.command()
def test(
    files: Annotated[
        list[Path] | None, typer.Argument(help="test files (default: the built-in rules/tests)")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Run rule unit tests written in promtool's format (input_series, alert_rule_test, exp_alerts; empty
    exp_alerts = must not fire), extended with input_events, input_nccl_runs and recorded input_files.

    --json prints one object: {"total", "passed", "failed": counts of expectations; "results": [{"file", "test"
    (index in the file), "alertname", "eval_time" (seconds), "ok", "message"}]; "unreadable": [{"file",
    "error"}] for files that are not rule tests (then the exit is 3)}.

    Example: fleettool rules test rules/tests/thermal.test.yaml
    """
    import yaml

    from fleettool.cli.extras import require_extra
    from fleettool.engine.rules import RuleError
    from fleettool.engine.ruletest import builtin_test_files, run_test_file

    require_extra("replay", "rules test")  # the input series go through replay's ingest
    paths = files or builtin_test_files()
    for p in files or []:
        if not p.is_file():
            what = "is a directory (give the test files)" if p.is_dir() else "no such file"
            raise die(f"{p}: {what}", ExitCode.BAD_INPUT)
    failed = 0
    total = 0
    unreadable: list[dict[str, str]] = []
    rows: list[dict[str, object]] = []
    for p in paths:  # one bad file does not stop the others; it is named, and the exit is 3
        try:
            results = run_test_file(p)
        except (RuleError, OSError, KeyError, ValueError, TypeError, AttributeError, yaml.YAMLError) as e:
            why = " ".join(str(e).split())
            print(f"fleettool: {p}: not a rule test file: {why}", file=sys.stderr)
            unreadable.append({"file": str(p), "error": why})
            continue
        for r in results:
            total += 1
            failed += not r.ok
            rows.append(
                {
                    "file": str(p),
                    "test": r.test,
                    "alertname": r.alertname,
                    "eval_time": r.eval_time,
                    "ok": r.ok,
                    "message": r.message,
                }
            )
            if json_out:
                continue
            if not r.ok:
                print(f"FAIL {p.name} test {r.test} {r.alertname} @ {r.eval_time:g}s: {r.message}")
            elif verbose:
                print(f"ok   {p.name} test {r.test} {r.alertname} @ {r.eval_time:g}s")
    if json_out:
        print_json(
            {
                "total": total,
                "passed": total - failed,
                "failed": failed,
                "results": rows,
                "unreadable": unreadable,
            }
        )
    if unreadable:
        raise typer.Exit(int(ExitCode.BAD_INPUT))
    if not json_out:
        print(f"{total - failed}/{total} rule tests passed", file=sys.stderr)
    if failed:
        raise typer.Exit(int(ExitCode.FAILURE))


def _names(value: str) -> str:
    from fleettool.engine.kinds._promql import NAME_SETS

    if value not in NAME_SETS:
        raise typer.BadParameter(f"{value!r} is not a name set (one of {', '.join(NAME_SETS)})")
    return value


def _url(value: str) -> str:
    from urllib.parse import urlparse

    u = urlparse(value)
    if u.scheme not in ("http", "https") or not u.netloc:
        raise typer.BadParameter(f"{value!r} is not an absolute http(s) URL")
    return value


@rules_app.command()
def export(
    prometheus: Annotated[
        bool, typer.Option("--prometheus", help="Prometheus alerting rules (the default)")
    ] = True,
    alertmanager: Annotated[
        bool, typer.Option("--alertmanager", help="instead, an alertmanager.yml folding their alerts")
    ] = False,
    label: Annotated[
        list[str] | None,
        typer.Option("--label", help="with --alertmanager: KEY=LABEL, KEY one of job, rack, nvlink_domain"),
    ] = None,
    rules: RulesOpt = None,
    no_builtin: NoBuiltinRulesOpt = False,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="write here instead of stdout")] = None,
    names: Annotated[
        str,
        typer.Option(
            "--names",
            callback=_names,
            help="the series the rules read: fleettool (the agent's /metrics) or dcgm (dcgm-exporter's DCGM_FI_*, "
            "for a fleet that runs dcgm-exporter alone)",
        ),
    ] = "fleettool",
    runbook_base: Annotated[
        str,
        typer.Option("--runbook-base", callback=_url, help="URL the runbook links start with (absolute)"),
    ] = "https://github.com/fleettool/fleettool/blob/main/runbooks/",
    node_label: Annotated[
        str,
        typer.Option(
            "--node-label",
            help="the label that names the node: Hostname (the agent's /metrics; dcgm-exporter before its "
            "May 2026 rename), hostname (dcgm-exporter since), or what your relabelling uses",
        ),
    ] = "Hostname",
    tests: Annotated[
        Path | None,
        typer.Option(
            "--tests",
            help="also write promtool unit tests of the rules into this directory (from the rule tests: the "
            "built-in rules/tests, or --test-source); run them with promtool test rules DIR/*.test.yaml",
        ),
    ] = None,
    test_source: Annotated[
        list[Path] | None,
        typer.Option(
            "--test-source", help="rule test files or directories for --tests (default: the built-in)"
        ),
    ] = None,
) -> None:
    """Write the rules PromQL can express as Prometheus alerting rules, over the agent's /metrics names or
    dcgm-exporter's. The rules it cannot express are listed, with the reason, at the top of the file and in a
    note on stderr (the exit stays 0).

    --tests DIR writes, beside them, the rule tests as promtool's own test files (DIR/*.test.yaml over
    DIR/rules-under-test.yml, the same rules with each {{ $value }} of the annotations read VALUE), and
    DIR/NOT-EXPRESSIBLE.txt: the cases PromQL cannot express, each with the reason.

    --alertmanager writes an Alertmanager config instead: routes grouping by job, rack and NVLink domain (labels
    hpc_job, rack, nvlink_domain unless --label renames them) and inhibit rules by which a root mutes its symptoms.

    Example: fleettool rules export --prometheus --names dcgm -o dcgm-rules.yml --tests promtool-tests/
    """
    from fleettool.engine.promql import LABEL_NAME, build

    if not LABEL_NAME.fullmatch(node_label):
        raise die(f"--node-label {node_label!r}: not a Prometheus label name", ExitCode.USAGE)
    if alertmanager:
        return _alertmanager(out, label, node_label, names, tests)
    rs = _load(rules, no_builtin)
    ex = build(rs, names, runbook_base, node_label)
    _write(out, ex.text)
    if ex.skipped:
        print(
            f"note: {len(ex.skipped)} rules have no PromQL form over the {names} names (fleettool evaluates them; "
            f"the file's header says why): {', '.join(a for a, _ in ex.skipped)}",
            file=sys.stderr,
        )
    if tests is not None:
        _write_tests(rs, names, runbook_base, tests, test_source, node_label)


def _alertmanager(
    out: Path | None, specs: list[str] | None, node: str, names: str, tests: Path | None
) -> None:
    from fleettool.engine.alertmanager import parse_labels, render

    if tests is not None:
        raise die(
            "--tests: promtool tests are of the Prometheus rules, not of --alertmanager", ExitCode.USAGE
        )
    try:
        labels = parse_labels(specs, node)
    except ValueError as e:
        raise die(f"--label {e}", ExitCode.USAGE) from None
    _write(out, render(labels))
    if names != "fleettool":
        print(
            f"note: over --names {names} an XID alert has no code label: the XID inhibitions match none",
            file=sys.stderr,
        )


def _write(out: Path | None, text: str) -> None:
    if out is None:
        sys.stdout.write(text)
        return
    try:
        out.write_text(text)
    except OSError as e:
        raise die(f"{out}: cannot write: {e.strerror or e}", ExitCode.BAD_INPUT) from None


def _write_tests(
    rs: list[Rule],
    names: str,
    runbook_base: str,
    out: Path,
    sources: list[Path] | None,
    node_label: str = "Hostname",
) -> None:
    import yaml

    from fleettool.engine.promtool_tests import generate
    from fleettool.engine.rules import RuleError
    from fleettool.engine.ruletest import builtin_test_files

    files: list[Path] = []
    for p in sources or []:
        if not p.exists():
            raise die(f"{p}: no such file or directory (--test-source)", ExitCode.BAD_INPUT)
        files += sorted(p.glob("*.test.y*ml")) if p.is_dir() else [p]
    if sources is not None and not files:
        raise die(f"no rule test files (*.test.yaml) in {', '.join(map(str, sources))}", ExitCode.BAD_INPUT)
    try:
        gen = generate(rs, files or builtin_test_files(), names, runbook_base)
        gen.write(out, node_label)
    except (RuleError, ValueError, KeyError, TypeError, AttributeError, yaml.YAMLError) as e:
        raise die(
            f"--test-source: not a rule test file: {' '.join(str(e).split())}", ExitCode.BAD_INPUT
        ) from None
    except OSError as e:
        raise die(f"{out}: cannot write: {e.strerror or e}", ExitCode.BAD_INPUT) from None
    print(
        f"note: {gen.cases} promtool cases in {out} (promtool test rules {out}/*.test.yaml); {len(gen.gaps)} cases "
        f"of the rule tests PromQL cannot express are listed in {out}/NOT-EXPRESSIBLE.txt",
        file=sys.stderr,
    )


def register(app: typer.Typer) -> None:
    app.add_typer(rules_app, name="rules")


def register_baselines(app: typer.Typer) -> None:
    from fleettool.cli.baselines_cmd import register as register_baselines_cmd

    register_baselines_cmd(app)
