"""How far each node's own time reaches: its last record (sample, rollup, event, NCCL run) up to the judged end.

An alert is judged at `now` given what was observed up to `now`; for one node, `now` is as far as that node's
own records go. In the agent that is the present (its own agent_* series are written every tick); in a replay,
each node's last record. So a node's alerts never depend on other nodes' files in the same directory: a DBE in
a kernel log that ends with it is judged at the log's end whether or not another node's file goes on for months
(keep_firing_for, staleness and the holds of hardware faults all run on the node's own time).

Asked per node, on demand, and remembered for one judgement: first over the last RECENT_S (where the agent's
own node always answers), then, for a node whose records ended earlier, over everything up to the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fleettool.engine.kinds._sql import epoch, read, ts_param
from fleettool.store import Store

RECENT_S = 3600.0

_LAST = """SELECT max(t) AS t FROM (
    SELECT max(ts) AS t FROM samples WHERE node = $node AND ts BETWEEN $lo AND $end
    UNION ALL SELECT max(minute) FROM samples_1m WHERE node = $node AND minute BETWEEN $lo AND $end
    UNION ALL SELECT max(ts) FROM events WHERE node = $node AND ts BETWEEN $lo AND $end
    UNION ALL SELECT max(ts) FROM nccl_runs WHERE list_contains(nodes, $node) AND ts BETWEEN $lo AND $end)"""


@dataclass
class Horizons:
    """Each node's last record at or before `end` (one judgement's view; build a new one for a later end)."""

    store: Store
    end: float
    _seen: dict[str, float] = field(default_factory=dict)
    _complete: bool = False  # every node's answer is in _seen (preload): no query, safe across threads

    def preload(self) -> Horizons:
        """Every node's horizon in one pass (a whole replay judges every node)."""
        rows = read(
            self.store,
            """SELECT node, max(t) AS t FROM (
                 SELECT node, max(ts) AS t FROM samples WHERE ts <= $end GROUP BY node
                 UNION ALL SELECT node, max(minute) FROM samples_1m WHERE minute <= $end GROUP BY node
                 UNION ALL SELECT node, max(ts) FROM events WHERE ts <= $end GROUP BY node
                 UNION ALL SELECT n.node, max(ts) FROM (SELECT unnest(nodes) AS node, ts FROM nccl_runs
                   WHERE ts <= $end) n GROUP BY n.node)
               GROUP BY node""",
            {"end": ts_param(self.end)},
        )
        self._seen = {r["node"]: min(epoch(r["t"]), self.end) for r in rows if r["t"] is not None}
        self._complete = True
        return self

    def of(self, node: str) -> float:
        """The time the node's alerts are judged at: its last record, or `end` when it has none at all."""
        if node not in self._seen:
            if self._complete:
                return self.end
            t = self._last(node, self.end - RECENT_S)
            if t is None:
                t = self._last(node, 0.0)
            self._seen[node] = self.end if t is None else min(t, self.end)
        return self._seen[node]

    def _last(self, node: str, lo: float) -> float | None:
        row = read(self.store, _LAST, {"node": node, "lo": ts_param(lo), "end": ts_param(self.end)})[0]
        return None if row["t"] is None else epoch(row["t"])


def horizon_of(horizons: Horizons | None, node: str, end: float) -> float:
    """The node's horizon for a judgement ending at `end` (no Horizons: `end` itself)."""
    return end if horizons is None else min(end, horizons.of(node))


class SharedClock(Horizons):
    """Every node at `end`: a rule test's eval_time is the present for every node (promtool's semantics)."""

    def of(self, node: str) -> float:
        return self.end
