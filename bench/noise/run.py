#!/usr/bin/env python3
"""The noise budget (issue 30, item 6): replay every storm fixture into a fresh store, read what a person sees
(`fleettool incidents --json`, `fleettool alerts --json`), count pages, incidents, first-screen rows, raw alert
rows, fatal actions and compression against the fixture's truth, score every rule, write the table into
bench/noise/README.md, and exit 1 naming each broken budget.

    python bench/noise/run.py [--only NAME ...] [--readme] [--json OUT] [--keep DIR]

Each replay is its own process (`python -m fleettool replay DIR --db NEW -q`): its wall from spawn to exit and
its peak RSS (`os.wait4`'s ru_maxrss of that child). Nodes a truth lists as planned are moved to their lifecycle
state at the truth's time first (fleettool.lifecycle.transition with that time, what `fleettool node N cordon`
does at the wall clock's). The small fixtures are committed in bench/noise/fixtures/; the big ones are written
by make_fixtures.py into a temporary directory. The InfiniteHBD trace is folded in process (hbd_trace.py).
Exit: 0 every budget met, 1 a budget broken (each on stderr), 2 usage, 3 a fixture could not be replayed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import hbd_trace  # noqa: E402
import make_fixtures  # noqa: E402
import score  # noqa: E402

README = HERE / "README.md"
START, END = "<!-- noise-table:start -->", "<!-- noise-table:end -->"


def fleettool(*args: str) -> Any:
    p = subprocess.run([sys.executable, "-m", "fleettool", *args], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"fleettool {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()[-300:]}")
    return json.loads(p.stdout)


def replay(rec: Path, db: Path) -> dict[str, float]:
    """Replay `rec` into `db` in a child process; its wall and peak RSS."""
    cmd = [sys.executable, "-m", "fleettool", "replay", str(rec), "--db", str(db), "-q"]
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    err = p.stderr.read().decode() if p.stderr else ""
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        raise RuntimeError(f"replay {rec} exited {rc}: {err.strip()[-400:]}")
    return {"replay_s": round(wall, 2), "replay_mib": round(ru.ru_maxrss / 1024, 1)}


def plan(db: Path, planned: list[dict[str, Any]]) -> None:
    """Move each planned node to its state at its time, in a fresh store."""
    from fleettool.lifecycle import transition
    from fleettool.store import Store

    with Store(db) as store:
        for p in planned:
            transition(
                store,
                p["node"],
                p.get("state", "cordoned"),
                who="bench-noise",
                reason="planned maintenance (bench/noise truth)",
                now=score.at(p["at"]) or 0.0,
                run=False,
            )


def members(db: Path) -> dict[str, list[str]]:
    """incident id -> its alert ids (the store's incident_members, read only)."""
    import duckdb

    out: dict[str, list[str]] = {}
    with duckdb.connect(str(db), read_only=True) as con:
        for inc, alert in con.execute("SELECT incident_id, alert_id FROM incident_members").fetchall():
            out.setdefault(inc, []).append(alert)
    return out


def fixture_dir(name: str, tmp: Path) -> Path:
    committed = make_fixtures.FIXTURES / name
    if (committed / "truth.yaml").is_file():
        return committed
    make_fixtures.build(name, tmp / name)
    return tmp / name


def run_one(name: str, tmp: Path) -> tuple[dict[str, Any], list[str], dict[str, Any], list[dict[str, Any]]]:
    d = fixture_dir(name, tmp)
    truth = yaml.safe_load((d / "truth.yaml").read_text())
    budget = truth.get("budget") or {}
    if truth.get("fold_only"):
        r = hbd_trace.fold_trace(d / "fault_trace.json", int(budget.get("max_incidents", 496)))
        folded = {
            "raw": r["faults"],
            "incidents": r["incidents"],
            "screen": r["incidents"],
            "pages": r["pages"],
            "compression": r["compression"],
            "scopes": r["scopes"],
        }
        return folded, r["broken"], truth, []
    db = tmp / f"{name}.duckdb"
    if truth.get("planned_nodes"):
        plan(db, truth["planned_nodes"])
    fig: dict[str, Any] = replay(d, db)
    incidents = fleettool("incidents", "--db", str(db), "--json")
    alerts = fleettool("alerts", "--db", str(db), "--json")
    got, broken = score.measure(truth, incidents, alerts, members(db))
    fig.update(got)
    if "replay_s" in budget and fig["replay_s"] > budget["replay_s"]:
        broken.append(f"{name}: replay took {fig['replay_s']} s > {budget['replay_s']} s")
    if "replay_mib" in budget and fig["replay_mib"] > budget["replay_mib"]:
        broken.append(f"{name}: replay peak RSS {fig['replay_mib']} MiB > {budget['replay_mib']} MiB")
    return fig, broken, truth, alerts


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def table(results: dict[str, dict[str, Any]], rules: list[dict[str, Any]], broken: list[str]) -> str:
    cols = [
        ("raw", "raw alerts"),
        ("screen", "first-screen rows"),
        ("compression", "compression"),
        ("pages", "pages"),
        ("roots_ok", "roots paged right"),
        ("root_row", "root's row"),
        ("false_pages", "false pages"),
        ("fatal", "fatal actions"),
        ("faulty_nodes", "nodes marked faulty"),
        ("ttd_s", "time to detect (s)"),
        ("replay_s", "replay (s)"),
        ("replay_mib", "peak RSS (MiB)"),
    ]
    out = ["| fixture | " + " | ".join(h for _, h in cols) + " | budget |", "|---" * (len(cols) + 2) + "|"]
    for name, fig in results.items():
        mine = [b for b in broken if b.startswith(f"{name}:")]
        ok = "met" if not mine else f"**broken** ({len(mine)})"
        out.append(f"| {name} | " + " | ".join(_cell(fig.get(k)) for k, _ in cols) + f" | {ok} |")
    out += [
        "",
        "| rule | alerts | precision | recall (targets) | time to detect (s) | time to reset (s) |",
        "|---|---|---|---|---|---|",
    ]
    silent = [r["rule"] for r in rules if not r["alerts"] and not r["targets"]]
    for r in rules:
        if r["rule"] in silent:
            continue
        rec = f"{_cell(r['recall'])} ({r['targets']})" if r["targets"] else "-"
        out.append(
            f"| {r['rule']} | {r['alerts']} | {_cell(r['precision'])} | {rec} | {_cell(r['ttd_s'])} | {_cell(r['ttr_s'])} |"
        )
    if silent:
        out += ["", f"No alert and no target in any fixture ({len(silent)} rules): {', '.join(silent)}."]
    if broken:
        out += ["", "Broken budgets:", ""] + [f"- {b}" for b in broken]
    return "\n".join(out)


def write_readme(text: str) -> None:
    doc = README.read_text()
    a, b = doc.index(START), doc.index(END)
    README.write_text(doc[: a + len(START)] + "\n" + text + "\n" + doc[b:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", default=None, help="fixture names (default: every one)")
    ap.add_argument("--readme", action="store_true", help="write the table into bench/noise/README.md")
    ap.add_argument("--json", type=Path, help="write the figures as JSON")
    ap.add_argument("--keep", type=Path, help="keep the generated fixtures and stores in DIR")
    a = ap.parse_args(argv)
    names = a.only or list(make_fixtures.BUILDERS)
    bad = [n for n in names if n not in make_fixtures.BUILDERS]
    if bad:
        print(
            f"run.py: --only: no fixture {', '.join(bad)} (known: {', '.join(make_fixtures.BUILDERS)})",
            file=sys.stderr,
        )
        return 2
    results: dict[str, dict[str, Any]] = {}
    broken: list[str] = []
    runs = []
    with tempfile.TemporaryDirectory(prefix="noise-") as t:
        tmp = a.keep or Path(t)
        tmp.mkdir(parents=True, exist_ok=True)
        for n in names:
            try:
                fig, br, truth, alerts = run_one(n, tmp)
            except (RuntimeError, OSError) as e:
                print(f"run.py: {n}: {e}", file=sys.stderr)
                return 3
            results[n] = fig
            broken += br
            if alerts:
                runs.append((truth, alerts))
            print(json.dumps({"fixture": n, **fig, "broken": br}), flush=True)
    rules = score.rule_scores(runs, [r["alert"] for r in fleettool("rules", "list", "--json")])
    text = table(results, rules, broken)
    print(text)
    if a.readme:
        write_readme(text)
    if a.json:
        a.json.write_text(
            json.dumps({"fixtures": results, "rules": rules, "broken": broken}, indent=1) + "\n"
        )
    for b in broken:
        print(f"budget broken: {b}", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
