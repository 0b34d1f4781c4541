"""Event lines judged in SQL, not one Python object per line: an XID storm costs memory by its runs, not its lines.

Runs. With `for` 0, the state machine (engine/state.py) makes of a line at t an active observation at t and an
inactive one at t+1; a firing alert whose condition cleared at `off` (the first inactive observation after its
last active one) resolves at the next line only if that line comes keep_firing_for or more after `off`. So an
entity's lines fold into runs: the next line x starts a new run when x - off >= keep, where off is 1 s after the
earliest line within the second before the run's last line. Each run becomes three observations (its first line,
its last line, `off`), which the machine turns into the very instance the lines would have; where the gap is
within a millisecond of keep the machine decides (the run is cut there, and both pieces keep their own `off`).
Only an entity of more than SMALL lines, none of them held (kinds/_held.py) nor without a time, is folded; what
`refine` needs of it is kept: the last KEEP lines of each run (evidence, and the last line's code and detail for
the catalog's judgement), each run's count.

Marks. A repeat policy (`_escalation`) needs, of the lines up to a finding's last one (its history of
HISTORY_S before the window included), only the times where a burst starts (the gap from the entity's previous
line over the policy's gap), the first line of each boot epoch (how many boots before it), and the last line
before the window. SQL gives those, for the folded entities and the others alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fleettool.engine.kinds._held import hold_codes, older_sql
from fleettool.engine.kinds._sql import epoch, read, ts_param
from fleettool.store import Store
from fleettool.xid_catalog import judge

SMALL = 200  # an entity with at most this many lines in the window is judged line by line
KEEP = 20  # lines kept of each run: the evidence shows the last 20 lines of a finding
CUT_US = 1000  # a gap within this of keep_firing_for is left to the state machine

# the entity key the kind uses (event.py): kind:code, and @pci when no GPU index is known
KEY = (
    "kind || coalesce(':' || code::VARCHAR, '') || "
    "CASE WHEN gpu IS NULL AND coalesce(pci_bus_id, '') <> '' THEN '@' || pci_bus_id ELSE '' END"
)
TAG = f"node || '|' || coalesce(gpu::VARCHAR, '-') || '|' || ({KEY})"


@dataclass
class Lines:
    """What `refine` needs of an entity's lines beyond the line dicts in extra['events']."""

    runs: list[tuple[float, float, int]] = field(default_factory=list)  # folded runs: first, last line, count
    bursts: list[tuple[float, str]] = field(default_factory=list)  # where a burst starts, and on what place
    epochs: list[tuple[float, int]] = field(default_factory=list)  # first line of each boot epoch
    last_before: float | None = None  # the last line before the window

    def count(self, first: float, last: float) -> int:
        return sum(n for a, b, n in self.runs if first - 1 <= a and b <= last + 1)


def foldable(r: Any) -> bool:
    """Whether a rule's lines may be folded into runs: `for` 0 and a keep_firing_for over 1 s (an inactive
    observation never resolves an alert within a run; runs keep_firing_for apart never touch)."""
    return getattr(r, "for_s", None) == 0 and float(r.keep_s) >= 2.0


def held_sql() -> str:
    """The lines kinds/_held.py may hold (hold_of: by the code, or by what the line says for XID 154 and the
    NVLink5 codes): never folded."""
    held = ", ".join(map(str, hold_codes())) or "NULL"
    return f"(kind = 'fell-off-bus' OR (kind = 'xid' AND code IN ({held})))"


def big_entities(store: Store, where: str, params: dict[str, Any]) -> list[str]:
    """The entities (TAG) of more than SMALL lines, none held nor without a time."""
    got = read(
        store,
        f"SELECT {TAG} AS tag FROM events WHERE {where} GROUP BY node, gpu, {KEY} "
        f"HAVING count(*) > {SMALL} AND NOT bool_or(ts IS NULL OR {held_sql()})",
        params,
    )
    return [g["tag"] for g in got]


_RUNS = """
WITH l AS (SELECT rowid AS rid, ts, node, gpu, {key} AS key FROM events
           WHERE {where} AND list_contains($big, {tag})),
s AS (SELECT *, min(ts) OVER (PARTITION BY node, gpu, key ORDER BY ts
                              RANGE BETWEEN INTERVAL 1 SECOND PRECEDING AND CURRENT ROW) + INTERVAL 1 SECOND AS off
      FROM l),
c AS (SELECT *, coalesce(epoch_us(ts) - lag(epoch_us(off)) OVER w >= $cut, true) AS brk FROM s
      WINDOW w AS (PARTITION BY node, gpu, key ORDER BY ts, rid)),
g AS (SELECT *, sum(brk::INTEGER) OVER (PARTITION BY node, gpu, key ORDER BY ts, rid ROWS UNBOUNDED PRECEDING) AS run
      FROM c),
h AS (SELECT rid, key, run, min(ts) OVER p AS t0, max(ts) OVER p AS t1, arg_max(off, ts) OVER p AS off,
             count(*) OVER p AS n, row_number() OVER (PARTITION BY node, gpu, key, run ORDER BY ts DESC, rid DESC) AS back
      FROM g WINDOW p AS (PARTITION BY node, gpu, key, run)),
k AS (SELECT * FROM h WHERE back <= {keep})
SELECT e.ts, e.node, e.gpu, k.key, e.kind, e.code, e.message, e.pci_bus_id, e.uuid, e.detail::VARCHAR AS detail,
       k.run, k.t0, k.t1, k.off, k.n
FROM events e JOIN k ON e.rowid = k.rid
ORDER BY e.node, e.gpu, k.key, e.ts, e.rowid
"""


def runs(
    store: Store, where: str, params: dict[str, Any], big: list[str], keep_s: float
) -> list[dict[str, Any]]:
    """The last KEEP lines of each run of the big entities, each with its run's first and last line, `off`
    and count, in entity and time order."""
    sql = _RUNS.format(key=KEY, tag=TAG, where=where, keep=KEEP)
    return read(store, sql, {**params, "big": big, "cut": round(keep_s * 1e6) - CUT_US})


_MARKS = """
WITH gaps(code, gap_us) AS (VALUES {gaps}),
l AS (SELECT DISTINCT node, gpu, {key} AS key, code, coalesce(ts, $end) AS ts, {place} AS place FROM events
      WHERE kind = 'xid' AND code IN (SELECT unnest($codes)) AND (ts IS NULL OR ts BETWEEN $lo AND $end)
      {older}),
e AS (SELECT l.*, (SELECT count(*) FROM events b WHERE b.kind = 'boot' AND b.node = l.node
                   AND b.ts IS NOT NULL AND b.ts < l.ts) AS epoch FROM l),
g AS (SELECT e.*, gap_us,
             lag(ts) OVER (PARTITION BY node, gpu, key, place ORDER BY ts) AS prev,
             row_number() OVER (PARTITION BY node, gpu, key, epoch ORDER BY ts) AS nth,
             max(ts) FILTER (WHERE ts < $start) OVER (PARTITION BY node, gpu, key) AS last_before
      FROM e JOIN gaps USING (code))
SELECT node, gpu, key, ts, epoch, place,
       place IS NOT NULL AND (prev IS NULL OR epoch_us(ts) - epoch_us(prev) > gap_us) AS burst,
       nth = 1 AS first, last_before
FROM g WHERE prev IS NULL OR epoch_us(ts) - epoch_us(prev) > gap_us OR nth = 1 OR ts = last_before
ORDER BY node, gpu, key, ts
"""


def marks(
    store: Store, codes: list[int], start: float, end: float, lo: float
) -> dict[tuple[str, int | None, str], Lines]:
    """Per entity of XID lines of `codes` (repeat codes) from `lo` to `end`, and the newest held line before
    the window as the kind reads it: where its bursts start, the first line of each boot epoch, the last line
    before the window."""
    gaps = ", ".join(f"({c}, {round(_gap_s(c) * 1e6)})" for c in codes)
    place = _place_sql(codes)
    older = older_sql(["xid"], codes)
    extra = ""
    if older is not None:  # a held line the kind reads however old (its GPU may still be gone)
        extra = (
            f"UNION SELECT node, gpu, {KEY}, code, ts, {place} FROM events WHERE kind = 'xid' "
            f"AND code IN (SELECT unnest($codes)) AND {older} "
            "QUALIFY row_number() OVER (PARTITION BY node, gpu, kind, code ORDER BY ts DESC) = 1"
        )
    sql = _MARKS.format(gaps=gaps, key=KEY, older=extra, place=place)
    params = {"codes": codes, "start": ts_param(start), "end": ts_param(end), "lo": ts_param(lo)}
    out: dict[tuple[str, int | None, str], Lines] = {}
    for row in read(store, sql, params):
        m = out.setdefault((row["node"], row["gpu"], row["key"]), Lines())
        t = epoch(row["ts"])
        if row["burst"]:
            m.bursts.append((t, row["place"]))
        if row["first"]:
            m.epochs.append((t, int(row["epoch"])))
        if row["last_before"] is not None:
            m.last_before = epoch(row["last_before"])
    return out


def _place_sql(codes: list[int]) -> str:
    """Where a line's repeats are counted: '' (the whole GPU), or, for a policy with `same` (XID 13: gpc, tpc),
    those fields of the line, from its detail or else its text (a line stored before they were parsed); NULL
    when the line names none of them: it starts no burst."""
    alts = []
    for c in codes:
        rep = judge(c).repeat
        if rep is None or not rep.same:
            continue
        parts = []
        for f in rep.same:  # "GPC 7, TPC 7": the fields as the line names them, "(GPC 7, TPC 7, SM 0)"
            word = f.upper()
            got = f"coalesce(detail->>'{f}', nullif(regexp_extract(message, '\\b{word} (\\d+)', 1), ''))"
            parts.append(f"'{word} ' || {got}")
        alts.append(f"WHEN code = {c} THEN " + " || ', ' || ".join(parts))
    return f"CASE {' '.join(alts)} ELSE '' END" if alts else "''"


def _gap_s(code: int) -> float:
    rep = judge(code).repeat
    return rep.gap_s if rep is not None else 600.0
