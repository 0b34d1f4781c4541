"""The live half of issue 31's faults: every spec of fixtures/ib-faults/ (a copy of a real sysfs tree with a fault
written in) found by the agent as deployed -- the REAL FabricCollector reading ROOT while tests/ib_faults.write_tree
changes it at the spec's offsets, the agent's loop (tick, flush to a DuckDB file, the RuleScheduler's incremental
judgement at each flush) on an injected wall and monotonic clock, so a 15 min spec runs in seconds -- and the same
rules as the spec's `expect.rules` and as its recording in replay (tests/test_fabric_rules.py); none on the healthy
trees. The samples are the collector's own: tests/ib_faults' mapping is not used here, only compared with.

The agent ticks every second, as deployed, with the collector's counter tier every 10 s, as the recording (one
poll every 5 s) has it; it flushes as Agent.run does: every flush_s (60 s) and at once when an instant rule's metric
changed value or an urgent event came, and a final flush when it stops.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleettool.agent.config import AgentConfig
from fleettool.agent.loop import Agent
from fleettool.collectors.fabric import FabricCollector
from fleettool.engine.incremental import RuleScheduler
from fleettool.engine.rules import load_rules
from fleettool.ingest.report import IngestOptions
from fleettool.ingest.run import ingest
from fleettool.store import Store
from tests import ib_faults
from tests.test_agent_live import Clock

# the port series both halves make; the agent's own health series (agent_*) are live only
FABRIC_ROWS = (
    "SELECT epoch(ts) AS t, node, gpu, metric, sub, value FROM samples "
    "WHERE metric LIKE 'ib_%' OR metric LIKE 'nic_%' OR metric LIKE 'net_%' ORDER BY ALL"
)


def fired(store: Store) -> set[str]:
    """Every rule the agent's alerts hold: an alert is an incident, its findings each a rule's (evidence)."""
    out: set[str] = set()
    for r in store.query("SELECT rule, evidence FROM alerts"):
        out.add(str(r["rule"]))
        out |= {str(f["rule"]) for f in json.loads(str(r["evidence"])).get("findings", [])}
    return out


def run_live(spec: ib_faults.Spec, work: Path, interval_s: float = 1.0) -> Path:
    """The agent over ROOT from the spec's start to its end, ticking every `interval_s` (the deployed 1 s); its
    store."""
    root, db = work / "sys", work / "live.duckdb"
    ib_faults.write_tree(spec, root, 0.0)
    clk = Clock(spec.start)
    every = spec.counter_every * spec.poll  # the counter tier as the recording has it: 10 s
    collector = FabricCollector(spec.node, root, mono=clk.mono, counters_every_s=every)
    cfg = AgentConfig(db=db, node=spec.node, quiet=True, interval_s=interval_s)
    ag = Agent(cfg, [collector], scheduler=RuleScheduler(load_rules()), clock=clk.now, mono=clk.mono)
    ag.start()
    changes = [a for a in ib_faults.change_offsets(spec) if a > 0]
    last_flush = -1e18
    for i in range(int(spec.end / interval_s) + 1):
        off = i * interval_s
        if changes and changes[0] <= off:  # the tree as it stands now, written before this tick reads it
            while changes and changes[0] <= off:
                changes.pop(0)
            ib_faults.write_tree(spec, root, off)
        ag.tick()
        if clk.mono() - last_flush >= cfg.flush_s or ag._urgent:  # Agent.run's flush decision
            assert ag.flush()
            last_flush = clk.mono()
        clk.tick(interval_s)
    assert ag.flush(final=True)
    return db


@pytest.mark.parametrize("name", ib_faults.names())
def test_each_fault_is_found_live_by_the_agent_as_in_replay(name: str, tmp_path: Path) -> None:
    spec = ib_faults.load(name)
    db = run_live(spec, tmp_path)
    with Store(db, read_only=True) as live:
        found = fired(live)
        nodes = {str(r["node"]) for r in live.query("SELECT DISTINCT node FROM alerts")}
        live_rows = live.query(FABRIC_ROWS)
    assert found == set(spec.expect["rules"])
    assert nodes <= {spec.node}
    # at the recording's instants (every 5 s; the agent read every second) the collector stored exactly what
    # the spec's recording holds, which the replay half judges
    with Store(tmp_path / "replay.duckdb") as rec:
        ingest(rec, ib_faults.FAULTS / name, IngestOptions(quiet=True))
        replayed = rec.query(FABRIC_ROWS)
    instants = {r["t"] for r in replayed}
    assert len(instants) == int(spec.end / spec.poll) + 1
    assert [r for r in live_rows if r["t"] in instants] == replayed
    assert len({r["t"] for r in live_rows}) == int(spec.end) + 1  # and every second between


def test_the_live_run_reads_the_tree_not_the_recording(tmp_path: Path) -> None:
    """The live store's port rows come from the collector reading ROOT: a port written DOWN in ROOT by hand
    (no spec says so) is in them, at the tick after it was written."""
    spec = ib_faults.load("healthy-h100")
    spec.changes.append(ib_faults.Change(60.0, write={"mlx5_9/ports/1/state": "1: DOWN"}))
    db = run_live(spec, tmp_path)
    with Store(db, read_only=True) as live:
        down = live.query(
            "SELECT min(epoch(ts)) - ? AS at FROM samples WHERE metric = 'ib_port_state' AND sub = 'port=mlx5_9/1' "
            "AND value = 1",
            [spec.start],
        )
        found = fired(live)
    assert down == [{"at": 60.0}] and "NicPortDown" in found
