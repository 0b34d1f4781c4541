"""A fleet reliability report from an incident log: how often servers fail, how long they stay down, and which
fail again and again. Computed with polars, from any of:

- the JSON of the public InfiniteHBD trace (stepfun-ai/InfiniteHBD-Trace, Apache-2.0: `fault_start` /
  `fault_end` events per `node_id`, `event_time` in days since the first event, `fault_type` Level / Class /
  Desc);
- a CSV with a header `node,start,end,category[,subcategory]` (times ISO 8601 or unix seconds; an empty end is
  a fault still open at the end of the log);
- fleettool's own store (fleettool.stats.report's `reliability`: pages and lifecycle time out of service).

The figures (`summarize`):
- `mtbf_days`: fleet server-days over faults (servers x span / faults);
- `availability`: 1 - (downtime per server, overlapping faults of one server counted once) / (servers x span);
- `repeat_offenders`: the share of faults held by the top 10 % of affected servers, the servers with 5 or
  more, and the top servers by count;
- `repair_days`: median, mean and p90 of fault durations; `mtbi_hist`: days between one server's
  successive faults, binned.
The fleet size must be given: a log names only the servers that failed. The span is the log's own when it
has one (the trace's `event_time` counts days from its time origin, so its span runs from 0 to its last event:
348.98 days, the trace's "348 days"); for a CSV, from its first start to its last time. A fault_end closes the
earliest open fault of the same server and fault type.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import polars as pl

SCHEMA = {"node": pl.String, "start": pl.Float64, "end": pl.Float64, "category": pl.String, "sub": pl.String}
MTBI_BINS = (0.0, 1.0, 7.0, 30.0, 90.0, 180.0)  # days; the last bin is open
REPAIR_BINS = (0.0, 0.25, 1.0, 3.0, 7.0, 14.0, 30.0)  # days; the last bin is open


class IncidentLogError(ValueError):
    """The file is not an incident log of a known shape (the message names the file and, when known, line)."""


class TooFewServers(ValueError):
    """--servers is smaller than the number of servers the log names."""


def read_incidents(path: Path) -> tuple[pl.DataFrame, float | None]:
    """An incident log -> (faults: node, start, end, category, sub in days; the log's own span in days, when it
    has one). Starts with no end close at the last time in the log."""
    with path.open("rb") as f:
        magic = f.read(4)
    if magic == b"PAR1":  # the faults as `report --incidents ... --format parquet` writes them
        df, span = _from_parquet(path), None
    else:
        text = path.read_text(encoding="utf-8", errors="replace")
        head = text.lstrip()[:1]
        df, span = _from_trace_json(path, text) if head in ("[", "{") else _from_csv(path, text)
    if df.is_empty():
        raise IncidentLogError(f"{path}: no faults in it: nothing to report")
    return df, span


def _from_parquet(path: Path) -> pl.DataFrame:
    """A Parquet file with the CSV's columns (node, start, end, category[, subcategory]), times as timestamps
    (naive = UTC), ISO strings or unix seconds."""
    try:
        raw = pl.read_parquet(path)
    except Exception as e:  # polars' errors for a damaged file are several types
        raise IncidentLogError(
            f"{path}: not a readable Parquet file: {' '.join(str(e).split())[:160]}"
        ) from None
    need = ["node", "start", "end", "category"]
    if raw.columns[:4] != need:
        raise IncidentLogError(
            f"{path}: not an incident log: its columns are {', '.join(raw.columns)}; need "
            "node,start,end,category[,subcategory]"
        )
    rows = [[str(v) if v is not None else "" for v in r] for r in raw.select(raw.columns[:5]).iter_rows()]
    text = "\n".join(",".join(_csv_field(v) for v in r) for r in [raw.columns[:5], *rows])
    return _from_csv(path, text)[0]


def _csv_field(v: str) -> str:
    return '"' + v.replace('"', '""') + '"' if any(c in v for c in ',"\n') else v


def _from_trace_json(path: Path, text: str) -> tuple[pl.DataFrame, float | None]:
    try:
        events = json.loads(text)
    except json.JSONDecodeError as e:
        raise IncidentLogError(f"{path}:{e.lineno}: not JSON: {e.msg}") from None
    if isinstance(events, dict):
        events = events.get("events") or events.get("trace") or []
    if not isinstance(events, list):
        raise IncidentLogError(f"{path}: not a fault trace (a JSON list of fault_start/fault_end events)")
    rows: list[dict[str, Any]] = []
    open_: dict[tuple[str, str, str], list[int]] = {}
    last = 0.0
    for i, ev in enumerate(events):
        try:
            node, t, kind = str(ev["node_id"]), float(ev["event_time"]), ev["event_type"]
            ft = ev.get("fault_type") or {}
        except (KeyError, TypeError, ValueError):
            raise IncidentLogError(
                f"{path}: event {i + 1} is not a fault event (node_id, event_time, event_type)"
            ) from None
        last = max(last, t)
        # a class is named with its level: "Other Failures" is a class of both hardware and software failures
        level, cls = str(ft.get("Level", "")), str(ft.get("Class", ""))
        key = (node, f"{level} / {cls}" if level else cls, str(ft.get("Desc", "")))
        if kind == "fault_start":
            open_.setdefault(key, []).append(len(rows))
            rows.append({"node": node, "start": t, "end": None, "category": key[1], "sub": key[2]})
        elif kind == "fault_end":
            waiting = open_.get(key)
            if waiting:  # the earliest open fault of this node and type ends
                rows[waiting.pop(0)]["end"] = t
        else:
            raise IncidentLogError(f"{path}: event {i + 1}: unknown event_type {kind!r}")
    df = pl.DataFrame(rows, schema=SCHEMA, orient="row") if rows else pl.DataFrame(schema=SCHEMA)
    return df.with_columns(pl.col("end").fill_null(last)), last if rows else None


def _time(v: str, path: Path, line: int) -> float:
    from fleettool.units import parse_iso

    v = v.strip()
    try:
        t = float(v)
    except ValueError:
        pass
    else:  # unix seconds, or milliseconds (13 digits) as exporters write them
        return (t / 1000.0 if t > 1e11 else t) / 86400.0
    try:
        return parse_iso(v) / 86400.0
    except ValueError:
        raise IncidentLogError(f"{path}:{line}: not a time: {v!r} (ISO 8601 or unix seconds)") from None


def _from_csv(path: Path, text: str) -> tuple[pl.DataFrame, float | None]:
    lines = text.splitlines()
    reader = csv.reader(lines)
    header = [h.strip().lower() for h in next(reader, [])]
    need = ["node", "start", "end", "category"]
    if header[:4] != need:
        raise IncidentLogError(
            f"{path}:1: not an incident log: the header must be node,start,end,category[,subcategory]"
        )
    rows: list[dict[str, Any]] = []
    for n, rec in enumerate(reader, start=2):
        if not rec or not "".join(rec).strip():
            continue
        if len(rec) < 4:
            raise IncidentLogError(f"{path}:{n}: {len(rec)} fields, need node,start,end,category")
        start = _time(rec[1], path, n)
        end = _time(rec[2], path, n) if rec[2].strip() else None
        if end is not None and end < start:
            raise IncidentLogError(f"{path}:{n}: ends before it starts")
        rows.append(
            {
                "node": rec[0].strip(),
                "start": start,
                "end": end,
                "category": rec[3].strip(),
                "sub": rec[4].strip() if len(rec) > 4 else "",
            }
        )
    df = pl.DataFrame(rows, schema=SCHEMA, orient="row") if rows else pl.DataFrame(schema=SCHEMA)
    if df.is_empty():
        return df, None
    last = float(pl.concat([df["start"], df["end"].drop_nulls()]).max())  # type: ignore[arg-type]
    return df.with_columns(pl.col("end").fill_null(last)), None


def fault_rows(df: pl.DataFrame) -> list[dict[str, Any]]:
    """Faults (times in days) as the CSV this module reads: node, start, end (ISO 8601 UTC, a log's relative days
    counted from 1970-01-01), category, subcategory. `read_incidents` of them gives the same faults back."""
    import datetime as dt

    def iso(days: float | None) -> str:
        if days is None:
            return ""
        t = dt.datetime.fromtimestamp(round(days * 86400.0, 3), tz=dt.timezone.utc)
        return t.isoformat(timespec="milliseconds" if t.microsecond else "seconds").replace("+00:00", "Z")

    return [
        {
            "node": r["node"],
            "start": iso(r["start"]),
            "end": iso(r["end"]),
            "category": r["category"],
            "subcategory": r["sub"],
        }
        for r in df.iter_rows(named=True)
    ]


def islands(df: pl.DataFrame) -> pl.DataFrame:
    """Each node's faults with overlapping (or touching) ones merged: node, start, end, one row per island."""
    if df.is_empty():
        return pl.DataFrame(schema={"node": pl.String, "start": pl.Float64, "end": pl.Float64})
    s = df.sort(["node", "start"]).with_columns(
        pl.col("end").cum_max().over("node").shift(1).over("node").alias("reach")
    )
    s = s.with_columns(
        (pl.col("reach").is_null() | (pl.col("start") > pl.col("reach")))
        .cum_sum()
        .over("node")
        .alias("island")
    )
    return (
        s.group_by(["node", "island"])
        .agg(pl.col("start").min(), pl.col("end").max())
        .sort(["node", "start"])
        .select("node", "start", "end")
    )


def _union_per_node(df: pl.DataFrame) -> pl.DataFrame:
    """Each node's down time with overlapping faults merged: node, down_days."""
    return islands(df).group_by("node").agg((pl.col("end") - pl.col("start")).sum().alias("down_days"))


def summarize(
    df: pl.DataFrame, servers: int, span_days: float | None = None, top: int = 10
) -> dict[str, Any]:
    """The report's figures (module docstring) for `servers` servers over `span_days` (default: the log's
    first start to its last time)."""
    faults = df.height
    if span_days is None:
        span_days = float(df["end"].max() - df["start"].min()) if faults else 0.0  # type: ignore[operator,arg-type]
    affected = df["node"].n_unique() if faults else 0
    if affected > servers:
        raise TooFewServers(f"--servers {servers} is fewer than the {affected} servers the log names")
    fleet_days = servers * span_days
    down = _union_per_node(df)
    down_total = float(down["down_days"].sum()) if down.height else 0.0
    counts = df.group_by("node").len().sort(["len", "node"], descending=[True, False]) if faults else None
    top_n = max(1, math.ceil(affected * 0.10)) if affected else 0
    dur = (df["end"] - df["start"]) if faults else pl.Series([], dtype=pl.Float64)
    gaps = (
        df.sort(["node", "start"])
        .with_columns((pl.col("start") - pl.col("start").shift(1).over("node")).alias("gap"))["gap"]
        .drop_nulls()
        if faults
        else pl.Series([], dtype=pl.Float64)
    )
    hist = _hist(gaps, MTBI_BINS)
    first = float(df["start"].min()) if faults else 0.0  # type: ignore[arg-type]
    weeks = max(1, math.ceil(span_days / 7.0)) if faults else 0
    per_week = [0] * weeks
    for t in df["start"].to_list():
        per_week[min(weeks - 1, max(0, int((t - min(first, 0.0)) // 7)))] += 1
    by_class = (
        {r["category"]: r["len"] for r in df.group_by("category").len().iter_rows(named=True)}
        if faults
        else {}
    )
    return {
        "faults": faults,
        "servers": servers,
        "servers_affected": affected,
        "span_days": round(span_days, 4),
        "mtbf_days": round(fleet_days / faults, 4) if faults else None,
        "availability": round(1 - down_total / fleet_days, 6) if fleet_days > 0 else None,
        "down_days": round(down_total, 4),
        "by_class": dict(sorted(by_class.items(), key=lambda kv: (-kv[1], kv[0]))),
        "repeat_offenders": {
            "top_10pct_share": round(float(counts["len"].head(top_n).sum()) / faults, 4)
            if counts is not None
            else None,
            "top_10pct_servers": top_n,
            "servers_5plus": int((counts["len"] >= 5).sum()) if counts is not None else 0,
            "top": [{"server": r["node"], "faults": r["len"]} for r in counts.head(top).iter_rows(named=True)]
            if counts is not None
            else [],
        },
        "repair_days": {
            "median": round(float(dur.median()), 4) if faults else None,  # type: ignore[arg-type]
            "mean": round(float(dur.mean()), 4) if faults else None,  # type: ignore[arg-type]
            "p90": round(float(dur.quantile(0.9, "linear")), 4) if faults else None,  # type: ignore[arg-type]
        },
        "mtbi_hist": hist,
        "repair_hist": _hist(dur, REPAIR_BINS),
        "faults_per_week": per_week,
    }


def _hist(values: pl.Series, bins: tuple[float, ...]) -> list[dict[str, Any]]:
    edges = [*bins, math.inf]
    return [
        {
            "from_days": edges[i],
            "to_days": None if math.isinf(edges[i + 1]) else edges[i + 1],
            "count": int(((values >= edges[i]) & (values < edges[i + 1])).sum()),
        }
        for i in range(len(edges) - 1)
    ]
