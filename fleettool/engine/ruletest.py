"""Rule unit tests in promtool's format, run by fleettool's engine (`fleettool rules test`).

    rule_files: [thermal.yaml]
    evaluation_interval: 1m
    tests:
      - interval: 30s
        input_series:
          - series: 'fleettool_clock_event_reasons{Hostname="n1", gpu="2"}'
            values: '4x10 104x10 4x10'      # promtool's expanding notation: a+bxN, _ (missing), stale
        input_events:                        # fleettool extension: kernel-log events
          - {at: 5m, Hostname: n1, gpu: 2, kind: xid, code: 48}
        input_nccl_runs:                     # fleettool extension: nccl-tests runs
          - {at: 1m, nodes: [a, b], busbw: 470}
        input_files: [../../fixtures/scenarios/thermal-throttle]   # fleettool extension: recorded inputs
        alert_rule_test:
          - eval_time: 10m
            alertname: GpuThermalSlowdown
            exp_alerts:                      # empty: the rule must not fire
              - exp_labels: {Hostname: n1, gpu: "2", severity: warning, category: thermal, action: inspect-hardware}

The node label is `Hostname`, as on the agent's /metrics and dcgm-exporter's (`hostname` is read too in inputs).
Time starts at 0 (1970-01-01) like promtool's. An alert is expected when it is firing at eval_time: a duration
from 0, or (fleettool extension, for input_files whose names carry their time) an ISO time such as
2026-11-30T00:20:00Z. engine/promtool_tests.py turns the same cases into promtool's own test files over the
exported Prometheus rules, in both name sets, listing each case PromQL cannot express and why; the test suite runs
them with the real `promtool test rules` (tests/test_promtool_rules.py), which keeps both engines honest.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fleettool.engine.evaluate import Finding, evaluate_rule
from fleettool.engine.kinds._horizon import SharedClock
from fleettool.engine.rules import Rule, RuleError, load_rules, parse_duration
from fleettool.metrics import OWN_PREFIX, map_dcgm_name, own_name_spec
from fleettool.model import Event, Sample
from fleettool.store import Store

_RE_SERIES = re.compile(r"^\s*([A-Za-z_:][\w:]*)\s*(?:\{(.*)\})?\s*$")
_RE_LABEL = re.compile(r'\s*([A-Za-z_]\w*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def parse_series(s: str) -> tuple[str, dict[str, str]]:
    m = _RE_SERIES.match(s)
    if not m:
        raise RuleError(f"bad series {s!r}")
    labels = {k: v for k, v in _RE_LABEL.findall(m.group(2) or "")}
    return m.group(1), labels


def expand_values(spec: str) -> list[float | None]:
    """promtool's notation: '1 2 3', '0+10x5' (0 10 .. 50), '1x3' (1 1 1 1), '_' and '_x3' (missing), 'stale'."""
    out: list[float | None] = []
    for tok in str(spec).split():
        if tok == "stale":
            out.append(None)
            continue
        m = re.fullmatch(r"(_|[-+]?[\d.eE+-]+?)(?:([-+][\d.eE]+))?(?:x(\d+))?", tok)
        if not m:
            raise RuleError(f"bad value {tok!r} in {spec!r}")
        start, step, times = m.group(1), m.group(2), m.group(3)
        if start == "_":
            out.extend([None] * (int(times) if times else 1))
            continue
        v = float(start)
        if times is None:
            out.append(v)
            continue
        n = int(times)
        d = float(step) if step else 0.0
        out.extend(v + d * i for i in range(n + 1))
    return out


def metric_of(name: str) -> tuple[str, float] | None:
    """A series name -> (canonical metric, factor to multiply values by) for the agent's /metrics names (base
    units), fleettool's recording names and DCGM_FI_* names."""
    if name.startswith(OWN_PREFIX):
        hit = own_name_spec(name)
        return (hit[0], 1.0 / hit[1]) if hit else None
    d = map_dcgm_name(name)
    return (d[0], d[1]) if d else None


@dataclass
class CaseResult:
    file: str
    test: int
    alertname: str
    eval_time: float
    ok: bool
    message: str


def load_case_inputs(store: Store, case: dict[str, Any], base: Path) -> None:
    interval = parse_duration(case.get("interval", "1m"), "interval")
    samples: list[Sample] = []
    for s in case.get("input_series") or []:
        name, labels = parse_series(s["series"])
        mm = metric_of(name)
        if mm is None:
            raise RuleError(f"unknown series name {name!r}")
        metric, factor = mm
        node = labels.get("hostname") or labels.get("Hostname") or labels.get("node") or "node"
        gpu = int(labels["gpu"]) if labels.get("gpu", "").isdigit() else None
        sub = ""
        for k in ("link", "collector", "mig", "port", "device", "netdev"):
            if k in labels:
                sub = f"{k}={labels[k]}"
        for i, v in enumerate(expand_values(s["values"])):
            if v is not None:
                samples.append(Sample(i * interval, node, gpu, labels.get("UUID"), metric, v * factor, sub))
    if samples:
        store.write_samples(samples)
    evs = []
    for e in case.get("input_events") or []:
        evs.append(
            Event(
                ts=parse_duration(e.get("at", 0), "at"),
                node=str(e.get("Hostname", e.get("hostname", "node"))),
                kind=str(e.get("kind", "xid")),
                message=str(e.get("message", "")),
                gpu=e.get("gpu"),
                code=e.get("code"),
                detail=dict(e.get("detail") or {}),
                source="test",
            )
        )
    if evs:
        store.write_events(evs)
    for i, run in enumerate(case.get("input_nccl_runs") or []):
        from fleettool.formats.nccl_tests import NcclRow

        bw = float(run["busbw"])
        row = NcclRow(
            int(run.get("size", 8 << 30)), None, "float", "sum", -1, ip_busbw_gbps=bw, oop_busbw_gbps=bw
        )
        store.write_nccl_run(
            run_id=f"t{i}",
            ts=parse_duration(run.get("at", 0), "at"),
            op=run.get("op", "all_reduce"),
            ranks=int(run.get("ranks", 8 * len(run["nodes"]))),
            nodes=list(run["nodes"]),
            avg_busbw_gbps=bw,
            peak_busbw_gbps=bw,
            wrong=0,
            version=None,
            source="test",
            rows=[row],
        )
    for f in case.get("input_files") or []:
        from fleettool.ingest.report import IngestOptions
        from fleettool.ingest.run import ingest

        # files that carry no time of their own sit at the start of the test's time axis, as input_nccl_runs do
        ingest(store, (base / f).resolve(), IngestOptions(quiet=True, at=0.0))


def firing_at(findings: list[Finding], t: float) -> list[Finding]:
    out = []
    for f in findings:
        fired = f.inst.fired_at if f.inst.fired_at is not None else f.inst.first_seen
        if fired <= t + 1e-9 and (f.inst.resolved_at is None or f.inst.resolved_at > t):
            out.append(f)
    return out


def labels_of(f: Finding) -> dict[str, str]:
    lab = {
        "Hostname": f.node,
        "severity": f.severity.value,
        "category": f.category.value,
        "action": f.action.value,
    }
    if f.gpu is not None:
        lab["gpu"] = str(f.gpu)
    if f.key and "=" in f.key:
        k, _, v = f.key.partition("=")
        lab[k] = v
    return lab


def run_test_file(path: Path, rules: list[Rule] | None = None) -> list[CaseResult]:
    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict) or "tests" not in doc:
        raise RuleError(f"{path}: expected 'rule_files' and 'tests'")
    if rules is None:
        files = [(path.parent / f).resolve() for f in doc.get("rule_files") or []]
        rules = load_rules(files) if files else load_rules()
    by_name = {r.alert: r for r in rules}
    results: list[CaseResult] = []
    for ti, case in enumerate(doc["tests"]):
        with Store(":memory:") as store:
            load_case_inputs(store, case, path.parent)
            cache: dict[tuple[str, float], list[Finding]] = {}
            for at in case.get("alert_rule_test") or []:
                name = at["alertname"]
                t = eval_time(at.get("eval_time", 0))
                rule = by_name.get(name)
                if rule is None:
                    results.append(CaseResult(str(path), ti, name, t, False, f"no rule named {name}"))
                    continue
                key = (name, t)
                if key not in cache:
                    # eval_time is the present for every node, as in promtool
                    cache[key] = evaluate_rule(store, rule, 0.0, t, horizons=SharedClock(store, t))
                got = sorted(
                    (labels_of(f) for f in firing_at(cache[key], t)), key=lambda d: sorted(d.items())
                )
                want = sorted(
                    (
                        {k: str(v) for k, v in (e.get("exp_labels") or {}).items()}
                        for e in at.get("exp_alerts") or []
                    ),
                    key=lambda d: sorted(d.items()),
                )
                ok = got == want
                msg = "ok" if ok else f"expected {want}, got {got}"
                results.append(CaseResult(str(path), ti, name, t, ok, msg))
    return results


def builtin_test_files() -> list[Path]:
    from importlib import resources

    root = Path(str(resources.files("fleettool.rules"))) / "tests"
    return sorted(root.glob("*.test.yaml"))


def coverage(rules: list[Rule], test_files: list[Path]) -> list[str]:
    """Every rule needs a test that fires it and a must-not-fire case (empty exp_alerts)."""
    fires: set[str] = set()
    quiet: set[str] = set()
    for p in test_files:
        doc = yaml.safe_load(p.read_text()) or {}
        for case in doc.get("tests") or []:
            for at in case.get("alert_rule_test") or []:
                (fires if at.get("exp_alerts") else quiet).add(at["alertname"])
    out = []
    for r in rules:
        if r.alert not in fires:
            out.append(f"{r.source}: rule {r.alert}: no test where it fires")
        if r.alert not in quiet:
            out.append(f"{r.source}: rule {r.alert}: no must-not-fire test (empty exp_alerts)")
    return out


def eval_time(v: Any) -> float:
    """A test's eval_time: a duration from time 0 (promtool's), or an ISO date-time (files with a time of their
    own, e.g. nccl-tests logs named after when they ran)."""
    if isinstance(v, dt.datetime):  # YAML reads an unquoted ISO time as a datetime
        return (v if v.tzinfo else v.replace(tzinfo=dt.timezone.utc)).timestamp()
    if isinstance(v, str) and re.match(r"\d{4}-\d\d-\d\d", v.strip()):
        from fleettool.units import parse_iso

        return parse_iso(v)
    return parse_duration(v, "eval_time")
