"""port_episodes: a link that was up going down, counted as episodes, ended only by proof of health.

    kind: port_episodes
    metric: ib_port_state        # per node and sub-series (sub=port=mlx5_0/1)
    up_min: 4                    # a value >= up_min is up (ACTIVE 4, ACTIVE_DEFER 5)
    down_for: 25s                # an episode counts once down this long (0: at its first down sample)
    down_samples: 3              # ... and with at least this many down samples (NIC lost: 3 polls in a row)
    returned: true               # it counts when the link is up again (a flap), else as soon as it qualifies
    count: 3                     # episodes within `window` that fire the alert (default 1)
    window: 12h
    recover: 12h                 # the alert ends only when the link has been up this long, samples throughout

An episode starts at the first down sample after an up sample since the node's last boot: a port that never
reached up (training after boot, down by design) is not an episode. The alert fires at the episode that makes
`count` within `window`, and ends at the first instant the link has been up for `recover` without a down sample
and without a gap of SERIES_STALE_S in its samples; the finding records that ("up 10m"). It never ends on a
missing sample: series that stop while it fires make it stale (engine/state.py), and it never waits for a person.

The series are run-length encoded in SQL (only series with a down sample in the range), so Python sees a few
stretches per port. The history an episode needs before the evaluation's start (`window` + `recover` +
`down_for`) is read too, and for a link down since before that, its last up sample, so the agent's trailing
judgement finds what a whole replay finds.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleettool.engine.kinds._base import Kind, KindResult, RuleLike
from fleettool.engine.kinds._promql import dur
from fleettool.engine.kinds._sql import SERIES_STALE_S, epoch, read, src, ts_param
from fleettool.store import Store


@dataclass
class Stretch:
    up: bool
    t0: float
    t1: float
    n: int  # samples
    tk: float | None  # the time of its down_samples-th sample (None: fewer)
    v0: float | None
    after_gap: bool


_RLE = """, o AS (SELECT node, sub, ts, value, value >= {up} AS up FROM src)
, hot AS (SELECT DISTINCT node, sub FROM o WHERE NOT up)
, oh AS (SELECT o.* FROM o SEMI JOIN hot ON o.node = hot.node AND o.sub = hot.sub)
, c AS (SELECT *, coalesce(epoch(ts) - epoch(lag(ts) OVER w) >= {gap}, false) AS after_gap,
               coalesce(up <> lag(up) OVER w OR epoch(ts) - epoch(lag(ts) OVER w) >= {gap}, true) AS chg
        FROM oh WINDOW w AS (PARTITION BY node, sub ORDER BY ts))
, g AS (SELECT *, sum(chg::INTEGER) OVER (PARTITION BY node, sub ORDER BY ts) AS run FROM c)
, r AS (SELECT *, row_number() OVER (PARTITION BY node, sub, run ORDER BY ts) AS rn FROM g)
SELECT node, sub, any_value(up) AS up, min(ts) AS t0, max(ts) AS t1, count(*) AS n,
       min(ts) FILTER (WHERE rn = {k}) AS tk, arg_min(value, ts) AS v0, bool_or(after_gap) AS after_gap
FROM r GROUP BY node, sub, run ORDER BY node, sub, t0"""


def history_s(r: RuleLike) -> float:
    """How far before the evaluation's start the kind reads: what an alert open at the start depends on."""
    return float(r.p("window", 0) or 0) + float(r.p("recover", 0) or 0) + float(r.p("down_for", 0) or 0)


def evaluate(store: Store, r: RuleLike, start: float, end: float) -> KindResult:
    metric, up, k = r.p("metric"), float(r.p("up_min", 1)), max(1, int(r.p("down_samples", 1)))
    frm = start - history_s(r)
    sql = "WITH " + src(metric) + _RLE.format(up=up, gap=SERIES_STALE_S, k=k)
    series: dict[tuple[str, str], list[Stretch]] = {}
    for row in read(store, sql, {"start": ts_param(frm), "end": ts_param(end)}):
        tk = None if row["tk"] is None else epoch(row["tk"])
        st = Stretch(
            bool(row["up"]),
            epoch(row["t0"]),
            epoch(row["t1"]),
            int(row["n"]),
            tk,
            row["v0"],
            row["after_gap"],
        )
        series.setdefault((row["node"], row["sub"] or ""), []).append(st)
    boots: dict[str, list[float]] = {}
    res = KindResult()
    for (node, sub), stretches in series.items():
        if not stretches[0].up:  # down since before the range: was it up before, and since when is it down?
            stretches = _before(store, metric, up, node, sub, frm, k) + stretches
        if node not in boots:
            boots[node] = [
                epoch(b["ts"])
                for b in read(
                    store,
                    "SELECT ts FROM events WHERE kind = 'boot' AND node = $n AND ts IS NOT NULL ORDER BY ts",
                    {"n": node},
                )
            ]
        obs, ends = judge(r, stretches, boots[node])
        if obs:
            res.obs[(node, None, sub)] = obs
            res.extra[(node, None, sub)] = {"keep_s": 0.0, "held_ends": ends, "gaps": _gaps(obs, stretches)}
    return res


def _before(store: Store, metric: str, up: float, node: str, sub: str, frm: float, k: int) -> list[Stretch]:
    """For a series down at the range's start: its last up sample before it, and its down samples after that
    (as one down stretch before the range), or nothing when it was never up."""
    p = {"m": metric, "n": node, "s": sub, "f": ts_param(frm)}
    row = read(
        store,
        f"""WITH a AS (SELECT max(ts) AS t FROM samples WHERE metric = $m AND node = $n AND sub = $s
                 AND ts < $f AND value >= {up})
            SELECT a.t AS t, (SELECT min(ts) FROM samples WHERE metric = $m AND node = $n AND sub = $s
                 AND ts > a.t AND ts < $f AND value < {up}) AS d FROM a""",
        p,
    )[0]
    if row["t"] is None:
        return []
    t = epoch(row["t"])
    out = [Stretch(True, t, t, 1, None, float(up), False)]
    if row["d"] is not None:
        d = epoch(row["d"])
        out.append(Stretch(False, d, d, k, d, None, False))  # the episode began before the history read
    return out


def _boot_between(boots: list[float], a: float, b: float) -> bool:
    return any(a < x <= b for x in boots)


def triggers(r: RuleLike, stretches: list[Stretch], boots: list[float]) -> list[tuple[float, float | None]]:
    """When each episode counts (and the value it is reported with)."""
    down_for, k = float(r.p("down_for", 0) or 0), max(1, int(r.p("down_samples", 1)))
    returned = bool(r.p("returned", False))
    out: list[tuple[float, float | None]] = []
    was_up, prev_end = False, None
    ep: tuple[float, float | None] | None = None  # (start, value) of the open episode
    downs, counted = 0, False
    for s in stretches:
        if prev_end is not None and _boot_between(boots, prev_end, s.t0) and ep is None:
            was_up = False  # a boot: the port trains again; being down after it is no episode
        prev_end = s.t1
        if s.up:
            if ep is not None and returned and downs >= k and s.t0 - ep[0] >= down_for:
                out.append((s.t0, ep[1]))
            ep, was_up = None, True
            continue
        if ep is None:
            if not was_up:
                continue
            ep, downs, counted = (s.t0, s.v0), 0, False
        before = downs
        downs += s.n
        if returned or counted or downs < k or s.t1 - ep[0] < down_for:
            continue
        tk = s.tk if before == 0 and s.tk is not None else s.t0
        out.append((max(ep[0] + down_for, tk), ep[1]))
        counted = True
    return out


def judge(
    r: RuleLike, stretches: list[Stretch], boots: list[float]
) -> tuple[list[tuple[float, bool, float | None]], dict[float, str]]:
    """The observations of one series for the state machine (keep_firing_for 0: the kind decides when an alert
    ends) and what ended each instance."""
    count, window = max(1, int(r.p("count", 1))), float(r.p("window", 0) or 0)
    recover = float(r.p("recover", 0) or 0)
    trig = triggers(r, stretches, boots)
    obs: list[tuple[float, bool, float | None]] = []
    ends: dict[float, str] = {}
    resolved_at = -1e300
    i = 0
    while i < len(trig):
        t, v = trig[i]
        n = sum(1 for x, _ in trig[: i + 1] if x > t - window or x == t) if count > 1 else 1
        i += 1
        if t <= resolved_at or n < count:
            continue
        value = float(n) if count > 1 else v
        obs.append((t, True, value))
        p = _recovery(stretches, t, recover)
        for s in stretches:  # the stretches while it fires, so a gap in them makes it stale
            for x in (s.t0, s.t1):
                if t < x and (p is None or x < p):
                    obs.append((x, True, value))
        if p is None:
            break
        obs += [(p, True, value), (p, False, None)]
        ends[p] = f"up {dur(recover)}"
        resolved_at = p
    obs.sort(key=lambda o: o[0])
    return obs, ends


def _recovery(stretches: list[Stretch], fired: float, recover: float) -> float | None:
    """The first instant after `fired` at which the link has been up for `recover` in one stretch of samples."""
    for s in stretches:
        if not s.up or s.t1 < fired:
            continue
        u = max(s.t0, fired)
        if s.t1 >= u + recover:
            return u + recover
    return None


def _gaps(obs: list[tuple[float, bool, float | None]], stretches: list[Stretch]) -> set[float]:
    """The observation before each gap in the samples (the series stopped there: engine/state.py)."""
    times = [o[0] for o in obs]
    out: set[float] = set()
    for s in stretches:
        if s.after_gap:
            before = [t for t in times if t < s.t0]
            if before:
                out.add(before[-1])
    return out


KIND = Kind(
    stale_s=SERIES_STALE_S,
    name="port_episodes",
    fields=frozenset(
        {"metric", "up_min", "down_for", "down_samples", "returned", "count", "window", "recover"}
    ),
    requires=("metric",),
    durations=frozenset({"down_for", "window", "recover"}),
    evaluate=evaluate,
    no_promql="an episode needs the port to have been up before it (since the node's boot), and the alert ends "
    "only after `recover` of samples that are all up: PromQL sees neither a port's history before its "
    "range nor boots, and its keep_firing_for ends an alert on missing samples too",
)
