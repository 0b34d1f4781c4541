"""The store's own SQL: the one alerts query and its triage order, and a round trip through each write function
of store/alerts.py, silences.py, nodes.py, baselines.py, meta.py and attach.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleettool.store import Store
from fleettool.store.alerts import (
    AlertOrder,
    AlertRecord,
    alert_by_id,
    alert_exists,
    alert_gpus,
    clear_alerts,
    list_alerts,
    open_alert_of_incident,
    put_alert,
    resolve_alert,
)
from fleettool.store.attach import attach, parquet_source, source_columns
from fleettool.store.baselines import Baseline, list_baselines, lookup, save
from fleettool.store.meta import get_meta, set_meta
from fleettool.store.nodes import Transition, node_audit, node_state, node_states, record_transition
from fleettool.store.silences import (
    AlertAck,
    Silence,
    active_silences,
    end_silence,
    insert_ack,
    insert_silence,
)

T = 1_796_000_000.0


def _alert(
    aid: str, severity: str, state: str, *, node: str = "gpu-1", gpu: int | None = 0, last: float = T
) -> AlertRecord:
    return AlertRecord(
        alert_id=aid,
        rule="R",
        category="xid",
        severity=severity,
        node=node,
        gpu=gpu,
        uuid=None,
        action="none",
        state=state,
        first_seen=last - 60,
        last_seen=last,
        summary=f"{severity} {state}",
        runbook="runbooks/r.md",
        incident="xid",
    )


def test_a_resolved_critical_lists_below_a_firing_warning() -> None:
    with Store() as st:
        put_alert(st, _alert("crit-resolved", "critical", "resolved", last=T + 100))
        put_alert(st, _alert("warn-firing", "warning", "firing"))
        put_alert(st, _alert("info-pending", "info", "pending"))
        put_alert(st, _alert("crit-firing", "critical", "firing", last=T - 100))
        got = [a["alert_id"] for a in list_alerts(st, now=T, order=AlertOrder.TRIAGE)]
        assert got == ["crit-firing", "warn-firing", "info-pending", "crit-resolved"]


def test_triage_ties_break_newest_first_then_node_then_gpu() -> None:
    with Store() as st:
        put_alert(st, _alert("old", "warning", "firing", last=T - 10))
        put_alert(st, _alert("b-gpu1", "warning", "firing", node="b", gpu=1))
        put_alert(st, _alert("b-node", "warning", "firing", node="b", gpu=None))
        put_alert(st, _alert("a-gpu2", "warning", "firing", node="a", gpu=2))
        assert [a["alert_id"] for a in list_alerts(st, now=T)] == ["a-gpu2", "b-node", "b-gpu1", "old"]


def test_list_alerts_filters_and_annotates() -> None:
    with Store() as st:
        put_alert(st, _alert("a1", "critical", "firing", node="n1"))
        put_alert(st, _alert("a2", "warning", "resolved", node="n2", gpu=3))
        insert_silence(st, Silence("s1", T - 10, T + 10, "bob", "maint", node="n1"))
        rows = list_alerts(st, now=T)
        assert [(r["alert_id"], r["silenced"], r["silence_id"]) for r in rows] == [
            ("a1", True, "s1"),
            ("a2", False, None),
        ]
        assert [r["alert_id"] for r in list_alerts(st, now=T, include_silenced=False)] == ["a2"]
        assert [r["alert_id"] for r in list_alerts(st, now=T + 20, include_silenced=False)] == ["a1", "a2"]
        assert [r["alert_id"] for r in list_alerts(st, now=T, state="resolved")] == ["a2"]
        assert [r["alert_id"] for r in list_alerts(st, now=T, node="n2", gpu=3)] == ["a2"]
        assert [r["alert_id"] for r in list_alerts(st, now=T, limit=1)] == ["a1"]
        with pytest.raises(ValueError, match="not an alert state"):
            list_alerts(st, now=T, state="open")


def test_put_alert_round_trips_and_replaces() -> None:
    with Store() as st:
        rec = _alert("a1", "critical", "firing", gpu=2)
        put_alert(st, AlertRecord(**{**_fields(rec), "evidence": {"window": [1, 2]}}))
        row = alert_by_id(st, "a1")
        assert row is not None and row["severity"] == "critical" and row["gpu"] == 2
        assert row["evidence"] == '{"incident":"xid","window":[1,2]}'
        assert open_alert_of_incident(st, "gpu-1", 2, "xid", T - 1) == ("a1", T - 60)
        assert open_alert_of_incident(st, "gpu-1", 2, "xid", T + 1) is None  # ended before
        assert open_alert_of_incident(st, "gpu-1", 2, "memory", T - 1) is None
        put_alert(st, AlertRecord(**{**_fields(rec), "state": "pending"}))
        assert st.scalar("SELECT count(*) FROM alerts") == 1 and alert_by_id(st, "a1")["state"] == "pending"  # type: ignore[index]
        assert alert_gpus(st) == [("gpu-1", 2)] and alert_exists(st, "a1") and not alert_exists(st, "x")
        seen = list_alerts(st, now=T)[0]["last_seen"]
        resolve_alert(st, "a1")
        row = list_alerts(st, now=T)[0]
        assert row["state"] == "resolved" and row["last_seen"] == seen  # when the condition last held
        clear_alerts(st)
        assert list_alerts(st, now=T) == [] and alert_by_id(st, "a1") is None


def _fields(rec: AlertRecord) -> dict:  # type: ignore[type-arg]
    return {f: getattr(rec, f) for f in AlertRecord.__dataclass_fields__}


def test_silences_and_acks_round_trip() -> None:
    with Store() as st:
        put_alert(st, _alert("a1", "critical", "firing"))
        insert_silence(st, Silence("s1", T, T + 100, "bob", "maint", gpu=0, rule="R", category="xid"))
        (s,) = active_silences(st, T + 1)
        assert (s["silence_id"], s["node"], s["gpu"], s["rule"], s["who"]) == ("s1", None, 0, "R", "bob")
        assert end_silence(st, "s1", T + 2) and active_silences(st, T + 3) == []
        assert not end_silence(st, "nope", T)
        insert_ack(st, AlertAck("a1", "ack", T, T + 100, "alice", "on it"))
        (a,) = list_alerts(st, now=T + 5)  # the silence ended at T + 2
        assert a["acknowledged"] is True and a["ack_by"] == "alice" and a["silenced"] is False
        assert list_alerts(st, now=T + 101)[0]["acknowledged"] is False


def test_node_transitions_round_trip() -> None:
    with Store() as st:
        assert node_state(st, "n1") is None and node_states(st) == {}
        got = record_transition(
            st, Transition(T, "n1", "healthy", "cordoned", "alice", "xid 79", "kubectl cordon n1")
        )
        assert node_state(st, "n1") == got and got.state == "cordoned" and got.who == "alice"
        record_transition(st, Transition(T + 60, "n1", "cordoned", "in-repair", "bob", "swap"))
        assert node_states(st) == {"n1": "in-repair"}
        audit = node_audit(st, "n1")
        assert [(r["from_state"], r["to_state"], r["side_effects"]) for r in audit] == [
            ("healthy", "cordoned", "kubectl cordon n1"),
            ("cordoned", "in-repair", ""),
        ]


def test_baselines_round_trip() -> None:
    with Store() as st:
        b = Baseline("H200", "550.1", "sm_clock_mhz", "", 1980.0, 12.0, 8)
        save(st, [b, Baseline("H200", "560.2", "sm_clock_mhz", "", 1900.0, 5.0, 16)], T)
        assert lookup(st, "H200", "550.1", "sm_clock_mhz") == b
        assert lookup(st, "H200", None, "sm_clock_mhz").driver == "560.2"  # type: ignore[union-attr]  # most GPUs
        assert lookup(st, "A100", None, "sm_clock_mhz") is None
        save(st, [b], T + 1)  # replaces
        assert [r["driver"] for r in list_baselines(st)] == ["550.1"]


def test_meta_round_trip() -> None:
    with Store() as st:
        assert get_meta(st, "export:samples:x") is None
        set_meta(st, "export:samples:x", "2026-01-01T00:00:00")
        set_meta(st, "export:samples:x", "2026-01-01T01:00:00")
        assert get_meta(st, "export:samples:x") == "2026-01-01T01:00:00"


def test_attach_copies_or_views_parquet_with_missing_columns_as_null(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = tmp_path / "gpus.parquet"
    pq.write_table(pa.table({"node": ["n1"], "gpu": pa.array([0], pa.int16()), "uuid": ["GPU-0"]}), f)
    src = parquet_source([str(f)])
    with Store() as st:
        have = source_columns(st, src)
        assert have == {"node", "gpu", "uuid"}
        attach(st, "gpus", src, have=have, copy=True)
        assert st.query("SELECT node, gpu, uuid, model FROM gpus") == [
            {"node": "n1", "gpu": 0, "uuid": "GPU-0", "model": None}
        ]
    with Store() as st:
        attach(st, "gpus", src, have=have, copy=False)
        assert st.scalar("SELECT count(*) FROM duckdb_views() WHERE view_name = 'gpus'") == 1
        assert st.scalar("SELECT uuid FROM gpus") == "GPU-0"


def test_gpu_uuid_from_the_inventory() -> None:
    from fleettool.model import GpuInfo

    with Store() as st:
        st.upsert_gpus([GpuInfo("n1", 3, "GPU-3")], T)
        assert st.gpu_uuid("n1", 3) == "GPU-3" and st.gpu_uuid("n1", 4) is None
