"""CONTRIBUTING.md's worked examples work: each `<!-- example: NAME -->` block is loaded as the module it says it
is, registered with the one line CONTRIBUTING.md gives, and then used the way fleettool uses its own."""

from __future__ import annotations

import asyncio
import re
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "CONTRIBUTING.md").read_text()


def blocks(name: str) -> tuple[str, str, str]:
    """(module name, the module's code, the registry line that follows it) of example `name`."""
    m = re.search(rf"<!-- example: {name} -->\s*```python\n(.*?)```.*?```\w*\n(.*?)```", DOC, re.S)
    assert m, f"CONTRIBUTING.md has no example {name!r}"
    code, registry_line = m.group(1), m.group(2).strip()
    first = code.splitlines()[0]
    assert first.startswith("# "), first
    path = first[2:].strip()
    mod = path.removesuffix(".py").replace("/", ".")
    if not mod.startswith("fleettool."):
        mod = "fleettool." + mod  # collectors/ and tui/ install as fleettool.collectors / fleettool.tui
    return mod, code, registry_line


def load(mod: str, code: str, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = types.ModuleType(mod)
    module.__file__ = f"<CONTRIBUTING.md: {mod}>"
    monkeypatch.setitem(sys.modules, mod, module)
    exec(compile(code, module.__file__, "exec"), module.__dict__)
    return module


def test_the_collector_example_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    _collector_example(monkeypatch)


def test_the_collector_example_runs_once_it_is_followed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A contributor who followed the example has `gemm-load` registered by collectors/registry.py itself: the
    example is still checked, against a registry without it ("already registered" was the failure)."""
    from fleettool.collectors import registry

    monkeypatch.setattr(registry, "REGISTRY", dict(registry.REGISTRY))
    registry.register_collector("gemm-load", False, "fleettool.collectors.gemm_load:from_config")
    _collector_example(monkeypatch)
    assert "gemm-load" in registry.REGISTRY  # the followed registration is back after the example's check


def _collector_example(monkeypatch: pytest.MonkeyPatch) -> None:
    from fleettool.collectors import registry

    mod, code, line = blocks("collector")
    assert mod == "fleettool.collectors.gemm_load"
    load(mod, code, monkeypatch)
    name = re.search(r'register_collector\("([^"]+)"', line)
    assert name, line
    # the example's own registry line runs into a registry without its name, whether or not it was followed
    followed = dict(registry.REGISTRY)
    with monkeypatch.context() as mp:
        mp.setattr(registry, "REGISTRY", {k: v for k, v in followed.items() if k != name.group(1)})
        exec(line, {"register_collector": registry.register_collector})
        _check_collector(registry)


def _check_collector(registry: types.ModuleType) -> None:
    assert "gemm-load" not in registry.select()  # registered off by default
    chosen = registry.select(enable=["gemm-load"], defaults=[])
    assert chosen == ["gemm-load"]
    (c,) = registry.build(registry.CollectorConfig(node="gpu-17"), chosen)
    assert c.start() is True
    got = c.collect(1_764_000_000.0)
    assert [(s.node, s.gpu, s.metric, s.value) for s in got.samples] == [("gpu-17", 0, "gemm_tflops", 660.1)]


def test_the_kind_example_is_evaluated_and_explains_its_promql(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from fleettool.engine import kinds
    from fleettool.engine.evaluate import evaluate_rule
    from fleettool.engine.promql import export_prometheus
    from fleettool.engine.rules import RuleError, parse_rules
    from fleettool.model import Sample
    from fleettool.store import Store

    mod, code, line = blocks("kind")
    assert mod == "fleettool.engine.kinds.spike"
    spike = load(mod, code, monkeypatch)
    assert line == "spike.KIND,"
    # the registry line, into the one KINDS table that rules, evaluation and export all read
    monkeypatch.setitem(kinds.KINDS, spike.KIND.name, eval(line.rstrip(","), {"spike": spike}))

    rule_yaml = """
groups:
  - name: example
    rules:
      - alert: GpuTemperatureSpike
        kind: spike
        metric: gpu_temp_c
        jump: 15
        severity: warning
        category: thermal
        action: inspect-hardware
        summary: "GPU {gpu} on {node} jumped"
"""
    (rule,) = parse_rules(rule_yaml, "example.yaml")
    with pytest.raises(RuleError, match="jump"):
        parse_rules(rule_yaml.replace("        jump: 15\n", ""), "example.yaml")

    t0 = 1_764_000_000.0
    temps = {0: [50, 51, 52, 53, 54], 1: [50, 51, 75, 76, 77]}  # GPU 1 jumps by 24 C between two samples
    with Store(str(tmp_path / "k.duckdb")) as store:
        store.write_samples(
            [
                Sample(t0 + 10 * i, "gpu-17", g, None, "gpu_temp_c", float(v))
                for g, vs in temps.items()
                for i, v in enumerate(vs)
            ]
        )
        found = evaluate_rule(store, rule, t0, t0 + 40)
    assert {(f.node, f.gpu) for f in found} == {("gpu-17", 1)}

    text, skipped = export_prometheus([rule])
    assert skipped == ["GpuTemperatureSpike"] and "GpuTemperatureSpike" in text.splitlines()[1]
    assert "sample-to-sample" in kinds.KINDS["spike"].no_promql


def test_the_screen_example_opens_from_its_registry_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("textual")
    from fleettool.store import Store
    from fleettool.tui import screens
    from fleettool.tui.app import FleetTui
    from fleettool.tui.screens import Nav
    from fleettool.tui.source import Source

    mod, code, line = blocks("screen")
    assert mod == "fleettool.tui.screens.firing"
    firing = load(mod, code, monkeypatch)
    key, nav = eval("{" + line.rstrip(",") + "}", {"Nav": Nav, "FiringScreen": firing.FiringScreen}).popitem()
    monkeypatch.setitem(screens.SCREENS, key, nav)

    db = tmp_path / "t.duckdb"
    Store(str(db)).close()

    async def go() -> None:
        app = FleetTui(Source(db=db), refresh_s=60)
        async with app.run_test() as pilot:
            await pilot.pause()
            await app.run_action("open_screen('firing')")
            for _ in range(100):
                await pilot.pause(0.05)
                if isinstance(app.screen, firing.FiringScreen):
                    break
            assert isinstance(app.screen, firing.FiringScreen)
            table = app.screen.query_one("#firing")
            assert [str(c.label) for c in table.columns.values()] == ["severity", "node", "rule"]

    asyncio.run(go())
