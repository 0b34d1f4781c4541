"""NvlinkLinksFewer reads each GPU's whole hours from the store's hourly peaks (peak_1h, store/peaks.py) and only
the partial hours at its look-back's edges from raw rows, with the same alerts as the query that read every raw
row of 7 days (OLD_QUERY, the rule as it was): whole (as replay judges a recording once, after a bulk ingest) and
incrementally (as the agent writes a minute and judges it, with a restart and a gap), over a node whose history is
longer than the 7-day look-back. And the peaks stay exact through every path that changes samples."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from fleettool.engine.evaluate import data_range, evaluate, evaluate_rule
from fleettool.engine.incremental import RuleScheduler, lookback
from fleettool.engine.kinds import KINDS
from fleettool.engine.rules import load_rules
from fleettool.model import Sample
from fleettool.store import Store
from fleettool.store.peaks import PEAKS_SELECT
from fleettool.store.salvage import salvage
from fleettool.store.values import db_time

# the rule's query before peak_1h (rules/nvlink.yaml at e88080b): every raw row of [$start - 7 days, $end]
OLD_QUERY = """SELECT node, gpu, ts, coalesce(value < prior, false) AS active, value FROM (
  SELECT node, gpu, ts, value, max(value) OVER (PARTITION BY node, gpu ORDER BY ts
         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prior
  FROM (SELECT node, gpu, ts, value FROM samples WHERE metric = 'nvlink_links_active'
          AND ts BETWEEN $start - INTERVAL 7 DAY AND $end
        UNION ALL SELECT node, gpu, minute AS ts, vmax AS value FROM samples_1m
          WHERE metric = 'nvlink_links_active' AND minute BETWEEN $start - INTERVAL 7 DAY AND $end))
WHERE ts >= $start"""

NEW = next(r for r in load_rules() if r.alert == "NvlinkLinksFewer")
OLD = dataclasses.replace(NEW, params={**NEW.params, "query": OLD_QUERY})
DAY, HOUR = 86400.0, 3600.0
T0 = 1_800_000_000.0 + 1234.5  # not on an hour: the look-back's edges fall inside hours
SPAN = 8.17 * DAY  # longer than the 7-day look-back
LIVE = 8.0 * DAY  # from here on the agent writes and judges minute by minute
NODE = "nv-1"


def links(gpu: int, t: float) -> float | None:
    """GPU `gpu`'s active-link count at T0 + t (None: no sample, the node was down)."""
    if gpu == 0:  # 18 for 8 days, 16 for 45 minutes, back up to 18
        return 16.0 if 8.06 * DAY <= t < 8.06 * DAY + 45 * 60 else 18.0
    if gpu == 1:  # a drop within the first hour: 18 for 20 minutes, then 17 for good
        return 18.0 if t < 20 * 60 else 17.0
    if gpu == 2:  # 8 by design; a 1-hour gap; then 7 for 20 minutes
        if 8.01 * DAY <= t < 8.01 * DAY + HOUR:
            return None
        return 7.0 if 8.11 * DAY <= t < 8.11 * DAY + 20 * 60 else 8.0
    # 16, with 18 for 40 minutes on day 1: the agent's look-back edge sweeps over it while it judges day 8
    return 18.0 if 1.0 * DAY <= t < 1.0 * DAY + 40 * 60 else 16.0


def samples(t0: float, t1: float) -> list[Sample]:
    """Every GPU's point at each minute in [T0 + t0, T0 + t1), with a busy metric beside it."""
    out = []
    k = int(t0 // 60)
    while k * 60 < t1:
        t = k * 60.0
        for g in range(4):
            v = links(g, t)
            if v is not None:
                out.append(Sample(T0 + t, NODE, g, f"GPU-{g}", "nvlink_links_active", v))
                out.append(Sample(T0 + t, NODE, g, f"GPU-{g}", "gpu_temp_c", 40.0 + g))
        k += 1
    return out


def arrow(rows: list[Sample]) -> pa.Table:
    return pa.table(
        {
            "ts": pa.array([int(s.ts * 1e6) for s in rows], pa.timestamp("us")),
            "node": [s.node for s in rows],
            "gpu": pa.array([s.gpu for s in rows], pa.int16()),
            "uuid": [s.uuid for s in rows],
            "metric": [s.metric for s in rows],
            "sub": [s.sub for s in rows],
            "value": [s.value for s in rows],
        }
    )


def obs(st: Store, rule: Any, start: float, end: float) -> tuple[Any, Any]:
    res = KINDS["sql"].evaluate(st, rule, start, end)
    return res.obs, res.extra


def findings(st: Store, rule: Any, start: float, end: float) -> list[tuple[Any, ...]]:
    fs = evaluate_rule(st, rule, start, end)
    return sorted((f.node, f.gpu, f.state, f.inst.first_seen, f.inst.last_seen, f.summary) for f in fs)


def peaks(st: Store) -> list[tuple[Any, ...]]:
    return st.rows("SELECT * FROM peak_1h ORDER BY ALL")


def recomputed(st: Store) -> list[tuple[Any, ...]]:
    return st.rows(f"SELECT * FROM ({PEAKS_SELECT}) ORDER BY ALL", {"lo": "0001-01-01", "hi": "9999-01-01"})


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Replay's way: the whole history in one bulk ingest, the first 3 days rolled up by retention."""
    db = tmp_path_factory.mktemp("nvl") / "whole.duckdb"
    rows = samples(0, SPAN)
    tab = arrow(rows)
    with Store(db) as st:
        st.begin()
        st.write_sample_batches(tab.schema, tab.to_batches(max_chunksize=20_000))
        st.commit()
        st.apply_retention(T0 + 5.5 * DAY, 2.5 * DAY, 400 * DAY)
        assert st.scalar("SELECT count(*) FROM samples_1m") > 0
    return db


def test_whole_history_same_alerts_as_reading_every_raw_row(whole: Path) -> None:
    with Store(whole) as st:
        assert peaks(st) == recomputed(st) and peaks(st)
        rng = data_range(st)
        assert rng is not None
        assert findings(st, NEW, *rng) == findings(st, OLD, *rng)
        got = {(f[1], f[2]) for f in findings(st, NEW, *rng)}
        assert {g for g, _ in got} == {0, 1, 2, 3}  # each fault fires
        # windows that start anywhere: the look-back's edges inside hours, on one, past the data's start
        for k in range(0, 96):
            end = T0 + 7.0 * DAY + k * 37 * 60 + 11.0
            start = end - lookback(NEW) - (k % 5) * 997.0
            assert obs(st, NEW, start, end) == obs(st, OLD, start, end), (k, start, end)
        hour = (T0 + 8 * DAY) // HOUR * HOUR + 7 * DAY  # $start - 7 days exactly on an hour
        assert obs(st, NEW, hour, hour + 1800) == obs(st, OLD, hour, hour + 1800)
        inc_new = [(i.node, i.gpu, i.state, i.first_seen) for i in evaluate(st, [NEW])]
        inc_old = [(i.node, i.gpu, i.state, i.first_seen) for i in evaluate(st, [OLD])]
        assert inc_new == inc_old and inc_new


def test_incremental_as_the_agent_runs(tmp_path: Path) -> None:
    """The agent's way: an hour a flush for 8 days, then a flush and a judgement every minute, the scheduler
    restarted after 90 minutes, GPU 2 silent for an hour; each minute's observations and the alerts written are those of
    the query that read every raw row."""
    dbs = {name: tmp_path / f"{name}.duckdb" for name in ("new", "old")}
    stores = {name: Store(p) for name, p in dbs.items()}
    try:
        for st in stores.values():
            t = 0.0
            while t < LIVE:
                st.write_samples(samples(t, min(t + HOUR, LIVE)))
                t += HOUR
            st.apply_retention(T0 + 5.5 * DAY, 2.5 * DAY, 400 * DAY)
        scheds = {"new": RuleScheduler([NEW]), "old": RuleScheduler([OLD])}
        compared = 0
        t = LIVE
        while t < SPAN:
            for st in stores.values():
                st.write_samples(samples(t, t + 60))
            now = T0 + t + 59.0
            new = stores["new"]
            assert obs(new, NEW, now - lookback(NEW), now) == obs(new, OLD, now - lookback(NEW), now), t
            compared += 1
            for name, st in stores.items():
                scheds[name].run(st, now)
            if t == LIVE + 1.5 * HOUR:  # the agent restarts: a new scheduler, the same store
                scheds = {"new": RuleScheduler([NEW]), "old": RuleScheduler([OLD])}
            t += 60
        for name, st in stores.items():
            scheds[name].run(st, T0 + SPAN, final=True)
        got = {
            name: st.rows(
                "SELECT rule, gpu, state, epoch(first_seen), epoch(last_seen) FROM alerts ORDER BY ALL"
            )
            for name, st in stores.items()
        }
        assert got["new"] == got["old"]
        assert {r[1] for r in got["new"]} == {0, 2, 3}  # GPU 1's drop left the 7-day look-back long ago
        assert compared == -(-(SPAN - LIVE) // 60)  # every minute of it
        assert peaks(stores["new"]) == recomputed(stores["new"])
    finally:
        for st in stores.values():
            st.close()


def _scanned(st: Store, rule: Any, start: float, end: float) -> tuple[int, int]:
    """Row groups of `samples` the rule's query read, and how many the table has (EXPLAIN ANALYZE)."""
    from fleettool.engine.kinds._sql import ts_param

    q = str(rule.p("query"))
    plan = "".join(
        str(r[1]) for r in st.rows("EXPLAIN ANALYZE " + q, {"start": ts_param(start), "end": ts_param(end)})
    )
    got = [(int(a), int(b)) for a, b in re.findall(r"Row Groups Scanned: (\d+) / (\d+)", plan)]
    assert got, plan
    return sum(a for a, _ in got), max(b for _, b in got)


def test_a_minute_reads_two_hours_of_rows_not_seven_days(tmp_path: Path) -> None:
    """What made it cost ~170 ms a minute: the metric filter over every raw row of 7 days. Now the samples row
    groups it reads are those of the look-back's first partial hour and of the window's hour."""
    db = tmp_path / "busy.duckdb"
    n = int(7.2 * DAY) * 6  # 6 busy series every second beside the link counts: 3.7 M rows, ~30 row groups
    t0 = int(T0 * 1e6)
    busy = pa.table(
        {
            "ts": pa.array([t0 + (k // 6) * 1_000_000 for k in range(n)], pa.timestamp("us")),
            "node": pa.array([NODE] * n),
            "gpu": pa.array([0] * n, pa.int16()),
            "uuid": pa.array(["GPU-0"] * n),
            "metric": pa.array(["sm_clock_mhz"] * n),
            "sub": pa.array([str(k % 6) for k in range(n)]),
            "value": pa.array([1980.0] * n),
        }
    )
    tab = pa.concat_tables([arrow(samples(0, 7.2 * DAY)), busy]).sort_by("ts")
    with Store(db) as st:
        st.begin()
        st.write_sample_batches(tab.schema, tab.to_batches(max_chunksize=50_000))
        st.commit()
        st.execute("CHECKPOINT")
        end = T0 + 7.2 * DAY
        start = end - lookback(NEW)
        read, total = _scanned(st, NEW, start, end)
        assert total >= 30
        assert read <= 6, (read, total)
        old_read, _ = _scanned(st, OLD, start, end)
        assert old_read >= total - 1  # the query before read them all
        assert obs(st, NEW, start, end) == obs(st, OLD, start, end)


def _v8(db: Path) -> None:
    """Make a store look written by schema version 8: no peak_1h."""
    con = duckdb.connect(str(db))
    con.execute("DROP TABLE peak_1h")
    con.execute("UPDATE meta SET value = '8' WHERE key = 'schema_version'")
    con.close()


def test_every_writer_keeps_the_peaks_exact(tmp_path: Path, whole: Path) -> None:
    db = tmp_path / "w.duckdb"
    shutil.copy(whole, db)
    with Store(db) as st:
        # the agent's rows, late ones into an old hour included; readers' Arrow tables; a `--down` drop
        st.write_samples([Sample(T0 + 2 * DAY + 5, NODE, 1, "GPU-1", "nvlink_links_active", 30.0)])
        st.write_samples(arrow([Sample(T0 + 6 * DAY + 5, NODE, 2, "GPU-2", "nvlink_links_active", 31.0)]))
        st.drop_samples_between(T0 + 8.06 * DAY - 600, T0 + 8.06 * DAY + 4000)
        assert peaks(st) == recomputed(st)
        # retention: raw rows rolled up (an hour's peak kept), old rollups dropped mid-hour
        st.apply_retention(T0 + 9 * DAY, 1 * DAY, 8.2 * DAY - 1800)
        assert peaks(st) == recomputed(st)
        # rollups kept for less time than raw rows: the raw rows' hours keep their peaks
        st.apply_retention(T0 + 9 * DAY, 3 * DAY, 0.5 * DAY)
        assert peaks(st) == recomputed(st)
        assert st.scalar("SELECT count(*) FROM samples WHERE ts < ?", [db_time(T0 + 8.5 * DAY)]) > 0
        before = len(peaks(st))
        assert before >= 4 * 4  # 4 GPUs, the hours of raw rows left
    # a schema 8 store: the read-write open fills them once; a reader sees them in memory
    _v8(db)
    with Store(db, read_only=True) as ro:
        assert len(peaks(ro)) == before and peaks(ro) == recomputed(ro)
    with Store(db) as st:
        assert len(peaks(st)) == before and peaks(st) == recomputed(st)
    # salvage: the peaks of what was saved
    out = tmp_path / "salvaged.duckdb"
    salvage(db, out)
    with Store(out) as st:
        assert len(peaks(st)) == before and peaks(st) == recomputed(st)


def test_a_fleet_copy_has_the_peaks_of_its_samples(tmp_path: Path, whole: Path) -> None:
    from fleettool.store.attach import attach, parquet_source

    files = {}
    with Store(whole, read_only=True) as st:
        for t in ("samples", "samples_1m"):
            files[t] = str(tmp_path / f"{t}.parquet")
            st.execute(f"COPY {t} TO '{files[t]}' (FORMAT parquet)")
        want = peaks(st)
    for copy in (True, False):
        with Store(":memory:") as fleet:
            for t, f in files.items():
                src = parquet_source([f])
                attach(
                    fleet, t, src, have={r[0] for r in fleet.rows(f"DESCRIBE SELECT * FROM {src}")}, copy=copy
                )
            assert peaks(fleet) == want
