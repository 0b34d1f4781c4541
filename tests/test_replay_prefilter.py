"""Replay's whole-history pass skips the rules that can find nothing (issue 33 part 3) and raises the same
alerts: the rules whose metric or event kinds have no row in the replayed store (engine/prefilter.without_inputs),
then the thresholds, counters and peers the agent's prefilter finds quiet over the whole range. Each check judges
the same store with the lever on and off, over the built-in rules, and compares every incident field by field."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleettool.engine import prefilter
from fleettool.engine.evaluate import data_range, evaluate, skipped
from fleettool.engine.rules import load_rules, parse_rules
from fleettool.ingest.report import IngestOptions
from fleettool.ingest.run import ingest
from fleettool.model import Event, Sample
from fleettool.store import Store
from tests.conftest import FIXTURES, H200, SCENARIOS
from tests.test_rule_levers import _node

RULES = load_rules()
T0 = 1_800_000_000.0
RECORDINGS = sorted(
    [p for p in SCENARIOS.iterdir() if p.is_dir()]
    + [p for p in (FIXTURES / "ib-faults").iterdir() if p.is_dir() and (p / "nvml.om.gz").exists()]
    + [H200],
    key=lambda p: p.name,
)


def _incidents(st: Store, on: bool) -> list[tuple[object, ...]]:
    return [
        (
            i.node,
            i.gpu,
            i.key,
            i.state,
            i.first_seen,
            i.last_seen,
            i.severity.value,
            i.action.value,
            i.summary(),
            [(f.rule.alert, f.inst.first_seen, f.inst.last_seen, f.state, f.summary) for f in i.findings],
        )
        for i in evaluate(st, RULES, workers=2, prefilter=on)
    ]


def _same(st: Store) -> list[tuple[object, ...]]:
    on, off = _incidents(st, True), _incidents(st, False)
    assert on == off, "skipping rules changed the incidents"
    return on


@pytest.mark.parametrize("rec", RECORDINGS, ids=lambda p: p.name)
def test_skipping_changes_no_incident_on_the_recordings(rec: Path, tmp_path: Path) -> None:
    with Store(tmp_path / "r.duckdb") as st:
        ingest(st, rec, IngestOptions(quiet=True))
        rng = data_range(st)
        assert rng is not None
        got = _same(st)
        skip = skipped(st, RULES, *rng)
        assert skip and len(skip) < len(RULES)
        fired = {f[0] for i in got for f in i[-1]}  # type: ignore[attr-defined]
        assert not fired & skip, "a rule that found something was listed as skipped"


def test_skipping_changes_no_incident_on_a_node_with_faults(tmp_path: Path) -> None:
    with Store(tmp_path / "f.duckdb") as st:
        st.write_samples(_node(1800))
        got = _same(st)
        fired = {f[0] for i in got for f in i[-1]}  # type: ignore[attr-defined]
        assert {"PcieLinkBelowPeers", "GpuClockBelowPeers", "NvlinkCrcErrorRate", "NvlinkLinksFewer"} <= fired


def test_a_store_of_gpu_samples_alone_skips_the_event_and_port_rules(tmp_path: Path) -> None:
    """A 2-sample replay judged 67 rules at ~7 ms each over no data; now two queries say which have no input."""
    with Store(tmp_path / "t.duckdb") as st:
        st.write_samples([Sample(T0, "n1", 0, "GPU-0", "gpu_temp_c", 40.0)])
        st.write_samples([Sample(T0 + 1, "n1", 0, "GPU-0", "gpu_temp_c", 41.0)])
        none = prefilter.without_inputs(st, RULES)
        for r in RULES:
            if r.kind in ("event", "port_episodes", "port_peer", "port_count", "increase", "rate", "peer"):
                assert r.alert in none, r.alert
        assert "GpuTemperatureAboveSlowdown" not in none  # its metric is stored
        assert "GpuSeriesStopped" not in none  # absent: its input is not one metric; always judged
        assert len(skipped(st, RULES, T0, T0 + 1)) >= 60


def test_an_event_rule_is_judged_once_one_event_of_its_kinds_is_stored(tmp_path: Path) -> None:
    """Any event of the rule's kinds, timed or not, keeps the rule; another kind does not."""
    rules = {r.alert: r for r in RULES}
    xid, sxid = rules["GpuXid"], rules["NvswitchSxid"]
    with Store(tmp_path / "e.duckdb") as st:
        st.write_samples([Sample(T0, "n1", 0, "GPU-0", "gpu_temp_c", 40.0)])
        assert {xid.alert, sxid.alert} <= prefilter.without_inputs(st, [xid, sxid])
        msg = "NVRM: Xid (PCI:0000:17:00): 79, pid=1, GPU has fallen off the bus."
        st.write_events([Event(None, "n1", "xid", msg, gpu=0, code=79)])
        assert prefilter.without_inputs(st, [xid, sxid]) == {sxid.alert}
        got = _same(st)
        assert any(f[0] == "GpuXid" for i in got for f in i[-1])  # type: ignore[attr-defined]


def test_a_rule_whose_input_is_unknown_is_never_skipped_for_it(tmp_path: Path) -> None:
    """A sql rule without needs_metric reads what its query says: judged whatever the store holds."""
    (rule,) = parse_rules(
        """
groups:
- name: t
  rules:
  - alert: AnyPoint
    kind: sql
    query: "SELECT node, gpu, NULL AS key, ts, true AS active, value FROM samples WHERE ts BETWEEN $start AND $end"
    severity: warning
    category: thermal
    action: inspect-hardware
""",
        "t.yaml",
    )
    assert prefilter.inputs_of(rule) is None
    with Store(tmp_path / "s.duckdb") as st:
        st.write_samples([Sample(T0, "n1", 0, "GPU-0", "gpu_temp_c", 40.0)])
        assert rule.alert not in prefilter.without_inputs(st, [rule])
