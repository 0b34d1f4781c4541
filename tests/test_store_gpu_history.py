"""Store times are UTC and an alert names the GPU of its own time: after a GPU is swapped at the same index,
an alert about the new GPU carries the new UUID, one about the old GPU the old UUID. Real DuckDB, the real
pipeline (write -> rules -> alerts) and the real CLI under another time zone."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleettool.collectors.base import Collected
from fleettool.engine.rules import load_rules
from fleettool.model import Event, EventKind, GpuInfo, Sample
from fleettool.pipeline import Pipeline
from fleettool.store import Store
from fleettool.store.gpu_history import gpu_uuid_at
from tests.conftest import SCENARIOS, run_cli

NODE = "gpu-21"
T0 = 1_800_000_000.0
OLD, NEW = "GPU-0ld00000-0000-4000-8000-000000000003", "GPU-9e700000-0000-4000-8000-000000000003"


def _gpu(uuid: str, serial: str) -> GpuInfo:
    return GpuInfo(NODE, 3, uuid, "0000:48:00", "NVIDIA H200", "580.159.04", serial)


def _temps(uuid: str, start: float, n: int) -> list[Sample]:
    return [Sample(start + k, NODE, 3, uuid, "gpu_temp_c", 40.0) for k in range(n)]


def _swapped(db: Path) -> Store:
    """GPU 3 read as OLD for 100 s (flushed at +100), swapped, read as NEW from +1000 (flushed at +1100);
    an XID 79 on the new GPU at +1050 (its event names no UUID, as a kernel line names only the PCI id)."""
    st = Store(db)
    pipe = Pipeline(st)
    pipe.write(Collected(samples=_temps(OLD, T0, 100), gpus=[_gpu(OLD, "1653724000003")]), T0 + 100)
    xid = Event(T0 + 1050, NODE, EventKind.XID.value, "Xid 79: GPU has fallen off the bus", gpu=3, code=79)
    pipe.write(
        Collected(samples=_temps(NEW, T0 + 1000, 100), events=[xid], gpus=[_gpu(NEW, "1653724009999")]),
        T0 + 1100,
    )
    return st


def test_an_alert_after_a_swap_carries_the_uuid_of_its_own_time(tmp_path: Path) -> None:
    with _swapped(tmp_path / "a.duckdb") as st:
        Pipeline(st, load_rules()).evaluate()
        got = st.rows("SELECT gpu, uuid FROM alerts WHERE gpu = 3")
    assert got and {u for _, u in got} == {NEW}


def test_the_uuid_of_an_index_at_a_time(tmp_path: Path) -> None:
    with _swapped(tmp_path / "a.duckdb") as st:
        assert gpu_uuid_at(st, NODE, 3, T0 + 50) == OLD
        assert gpu_uuid_at(st, NODE, 3, T0 + 500) == OLD  # nothing read in between: the last one read
        assert gpu_uuid_at(st, NODE, 3, T0 + 1050) == NEW
        assert gpu_uuid_at(st, NODE, 3, T0 + 1000) == NEW  # the new GPU's very first read
        assert gpu_uuid_at(st, NODE, 4, T0 + 1050) is None
        st.execute("DELETE FROM samples")  # past raw retention: the inventory's first-seen times answer
        assert gpu_uuid_at(st, NODE, 3, T0 + 500) == OLD
        assert gpu_uuid_at(st, NODE, 3, T0 + 5000) == NEW
        assert gpu_uuid_at(st, NODE, 3, T0 - 5000) == OLD  # before anything: the first GPU seen there


@pytest.mark.parametrize("tz", ["America/New_York", "Asia/Kolkata"])
def test_ingested_at_is_utc_whatever_the_time_zone(tmp_path: Path, tz: str) -> None:
    db = tmp_path / "t.duckdb"
    before = time.time()
    r = run_cli(
        "replay", str(SCENARIOS / "app-xid" / "dcgm-exporter.om.gz"), "--db", str(db), "-q", env={"TZ": tz}
    )
    after = time.time()
    assert r.returncode == 0, r.stderr
    with Store(db, read_only=True) as st:
        (at,) = st.rows("SELECT epoch(ingested_at) FROM ingests")[0]
    assert before - 1 <= at <= after + 1, f"ingested_at {at - before:+.0f} s from now under TZ={tz}"
