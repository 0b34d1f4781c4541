"""A store written by an older fleettool is read as it is: the readers (`alerts`, `report`, `silence list`,
`node X`, the TUI's data source) see the current schema in memory (tables added since are empty, columns added
since read as NULL) and never write to the file; the first read-write open migrates it.

The schema-2 store is built here from the DDL fleettool had at schema version 2 (commit ae6bf07,
`git show ae6bf07:fleettool/store/schema.py`): no silences, acknowledgements, baselines or node lifecycle, and no
format marker in `meta`."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import duckdb
import pytest

from fleettool.store import Store
from fleettool.store.schema import SCHEMA_VERSION
from tests.conftest import run_cli

SCHEMA_2 = [
    "CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
    """CREATE TABLE samples (ts TIMESTAMP NOT NULL, node VARCHAR NOT NULL, gpu SMALLINT, uuid VARCHAR,
        metric VARCHAR NOT NULL, sub VARCHAR NOT NULL DEFAULT '', value DOUBLE NOT NULL)""",
    """CREATE TABLE samples_1m (minute TIMESTAMP NOT NULL, node VARCHAR NOT NULL, gpu SMALLINT, uuid VARCHAR,
        metric VARCHAR NOT NULL, sub VARCHAR NOT NULL DEFAULT '', vmin DOUBLE, vmean DOUBLE, vmax DOUBLE,
        n INTEGER)""",
    """CREATE TABLE events (ts TIMESTAMP, node VARCHAR NOT NULL, gpu SMALLINT, uuid VARCHAR, pci_bus_id VARCHAR,
        kind VARCHAR NOT NULL, code INTEGER, message VARCHAR, raw VARCHAR, source VARCHAR, detail JSON)""",
    """CREATE TABLE gpu_pods (node VARCHAR NOT NULL, gpu SMALLINT, uuid VARCHAR, namespace VARCHAR,
        pod VARCHAR, container VARCHAR, first_seen TIMESTAMP, last_seen TIMESTAMP)""",
    """CREATE TABLE gpus (node VARCHAR NOT NULL, gpu SMALLINT, uuid VARCHAR, pci_bus_id VARCHAR, model VARCHAR,
        driver VARCHAR, serial VARCHAR, first_seen TIMESTAMP, last_seen TIMESTAMP)""",
    """CREATE TABLE nccl_runs (run_id VARCHAR PRIMARY KEY, ts TIMESTAMP, op VARCHAR, ranks INTEGER,
        nodes VARCHAR[], avg_busbw_gbps DOUBLE, peak_busbw_gbps DOUBLE, wrong BIGINT, version VARCHAR,
        source VARCHAR)""",
    """CREATE TABLE nccl_rows (run_id VARCHAR NOT NULL, size_bytes BIGINT, count BIGINT, dtype VARCHAR,
        redop VARCHAR, root INTEGER, oop_time_us DOUBLE, oop_algbw_gbps DOUBLE, oop_busbw_gbps DOUBLE,
        oop_wrong BIGINT, ip_time_us DOUBLE, ip_algbw_gbps DOUBLE, ip_busbw_gbps DOUBLE, ip_wrong BIGINT)""",
    """CREATE TABLE burnin_results (run_id VARCHAR NOT NULL, ts TIMESTAMP, node VARCHAR, gpu SMALLINT,
        uuid VARCHAR, test VARCHAR, figure DOUBLE, unit VARCHAR, floor DOUBLE, verdict VARCHAR, reason VARCHAR,
        evidence JSON)""",
    """CREATE TABLE alerts (alert_id VARCHAR PRIMARY KEY, rule VARCHAR, category VARCHAR, severity VARCHAR,
        node VARCHAR, gpu SMALLINT, uuid VARCHAR, action VARCHAR, state VARCHAR, first_seen TIMESTAMP,
        last_seen TIMESTAMP, summary VARCHAR, runbook VARCHAR, evidence JSON)""",
    """CREATE TABLE ingests (digest VARCHAR PRIMARY KEY, path VARCHAR, format VARCHAR, node VARCHAR, rows BIGINT,
        issues INTEGER, ingested_at TIMESTAMP)""",
]
NODE = "gpu-21"


def make_schema2_store(path: Path) -> None:
    """A schema-2 store three days old: one firing XID 79 alert of gpu-21, its event and a GPU."""
    t0 = time.time() - 3 * 86400
    con = duckdb.connect(str(path))
    for stmt in SCHEMA_2:
        con.execute(stmt)
    con.execute("INSERT INTO meta VALUES ('schema_version', '2')")
    con.execute(
        "INSERT INTO events (ts, node, gpu, kind, code, message, source) "
        "VALUES (to_timestamp(?)::TIMESTAMP, ?, 3, 'xid', 79, 'GPU has fallen off the bus', 'kmsg')",
        [t0, NODE],
    )
    con.execute(
        "INSERT INTO gpus (node, gpu, uuid, pci_bus_id, model) VALUES (?, 3, 'GPU-3', '0000:18:00', 'H200')",
        [NODE],
    )
    con.execute(
        "INSERT INTO samples VALUES (to_timestamp(?)::TIMESTAMP, ?, 3, 'GPU-3', 'gpu_temp_c', '', 61.0)",
        [t0, NODE],
    )
    con.execute(
        """INSERT INTO alerts (alert_id, rule, category, severity, node, gpu, action, state, first_seen,
           last_seen, summary, runbook, evidence)
           VALUES ('a1b2c3d4e5f60718', 'GpuFellOffBus', 'xid', 'critical', ?, 3, 'drain', 'firing',
           to_timestamp(?)::TIMESTAMP, to_timestamp(?)::TIMESTAMP, 'GPU 3 fell off the bus', 'runbooks/x.md',
           '{}')""",
        [NODE, t0, t0 + 60],
    )
    con.close()


@pytest.fixture
def old_store(tmp_path: Path) -> Path:
    p = tmp_path / "old.duckdb"
    make_schema2_store(p)
    return p


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    "args",
    [
        ("alerts", "--json"),
        ("report", "--json"),
        ("silence", "list", "--json"),
        ("node", NODE, "--json"),
        ("events", "--json"),
        ("gpus", "--json"),
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_readers_read_a_schema2_store_without_changing_it(old_store: Path, args: tuple[str, ...]) -> None:
    before = _sha(old_store)
    r = run_cli(*args, "--db", str(old_store), timeout=60)
    assert r.returncode == 0, r.stderr
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr
    out = json.loads(r.stdout)
    if args[0] == "alerts":
        assert [(a["rule"], a["node"], a["state"]) for a in out] == [("GpuFellOffBus", NODE, "firing")]
    elif args[0] == "node":
        assert out["node"] == NODE and out["state"] == "healthy"
    elif args[0] == "silence":
        assert out == []
    assert _sha(old_store) == before, "a reader wrote to the store"
    assert not Path(str(old_store) + ".wal").exists()


def test_the_tui_source_reads_a_schema2_store(old_store: Path) -> None:
    from fleettool.tui.source import Source
    from fleettool.views import alerts, node_view

    src = Source(db=old_store)
    with src.open() as store:
        rows = alerts(store)
        node = node_view(store, NODE)
    assert [(r["rule"], r["state"]) for r in rows] == [("GpuFellOffBus", "firing")]
    assert node["state"] == "healthy"


def test_a_schema1_store_reads_event_detail_as_null(tmp_path: Path) -> None:
    """Version 1 had no events.detail: the reader's events carry it as NULL, the file keeps its columns."""
    p = tmp_path / "v1.duckdb"
    make_schema2_store(p)
    con = duckdb.connect(str(p))
    con.execute("ALTER TABLE events DROP COLUMN detail")
    con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    con.close()
    with Store(p, read_only=True) as st:
        assert st.query("SELECT code, detail FROM events") == [{"code": 79, "detail": None}]
        assert st.scalar("SELECT count(*) FROM silences") == 0


def test_the_first_write_migrates_the_file(old_store: Path) -> None:
    r = run_cli("silence", "add", "--db", str(old_store), "--node", NODE, "--for", "1h", "-m", "PSU swap")
    assert r.returncode == 0, r.stderr
    with Store(old_store, read_only=True) as st:
        assert st.scalar("SELECT value FROM meta WHERE key = 'schema_version'") == str(SCHEMA_VERSION)
        assert st.scalar("SELECT count(*) FROM silences") == 1
