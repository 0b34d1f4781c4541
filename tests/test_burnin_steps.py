"""Burn-in steps: the runner runs exactly the steps of its table that --tests names, in table order, with
progress counted in each step's units; a new step is one function plus one table line; results reach the
store through store/burnin.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleettool.burnin import runner
from fleettool.burnin.context import BurninConfig, Step, StepContext
from fleettool.burnin.report import BurninReport, from_dict, save, to_dict
from fleettool.burnin.steps import ALL_TESTS, STEPS
from fleettool.burnin.verdict import Result, Verdict

pytest.importorskip("torch", reason="the burn-in extra (pip install -e '.[burnin]') is not installed")


def test_the_table_is_the_list_of_tests() -> None:
    assert ALL_TESTS == ("gemm", "hbm", "allreduce", "dcgm") == tuple(s.name for s in STEPS)
    assert sorted(runner.TORCHLESS) == ["dcgm"]


def test_a_new_step_is_one_function_and_one_table_line(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def run_echo(ctx: StepContext) -> list[Result]:
        ctx.say("echo")
        seen.append(ctx.devices[0]["device"])
        ctx.tick()
        return [Result(ctx.cfg.node, None, "echo", Verdict.PASS, 1.0, "x", reason="echoed")]

    monkeypatch.setattr(runner, "STEPS", (*STEPS, Step("echo", run_echo)))
    progress: list[tuple[str, float]] = []
    rep = runner.run_burnin(
        BurninConfig(node="n", backend="cpu", tests=("echo",)),
        progress=lambda m, f: progress.append((m, f)),
    )
    assert seen == ["cpu"]
    # every run ends with the busy check's row: not made on the CPU backend, and saying so
    assert [(r.test, r.verdict) for r in rep.results] == [
        ("echo", Verdict.PASS),
        ("exclusive", Verdict.SKIPPED),
    ]
    assert progress == [("echo", 0.0), ("done", 1.0)]


def test_steps_run_in_table_order_and_progress_counts_units(monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []

    def step(name: str, units: int) -> Step:
        def run(ctx: StepContext) -> list[Result]:
            for _ in range(units):
                ctx.say(name)
                ctx.tick()
            order.append(name)
            return []

        return Step(name, run, units=lambda _cfg: units)

    monkeypatch.setattr(runner, "STEPS", (step("a", 2), step("b", 1), step("c", 1)))
    fracs: list[tuple[str, float]] = []
    runner.run_burnin(
        BurninConfig(node="n", backend="cpu", tests=("c", "a")), progress=lambda m, f: fracs.append((m, f))
    )
    assert order == ["a", "c"]
    assert fracs == [("a", 0.0), ("a", 1 / 3), ("c", 2 / 3), ("done", 1.0)]


def test_report_round_trips_and_saves_through_the_store(tmp_path: Path) -> None:
    from fleettool.store import Store

    rep = BurninReport("run1", "n", 10.0, 20.0)
    rep.results = [
        Result("n", 0, "hbm", Verdict.WARN, 4000.0, "GB/s", 3200.0, "floor", "marginal", "GPU-1", {"k": 1}),
        Result("n", None, "allreduce", Verdict.INCONCLUSIVE, reason="did not run"),
    ]
    back = from_dict(to_dict(rep, 7))
    assert back.results == rep.results and to_dict(back, 7) == to_dict(rep, 7)
    with Store(tmp_path / "s.duckdb", read_only=False) as st:
        save(st, rep)
        rows = st.query(
            "SELECT run_id, node, gpu, uuid, test, figure, unit, floor, verdict, reason, evidence::VARCHAR AS ev "
            "FROM burnin_results ORDER BY test"
        )
    assert rows == [
        {
            "run_id": "run1",
            "node": "n",
            "gpu": None,
            "uuid": None,
            "test": "allreduce",
            "figure": None,
            "unit": "",
            "floor": None,
            "verdict": "INCONCLUSIVE",
            "reason": "did not run",
            "ev": "{}",
        },
        {
            "run_id": "run1",
            "node": "n",
            "gpu": 0,
            "uuid": "GPU-1",
            "test": "hbm",
            "figure": 4000.0,
            "unit": "GB/s",
            "floor": 3200.0,
            "verdict": "WARN",
            "reason": "marginal",
            "ev": '{"k":1}',
        },
    ]
