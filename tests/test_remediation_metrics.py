"""/metrics of a real agent process (`fleettool agent`, the fake GPU source) shows the store's remediations in
progress: `fleettool_remediations_in_progress{node, rung}` counts the episodes still running or proving, read
from the store at each flush; one that ends (written by another process, as `fleettool remediate` would) leaves."""

from __future__ import annotations

import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from fleettool.store import Store
from fleettool.store.remediations import Remediation, new_remediation, update_remediation
from tests.test_agent import AgentProcess

NAME = "fleettool_remediations_in_progress"
T = 1_796_529_600.0  # 2026-12-06T04:00:00Z


def series(text: str) -> dict[tuple[str, str], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == NAME:
                assert s.labels["Hostname"] == "rem-agent", s.labels
                out[(s.labels["node"], s.labels["rung"])] = s.value
    return out


def test_the_agents_metrics_count_the_stores_open_remediations_and_drop_an_ended_one(tmp_path: Path) -> None:
    db = tmp_path / "agent.duckdb"
    with Store(db) as st:

        def ep(node: str, gpu: int | None, rung: str, rid: str) -> str:
            r = Remediation(node, gpu, rung, "local", "test", "XID 79", started=T, paged_at=T - 60)
            return new_remediation(st, r, rid)

        ep("rem-agent", 3, "reset", "rem-1")
        ep("rem-agent", 5, "reset", "rem-2")  # two GPUs of the node in reset: 2
        update_remediation(st, ep("gpu-18", None, "reboot", "rem-3"), state="proving")  # proving is open
        update_remediation(st, ep("gpu-19", 1, "reset", "rem-4"), state="proven", ended=T + 900)  # ended
    args = (
        "--db",
        str(db),
        "--node",
        "rem-agent",
        "--source",
        "fake",
        "--kmsg",
        "off",
        "--dcgm-exporter",
        "off",
    )
    with AgentProcess(*args, "--interval", "1s", "--flush", "1s") as ag:
        body = ag.wait_metrics(NAME + "{")
        assert f"# TYPE {NAME} gauge" in body
        assert series(body) == {("rem-agent", "reset"): 2.0, ("gpu-18", "reboot"): 1.0}
        with Store(db, wait_s=30) as st:  # between the agent's flushes, as `fleettool remediate` writes
            update_remediation(st, "rem-3", state="proven", ended=T + 1800)
        end = time.monotonic() + 30
        while ("gpu-18", "reboot") in series(body) and time.monotonic() < end:
            time.sleep(0.3)
            body = ag.metrics() or body
        code, err, _ = ag.stop()
    assert code == 0, err
    assert series(body) == {("rem-agent", "reset"): 2.0}, body
