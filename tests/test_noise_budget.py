"""The noise budget of issue 30 in CI: bench/noise/run.py replays every storm fixture (the big ones written at run
time, seeded) and each fixture must meet its budget; the scorer must catch what it is there to catch; the
committed fixtures are what the generator writes.

The runner runs once for the module (every fixture, ~2-3 min on the 2-core CI machine, the 170k-line storm's
20 s / 250 MiB included) and each fixture is its own test case, so a broken budget names its fixture."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOISE = ROOT / "bench" / "noise"
sys.path.insert(0, str(NOISE))

import make_fixtures  # noqa: E402
import score  # noqa: E402


@pytest.fixture(scope="module")
def noise(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("noise") / "noise.json"
    p = subprocess.run(
        [sys.executable, str(NOISE / "run.py"), "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert p.returncode in (0, 1), f"run.py exit {p.returncode}: {p.stderr[-2000:]}"
    got: dict[str, Any] = json.loads(out.read_text())
    # exit 1 exactly when a budget is broken, and each broken budget is on stderr
    assert (p.returncode == 1) == bool(got["broken"])
    for b in got["broken"]:
        assert f"budget broken: {b}" in p.stderr
    return got


@pytest.mark.parametrize("name", list(make_fixtures.BUILDERS))
def test_fixture_meets_its_budget(noise: dict[str, Any], name: str) -> None:
    assert name in noise["fixtures"], f"{name} was not run"
    broken = [b for b in noise["broken"] if b.startswith(f"{name}:")]
    assert not broken, "\n".join(broken)


def test_every_rule_that_fired_is_scored(noise: dict[str, Any]) -> None:
    rules = {r["rule"]: r for r in noise["rules"]}
    for rule in ("GpuXid", "GpuThermalSlowdown", "NcclSlowNode"):
        assert rule in rules and rules[rule]["alerts"] > 0
        assert rules[rule]["recall"] is not None and rules[rule]["precision"] is not None


ROOT79 = {
    "node": "gpu-017",
    "gpu": 3,
    "pci_bus_id": "00000000:5D:00.0",
    "xid": 79,
    "time": "2026-11-03T13:17:12Z",
    "scope": "job",
    "key": "4711",
    "page": True,
}


def _inc(
    iid: str,
    node: str | None,
    page: bool,
    *,
    code: int | None = 79,
    scope: str = "job",
    alerts: int = 512,
    action: str = "reboot-node",
) -> dict[str, Any]:
    root = (
        {
            "node": node,
            "gpu": None,
            "pci_bus_id": "00000000:5D:00.0",
            "alert": "a" + iid,
            "code": code,
            "ts": "2026-11-03T13:17:12Z",
        }
        if node
        else None
    )
    return {
        "id": iid,
        "page": page,
        "scope": scope,
        "key": "4711",
        "root": root,
        "alerts": alerts,
        "action": action,
    }


def _alerts(n: int, node: str = "gpu-017") -> list[dict[str, Any]]:
    return [
        {
            "alert_id": f"x{i}",
            "rule": "GpuXid",
            "node": node,
            "gpu": None,
            "pci_bus_id": None,
            "first_seen": "2026-11-03T13:17:12Z",
            "last_seen": "2026-11-03T13:17:12Z",
            "state": "firing",
        }
        for i in range(n)
    ]


def test_scorer_meets_the_budget_for_one_right_root() -> None:
    truth = {"name": "t", "storm": True, "roots": [ROOT79], "budget": {}}
    fig, broken = score.measure(truth, [_inc("i1", "gpu-017", True)], _alerts(512), {})
    assert broken == [] and fig["roots_ok"] == 1 and fig["compression"] == 512.0


def test_scorer_catches_a_wrong_root_a_second_page_and_no_compression() -> None:
    truth = {"name": "t", "storm": True, "roots": [ROOT79], "budget": {}}
    incs = [_inc("i1", "gpu-018", True)] + [_inc(f"j{i}", None, False, alerts=1) for i in range(20)]
    fig, broken = score.measure(truth, incs, _alerts(40), {})
    assert any("root gpu-017 GPU 3 XID 79 is the root of 0 paging incidents" in b for b in broken)
    assert fig["false_pages"] == 1 and fig["roots_ok"] == 0
    assert any(b.startswith("t: compression 1.9x < 50x") for b in broken)
    fig, broken = score.measure(
        truth, [_inc("i1", "gpu-017", True), _inc("i2", "gpu-017", True)], _alerts(512), {}
    )
    assert any("is the root of 2 paging incidents" in b for b in broken)


def test_scorer_catches_a_teardown_that_pages_or_marks_a_node_faulty() -> None:
    truth = {
        "name": "td",
        "teardown": True,
        "storm": True,
        "roots": [],
        "budget": {"pages": 0, "faulty_nodes": 0},
    }
    inc = _inc("s1", None, True, code=None, alerts=100, action="inspect-hardware")
    _, broken = score.measure(truth, [inc], _alerts(100, "gb-001"), {"s1": ["x0", "x1"]})
    assert any(b.startswith("td: 1 pages > 0") for b in broken)
    assert any(b == "td: teardown storm marked 1 nodes faulty (gb-001)" for b in broken)


@pytest.mark.parametrize("name", [n for n, (_, big) in make_fixtures.BUILDERS.items() if not big])
def test_committed_fixture_is_what_the_generator_writes(tmp_path: Path, name: str) -> None:
    make_fixtures.build(name, tmp_path / name)
    committed = make_fixtures.FIXTURES / name
    mine = sorted(p.name for p in (tmp_path / name).iterdir())
    assert mine == sorted(p.name for p in committed.iterdir())
    for f in mine:
        assert (tmp_path / name / f).read_bytes() == (committed / f).read_bytes(), f"{name}/{f} differs"
