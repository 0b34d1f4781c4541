"""`fleettool replay DIR` and `fleettool demo`."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from fleettool.cli.common import DEFAULT_DB, die, open_store
from fleettool.cli.exit_codes import ExitCode

DEMO_DIR = Path(__file__).resolve().parent.parent / "data" / "demo"


def _replay(
    db: Path,
    src: Path,
    node: str | None,
    strict: bool,
    as_json: bool,
    quiet: bool,
    rules_paths: list[Path] | None = None,
) -> None:
    from fleettool.engine.evaluate import evaluate, write_alerts
    from fleettool.engine.rules import RuleError, load_rules
    from fleettool.formats.errors import ParseError
    from fleettool.recording.reader import IngestOptions, ingest
    from fleettool.report import render_text, summarize

    if not src.exists():
        raise die(f"{src}: no such file or directory", ExitCode.BAD_INPUT)
    with open_store(db, read_only=False) as store:
        try:
            reports = ingest(store, src, IngestOptions(node=node, strict=strict, quiet=quiet))
        except ParseError as e:
            raise die(f"{e} (stopped; nothing from this file was stored)", ExitCode.BAD_INPUT) from None
        except OSError as e:
            raise die(f"{e}", ExitCode.BAD_INPUT) from None
        summaries = summarize(store)
        try:
            rules = load_rules(rules_paths)
        except (RuleError, OSError) as e:
            raise die(str(e), ExitCode.BAD_INPUT) from None
        incidents = evaluate(store, rules)
        store.begin()
        write_alerts(store, incidents)
        store.commit()
        alerts = store.query(
            "SELECT severity, category, node, gpu, action, state, summary, runbook FROM alerts "
            "ORDER BY CASE severity WHEN 'critical' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END, node, gpu"
        )
    if as_json:
        out = {
            "files": [r.as_dict() for r in reports],
            "gpus": [
                {
                    "node": s.node,
                    "gpu": s.gpu,
                    "uuid": s.uuid,
                    "samples": s.samples,
                    "max_temp_c": s.max_temp_c,
                    "max_power_w": s.max_power_w,
                    "clock_event_seconds": s.reasons_s,
                    "findings": s.findings(),
                }
                for s in summaries
            ],
            "alerts": alerts,
        }
        json.dump(out, sys.stdout, indent=1, default=str)
        print()
        return
    for r in reports:
        what = (
            f"{r.rows} samples"
            + (f", {r.events} events" if r.events else "")
            + (f", {r.runs} runs" if r.runs else "")
        )
        status = (
            f"skipped: {r.skipped}"
            if r.skipped
            else what + (f", {len(r.issues)} bad lines skipped" if r.issues else "")
        )
        print(f"{r.path} [{r.format}] {status}")
    print()
    print(render_text(summaries))
    print()
    if not alerts:
        print("alerts: none")
    else:
        print(f"alerts ({len(alerts)}):")
        for a in alerts:
            gpu = "-" if a["gpu"] is None else a["gpu"]
            print(
                f"  {a['severity']:8s} {a['category']:10s} {a['node']} gpu {gpu}  {a['action']:16s} {a['summary']}"
            )
            print(f"  {'':8s} runbook: {a['runbook']}")


def register(app: typer.Typer) -> None:
    @app.command()
    def replay(
        recording: Annotated[
            Path, typer.Argument(help="a recording directory or one file (.gz read transparently)")
        ],
        db: Annotated[Path, typer.Option(help="DuckDB file to ingest into")] = DEFAULT_DB,
        node: Annotated[str | None, typer.Option(help="node name for files that do not name one")] = None,
        strict: Annotated[
            bool, typer.Option(help="stop at the first malformed line (default: skip it)")
        ] = False,
        json_out: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="do not list skipped lines")] = False,
        rules: Annotated[
            list[Path] | None,
            typer.Option("--rules", help="rule files or directories (default: the built-in set)"),
        ] = None,
    ) -> None:
        """Ingest a recording into the store in the recording's own time, and report what it holds.

        Files are identified by content: OpenMetrics / Prometheus text (dcgm-exporter DCGM_FI_* names or
        fleettool's), kernel logs, nccl-tests output, nvidia-smi dumps. A file already ingested is skipped.

        Example: fleettool replay fixtures/scenarios/thermal-throttle --db /tmp/t.duckdb
        """
        _replay(db, recording, node, strict, json_out, quiet, rules)

    @app.command()
    def demo(
        recording: Annotated[
            Path | None, typer.Argument(help="recording to show (default: the bundled one)")
        ] = None,
    ) -> None:
        """Replay the bundled recording into a temporary store and show what it found. No GPU, no server.

        Example: fleettool demo
        """
        src = recording or DEMO_DIR
        with tempfile.TemporaryDirectory(prefix="fleettool-demo-") as tmp:
            db = Path(tmp) / "demo.duckdb"
            print(f"fleettool demo: replaying {src} into a temporary store\n")
            _replay(db, src, None, False, False, True)
