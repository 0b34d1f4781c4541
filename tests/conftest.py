from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Fuzz tests are deterministic: the same examples on every run and every machine, so the suite cannot be flaky.
# `HYPOTHESIS_PROFILE=explore pytest tests/test_kmsg.py` searches anew (random, more examples) when hunting bugs.
settings.register_profile(
    "ci", derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("explore", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

ROOT = Path(__file__).resolve().parent.parent

# The tools this interpreter's environment installed (fleettool, moto_server, ...) come first on PATH, so a test run
# with a venv's python that was never activated does not pick up the system's copies (moto 5.2 breaks pyarrow's S3).
os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
FIXTURES = ROOT / "fixtures"
SCENARIOS = FIXTURES / "scenarios"
H200 = ROOT / "fleettool" / "data" / "demo" / "h200-gemm"  # the H200 GEMM recording, as installed


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "t.duckdb"


def run_cli(
    *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    # the fleettool of the interpreter running the tests (a venv's), not whichever is first on PATH
    here = Path(sys.executable).parent / "fleettool"
    exe = str(here) if here.exists() else shutil.which("fleettool")
    cmd = [exe, *args] if exe else [sys.executable, "-m", "fleettool", *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


def promtool_or_skip() -> str:
    """promtool's path; a skip where it is not installed, but never in CI (.ci/run installs Debian's
    prometheus package, so there a missing promtool is a failure, not a silent skip)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        assert os.environ.get("CI") != "true", (
            "CI installs Debian's prometheus package: promtool must be there"
        )
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return promtool
