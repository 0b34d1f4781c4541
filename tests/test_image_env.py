"""The agent image's environment, built as the Dockerfile builds it but without a Docker engine (issue 33 item 1):
`pip install --target` from requirements/agent.txt with --require-hashes, then fleettool itself with --no-deps.
In it, with nothing else on the path (python -S), `fleettool agent --help` runs and the agent collects from the
fake source; its size stays bounded (bench/README.md's image section has the measured figures).

Real pip from PyPI. The locked dependencies are built once per lock (cached under the temp directory, keyed by the
lock's hash); fleettool itself is installed fresh per session. Without a network the test is skipped, saying so,
except in CI (CI=true), where it fails.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "agent.txt"
LOCKS = (LOCK, ROOT / "requirements" / "agent-fleet.txt")
DOCKERFILE = ROOT / "Dockerfile"
# measured 2026-12-06 on dev (Python 3.11): 100.6 MiB in 18 distributions, fleettool included (bench/README.md);
# the full install before the split: 525 MiB in 28. Bounds with some room for patch releases.
MAX_MIB = 120
MAX_DISTRIBUTIONS = 20
# what the agent image must never hold (the agent imports none of them)
NOT_IN_IMAGE = ("textual", "polars", "pyarrow", "numpy", "plotext", "torch")

PIP_ENV = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}


def _pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
    except OSError:
        return False
    return True


def _pip(*args: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
        env=PIP_ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]


def dockerfile_lock_flags() -> list[str]:
    """The options of the Dockerfile's `pip install ... -r /tmp/lock.txt` (its lock's install), cache aside."""
    for line in DOCKERFILE.read_text().splitlines():
        words = line.split()
        if line.startswith("RUN ") and "-r" in words and "install" in words:
            flags = words[words.index("install") + 1 : words.index("-r")]
            return [f for f in flags if f != "--no-cache-dir"]
    raise AssertionError("the Dockerfile installs no lock (pip install ... -r)")


def _locked_deps() -> Path:
    """The lock installed with --target as the Dockerfile installs it, once per version of the lock."""
    flags = dockerfile_lock_flags()
    key = hashlib.sha256(LOCK.read_bytes() + " ".join(flags).encode()).hexdigest()[:16]
    done = (
        Path(tempfile.gettempdir())
        / f"fleettool-image-deps-{key}-py{sys.version_info[0]}{sys.version_info[1]}"
    )
    if done.is_dir():
        return done
    building = Path(tempfile.mkdtemp(prefix=done.name + ".building-"))
    _pip("--target", str(building), *flags, "-r", str(LOCK))
    try:
        building.rename(done)
    except OSError:  # another session finished first: use its copy
        shutil.rmtree(building, ignore_errors=True)
    return done


@pytest.fixture(scope="session")
def image_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the locked dependencies, fleettool installed --no-deps): the two --target directories of the image."""
    if not _pypi_reachable():
        assert os.environ.get("CI") != "true", "pypi.org unreachable: the image's environment cannot be built"
        pytest.skip("pypi.org:443 unreachable: cannot build the image's environment from the lock")
    deps = _locked_deps()
    own = tmp_path_factory.mktemp("image-fleettool")
    _pip("--target", str(own), "--no-deps", str(ROOT))
    return deps, own


def run_in(env_dirs: tuple[Path, Path], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`fleettool ARGS` with only the image's directories and the standard library on the path."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.pathsep.join(str(d) for d in env_dirs)}
    env |= {"HOME": os.environ.get("HOME", "/tmp"), "TZ": "UTC"}
    return subprocess.run(
        [sys.executable, "-S", "-m", "fleettool", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(env_dirs[1]),
    )


def _du_bytes(*dirs: Path) -> int:
    return sum(f.stat().st_size for d in dirs for f in d.rglob("*") if f.is_file() and not f.is_symlink())


@pytest.mark.parametrize("lock", LOCKS, ids=[p.name for p in LOCKS])
def test_the_lock_pins_every_distribution_with_hashes(lock: Path) -> None:
    text = lock.read_text()
    pins = [ln for ln in text.splitlines() if ln and not ln[0].isspace() and not ln.startswith("#")]
    assert pins, f"{lock.name} pins nothing"
    for ln in pins:
        assert "==" in ln and ln.endswith(chr(92)), f"not pinned with hashes: {ln!r}"
    assert "--index-url" not in text and "--find-links" not in text, "the lock names a machine's own index"


def test_the_dockerfile_installs_the_lock_with_hashes_and_fleettool_alone() -> None:
    text = DOCKERFILE.read_text()
    assert "--require-hashes" in dockerfile_lock_flags()
    assert "COPY requirements/${LOCK}.txt" in text
    assert "ARG LOCK=agent" in text.splitlines()
    assert "pip wheel --no-cache-dir --no-deps" in text  # fleettool's wheel only: no unlocked dependency
    assert "pip install --no-cache-dir --no-deps /wheels/*.whl" in text


def test_agent_help_runs_in_the_image_env(image_env: tuple[Path, Path]) -> None:
    r = run_in(image_env, "agent", "--help")
    assert r.returncode == 0, r.stderr
    assert "--metrics-port" in r.stdout


def test_the_agent_collects_in_the_image_env(image_env: tuple[Path, Path], tmp_path: Path) -> None:
    db = tmp_path / "fleet.duckdb"
    r = run_in(
        image_env, "agent", "--source", "fake", "--gpus", "2", "--db", str(db), "--duration", "3s", "-q"
    )
    assert r.returncode == 0, r.stderr
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        row = con.execute("SELECT count(*) FROM samples WHERE metric = 'gpu_temp_c'").fetchone()
    assert row is not None and row[0] > 0


def test_the_image_env_is_small_and_holds_no_extra(image_env: tuple[Path, Path]) -> None:
    deps, own = image_env
    dists = sorted(p.name for d in image_env for p in d.glob("*.dist-info"))
    names = {p.split("-")[0].lower() for p in dists}
    assert not names & set(NOT_IN_IMAGE), f"the agent image holds {sorted(names & set(NOT_IN_IMAGE))}"
    assert "fleettool" in names
    assert len(dists) <= MAX_DISTRIBUTIONS, dists
    mib = _du_bytes(deps, own) / 2**20
    assert mib <= MAX_MIB, f"the image's environment is {mib:.0f} MiB (bound {MAX_MIB}); {dists}"
