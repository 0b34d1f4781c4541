"""A fleettool store holding N days of one node's data, as the agent would have written it, for the agent
benchmark (bench/agent_overhead.py): the rules then run over a store of the size a deployed node has.

What the node writes comes from a short real run of the agent (the *template*: `fleettool agent --duration 65s
--no-rules` with the same source, GPUs, kernel log and dcgm-exporter as the measured run, into a fresh store;
rules write alerts, not samples): every series
it wrote (node, GPU, UUID, metric, sub) and, per series, the streams that feed it, each with its period. The
period is read off the run: a series written at (nearly) every tick has a 1 s stream; rows beyond one per tick
are a second stream (the dcgm-exporter scrape writes some of NVML's metrics too, at 10 s); a series seen once
is the 10-minute tier. Each measured period is snapped to the nearest of the agent's own (its tick and the
NVML collector's tiers, DEFAULT_TIER_S), in log distance, so health samples every ~10.7 s count as 10 s.

Then `--days` days ending now are generated with DuckDB SQL, an hour at a time in time order (as the agent's
flushes append them, so DuckDB's zone maps are what a real store's are): gauges repeat the values the
template saw, in order; counters (fleettool.metrics kind "counter") grow at the slope the template saw and
never below zero. `--rollup-days` more days before those are written as the 1-minute rollups (samples_1m)
that retention leaves once raw samples are older than --raw-retention (default 0: a node up for exactly
`--days` days has none yet); a minute's min, mean and max there are each stream's value at the minute's start
(n counts its samples). The GPU inventory is the template's. No events, no alerts: a healthy node.

The schema is fleettool's own (fleettool.store.Store creates it), so a schema change is picked up.

  python bench/agent_store7d.py --template-db /tmp/template.duckdb --out /tmp/store7d.duckdb --days 7
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import duckdb

HOUR = 3600


@dataclass
class Stream:
    node: str
    gpu: int | None
    uuid: str | None
    metric: str
    sub: str
    period: float
    counter: bool
    values: list[float]  # gauges: cycled in order; counters: [first, last]
    slope: float  # counters: per second


def _nominal(periods: list[float], p: float) -> float:
    return min(periods, key=lambda q: abs(math.log(max(p, 1e-3) / q)))


def nominal_periods() -> list[float]:
    from fleettool.collectors.nvml import DEFAULT_TIER_S

    return sorted({1.0, *map(float, DEFAULT_TIER_S.values())})


def read_template(db: Path) -> dict[str, Any]:
    """The streams of a short agent run's store (see the module docstring), and its GPU inventory."""
    from fleettool.metrics import METRICS

    periods = nominal_periods()
    con = duckdb.connect(str(db), read_only=True)
    try:
        ticks = [r[0] for r in con.execute("SELECT DISTINCT epoch(ts) FROM samples ORDER BY 1").fetchall()]
        span = ticks[-1] - ticks[0] if len(ticks) > 1 else 1.0
        rows = con.execute(
            """SELECT node, gpu, uuid, metric, sub, list(epoch(ts) ORDER BY ts, rowid),
                      list(value ORDER BY ts, rowid)
               FROM samples GROUP BY ALL ORDER BY metric, sub, gpu"""
        ).fetchall()
        gpus = con.execute(
            "SELECT node, gpu, uuid, pci_bus_id, model, driver, serial FROM gpus ORDER BY gpu"
        ).fetchall()
    finally:
        con.close()
    streams: list[Stream] = []
    for node, gpu, uuid, metric, sub, ts, vals in rows:
        first: dict[float, float] = {}
        extra: list[tuple[float, float]] = []
        for t, v in zip(ts, vals, strict=True):
            if t in first:
                extra.append((t, v))
            else:
                first[t] = v
        d = len(first)
        parts: list[tuple[float, list[tuple[float, float]]]] = []
        if d >= 0.5 * len(ticks):
            parts.append((1.0, list(first.items())))
        else:
            tt = sorted(first)
            p = 600.0 if d == 1 else (tt[-1] - tt[0]) / (d - 1)
            parts.append((p, list(first.items())))
        if extra:
            parts.append((600.0 if len(extra) == 1 else span / len(extra), extra))
        kind = METRICS[metric].kind if metric in METRICS else "gauge"
        for p, pts in parts:
            pts.sort()
            values = [v for _, v in pts]
            slope = 0.0
            if kind == "counter" and len(pts) > 1 and pts[-1][0] > pts[0][0]:
                slope = max(0.0, (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0]))
            streams.append(
                Stream(
                    node,
                    gpu,
                    uuid,
                    metric,
                    sub,
                    _nominal(periods, p) if p > 0.5 else 1.0,
                    kind == "counter",
                    [values[0], values[-1]] if kind == "counter" else values,
                    slope,
                )
            )
    rate = sum(1.0 / s.period for s in streams)
    return {
        "streams": [asdict(s) for s in streams],
        "gpus": [list(g) for g in gpus],
        "template_ticks": len(ticks),
        "template_span_s": round(span, 1),
        "rows_per_s": round(rate, 2),
        "periods": periods,
    }


def _load_streams(con: duckdb.DuckDBPyConnection, streams: list[dict[str, Any]]) -> None:
    con.execute(
        "CREATE TEMP TABLE st (node VARCHAR, gpu SMALLINT, uuid VARCHAR, metric VARCHAR, sub VARCHAR, "
        "period DOUBLE, counter BOOLEAN, vals DOUBLE[], nv INTEGER, v_last DOUBLE, slope DOUBLE)"
    )
    con.executemany(
        "INSERT INTO st VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            [
                s["node"],
                s["gpu"],
                s["uuid"],
                s["metric"],
                s["sub"],
                s["period"],
                s["counter"],
                s["values"],
                len(s["values"]),
                s["values"][-1],
                s["slope"],
            ]
            for s in streams
        ],
    )


# one stream's value at tick time t (unix seconds; $end is the store's last second)
_VALUE = (
    "CASE WHEN st.counter THEN greatest(0.0, st.v_last - st.slope * ($end - t)) "
    "ELSE st.vals[1 + (CAST(floor(t / st.period) AS BIGINT) % st.nv)] END"
)


def generate(
    template: dict[str, Any], out: Path, *, days: float, rollup_days: float, end: float
) -> dict[str, Any]:
    """Write the store: `days` of raw samples ending at `end`, `rollup_days` of rollups before them."""
    from fleettool.store import Store

    if out.exists():
        out.unlink()
    Store(out).close()  # fleettool's own schema
    t_start = time.monotonic()
    end = math.floor(end)
    raw0 = math.floor((end - days * 86400) / 60) * 60  # retention cuts at whole minutes
    roll0 = raw0 - rollup_days * 86400
    con = duckdb.connect(str(out))
    try:
        _load_streams(con, template["streams"])
        periods = sorted({float(s["period"]) for s in template["streams"]})
        raw_rows = 0
        h = raw0
        while h < end:
            h1 = min(h + HOUR, end)
            parts = []
            for p in periods:
                i0, i1 = math.ceil(h / p), math.ceil(h1 / p)
                if i1 > i0:
                    parts.append(
                        f"SELECT i * {p!r} AS t, st.* FROM range({i0}, {i1}) r(i), st WHERE st.period = {p!r}"
                    )
            sql = (
                "INSERT INTO samples (ts, node, gpu, uuid, metric, sub, value) "
                f"SELECT make_timestamp(CAST(t * 1e6 AS BIGINT)), node, gpu, uuid, metric, sub, {_VALUE} "
                f"FROM ({' UNION ALL '.join(parts)}) st ORDER BY t, gpu NULLS FIRST, metric, sub"
            )
            raw_rows += con.execute(sql, {"end": float(end)}).fetchall()[0][0]
            h = h1
        roll_rows = 0
        if rollup_days > 0:
            for p in periods:
                step = max(
                    p, 60.0
                )  # a stream slower than a minute leaves a rollup only where it had a sample
                per_min = max(1, int(round(60.0 / p)))
                i0, i1 = math.ceil(roll0 / step), math.ceil(raw0 / step)
                roll_rows += con.execute(
                    "INSERT INTO samples_1m (minute, node, gpu, uuid, metric, sub, vmin, vmean, vmax, n) "
                    "SELECT make_timestamp(CAST(floor(t / 60) * 60e6 AS BIGINT)) AS minute, node, gpu, uuid, "
                    f"metric, sub, min(v), avg(v), max(v), sum(n)::INTEGER FROM ("
                    f"SELECT t, st.node, st.gpu, st.uuid, st.metric, st.sub, {_VALUE} AS v, {per_min} AS n "
                    f"FROM (SELECT i * {step!r} AS t FROM range({i0}, {i1}) r(i)) r, st "
                    f"WHERE st.period = {p!r}) GROUP BY ALL ORDER BY minute",
                    {"end": float(end)},
                ).fetchall()[0][0]
        first = roll0 if rollup_days > 0 else raw0
        for node, gpu, uuid, pci, model, driver, serial in template["gpus"]:
            con.execute(
                "INSERT INTO gpus VALUES (?, ?, ?, ?, ?, ?, ?, make_timestamp(?), make_timestamp(?))",
                [node, gpu, uuid, pci, model, driver, serial, int(first * 1e6), int(end * 1e6)],
            )
        con.execute("CHECKPOINT")
    finally:
        con.close()
    with Store(
        out
    ) as st:  # written past the Store's writers: its hourly peaks (store/peaks.py) from the samples
        st.rebuild_peaks()
    return {
        "raw_rows": int(raw_rows),
        "rollup_rows": int(roll_rows),
        "raw_from": raw0,
        "end": end,
        "rollup_from": roll0 if rollup_days > 0 else None,
        "bytes": out.stat().st_size,
        "generate_s": round(time.monotonic() - t_start, 1),
    }


def cache_key(params: dict[str, Any]) -> str:
    import hashlib

    from fleettool.store.schema import SCHEMA_VERSION

    blob = json.dumps({**params, "schema": SCHEMA_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cached(
    cache_dir: Path, params: dict[str, Any], max_age_s: float
) -> tuple[Path, Path, dict[str, Any] | None]:
    """(store path, info path, info) for these parameters; info is None when there is no fresh enough copy."""
    key = cache_key(params)
    store, info_p = cache_dir / f"store-{key}.duckdb", cache_dir / f"store-{key}.json"
    if store.exists() and info_p.exists():
        info = json.loads(info_p.read_text())
        if time.time() - float(info["generated"]["end"]) <= max_age_s:
            return store, info_p, info
    return store, info_p, None


def save_info(info_p: Path, info: dict[str, Any]) -> None:
    tmp = info_p.with_suffix(".tmp")
    tmp.write_text(json.dumps(info, indent=1))
    os.replace(tmp, info_p)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--template-db", type=Path, required=True, help="store of a short real agent run")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--rollup-days", type=float, default=0.0)
    a = ap.parse_args()
    tpl = read_template(a.template_db)
    gen = generate(tpl, a.out, days=a.days, rollup_days=a.rollup_days, end=time.time())
    print(
        json.dumps({k: v for k, v in tpl.items() if k != "streams"} | {"streams": len(tpl["streams"])} | gen)
    )


if __name__ == "__main__":
    main()
