"""The agent image's Python environment, before and after the dependency split (issue 33 item 1), as the
Dockerfile's install builds it but without a Docker engine: `pip install --target` into an empty directory.

- before: the dependencies of pyproject.toml at REV (default: the commit before the split, 267d388), every one
  of them, unpinned, as the old Dockerfile installed them; then fleettool itself (--no-deps);
- after: requirements/agent.txt with --require-hashes, then fleettool itself (--no-deps), as the Dockerfile does;
- after_fleet: the same from requirements/agent-fleet.txt (the image built with --build-arg LOCK=agent-fleet).

For each: the size of the directory (du -sb, bytes apparent and MiB), the number of distributions (*.dist-info),
and whether `fleettool agent --help` runs in it (python -S, PYTHONPATH = the directory only). Both built in one
run, from PyPI (PIP_CONFIG_FILE=/dev/null: no local index or find-links), pip's cache warm or not.

  python bench/image_size.py [--before-rev 267d388] [--json results/image-size.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
PIP_ENV = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}


def pip(*args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
        check=True,
        env=PIP_ENV,
    )


def measure(target: Path) -> dict[str, object]:
    size = int(subprocess.run(["du", "-sb", str(target)], capture_output=True, text=True).stdout.split()[0])
    top = subprocess.run(["du", "-sm", *map(str, target.iterdir())], capture_output=True, text=True).stdout
    largest = sorted(
        ((int(n), Path(p).name) for n, p in (ln.split("\t") for ln in top.splitlines())), reverse=True
    )
    dists = sorted(p.name.split("-")[0] for p in target.glob("*.dist-info"))
    env = {"PYTHONPATH": str(target), "PATH": os.environ["PATH"]}
    r = subprocess.run(
        [sys.executable, "-S", "-m", "fleettool", "agent", "--help"],
        env=env,
        capture_output=True,
        text=True,
        cwd=target,  # not the checkout: python -m puts the working directory first on the path
    )
    return {
        "bytes": size,
        "mib": round(size / 2**20, 1),
        "distributions": len(dists),
        "names": dists,
        "largest_mib": dict((name, n) for n, name in largest[:6]),
        "agent_help_rc": r.returncode,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before-rev", default="267d388")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    old = tomllib.loads(
        subprocess.run(
            ["git", "show", f"{a.before_rev}:pyproject.toml"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )["project"]["dependencies"]
    out: dict[str, object] = {"python": sys.version.split()[0], "before_rev": a.before_rev}
    with tempfile.TemporaryDirectory() as tmp:
        before, after, fleet = Path(tmp, "before"), Path(tmp, "after"), Path(tmp, "after-fleet")
        pip("--target", str(before), *old)
        pip("--target", str(before), "--no-deps", str(ROOT))
        pip("--target", str(after), "--require-hashes", "-r", str(ROOT / "requirements/agent.txt"))
        pip("--target", str(after), "--no-deps", str(ROOT))
        pip("--target", str(fleet), "--require-hashes", "-r", str(ROOT / "requirements/agent-fleet.txt"))
        pip("--target", str(fleet), "--no-deps", str(ROOT))
        out["before"], out["after"], out["after_fleet"] = measure(before), measure(after), measure(fleet)
    b, f = out["before"], out["after"]
    assert isinstance(b, dict) and isinstance(f, dict)
    out["ratio"] = round(b["bytes"] / f["bytes"], 2)
    print(json.dumps(out, indent=2))
    if a.json:
        a.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
