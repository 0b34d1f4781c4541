"""The exported promtool tests' run time (issue 29): `promtool test rules` over the files `fleettool rules export
--tests` writes, as written now (a case past a day of rounds in a file of its own, evaluated at its series' step)
beside the same cases all at their file's evaluation_interval (the form before: MAX_ROUNDS unbounded), in one run,
both name sets, one promtool at a time.

Wall time of each `promtool test rules FILE` (spawn to exit, best of --repeat); every run must say SUCCESS for each
file, or the bench fails (a fast wrong run cannot pass).

  python bench/promtool_tests.py --json bench/results/promtool-tests-dev.json
  python bench/promtool_tests.py --write DIR        # the files only (both forms, both name sets) ...
  python bench/promtool_tests.py --time DIR --json OUT   # ... timed where promtool runs (no fleettool needed)
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FORMS = {"before": "all at the file's evaluation_interval", "now": "a case past a day of rounds at its step"}


def write(out: Path, names: str, max_rounds: float | None) -> list[Path]:
    from fleettool.engine import promtool_tests
    from fleettool.engine.rules import load_rules
    from fleettool.engine.ruletest import builtin_test_files

    old = promtool_tests.MAX_ROUNDS
    max_rounds = old if max_rounds is None else max_rounds
    promtool_tests.MAX_ROUNDS = max_rounds  # type: ignore[assignment]
    try:
        return promtool_tests.generate(load_rules(), builtin_test_files(), names).write(out)
    finally:
        promtool_tests.MAX_ROUNDS = old


def run(promtool: str, files: list[Path], repeat: int) -> dict[str, float]:
    walls: dict[str, float] = {}
    for f in files:
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            r = subprocess.run(
                [promtool, "test", "rules", f.name], cwd=f.parent, capture_output=True, text=True
            )
            best = min(best, time.perf_counter() - t0)
            if r.returncode != 0 or "SUCCESS" not in r.stdout:
                sys.exit(f"{f}: promtool failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
        walls[f.name] = round(best, 2)
    return walls


def write_all(root: Path) -> None:
    from fleettool.engine.kinds._promql import NAME_SETS

    for names in NAME_SETS:
        write(root / f"{names}-before", names, float("inf"))
        write(root / f"{names}-now", names, None)


def time_all(root: Path, promtool: str, repeat: int) -> dict[str, Any]:
    ver = subprocess.run([promtool, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    res: dict[str, Any] = {"host": platform.node(), "promtool": ver, "forms": FORMS, "cases": {}}
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        walls = run(promtool, sorted(d.glob("*.test.yaml")), repeat)
        res["cases"][d.name] = {"total_s": round(sum(walls.values()), 2), "files": walls}
    for k, v in res["cases"].items():
        print(f"{k}: {v['total_s']} s  {v['files']}")
    for k in res["cases"]:
        if k.endswith("-before"):
            b, n = res["cases"][k]["total_s"], res["cases"][k.replace("-before", "-now")]["total_s"]
            print(f"{k.removesuffix('-before')}: {b} s -> {n} s ({b / n:.1f}x)")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", type=Path, help="write the figures here too")
    ap.add_argument("--write", type=Path, help="only write the test files of both forms here")
    ap.add_argument("--time", type=Path, help="only time the files --write wrote here")
    ap.add_argument("--promtool", default=shutil.which("promtool"))
    a = ap.parse_args()
    if a.write:
        write_all(a.write)
        return
    if a.promtool is None:
        sys.exit("promtool not installed (Debian package prometheus)")
    with tempfile.TemporaryDirectory() as tmp:
        root = a.time or Path(tmp)
        if a.time is None:
            write_all(root)
        res = time_all(root, a.promtool, a.repeat)
    if a.json:
        a.json.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
