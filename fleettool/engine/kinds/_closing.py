"""The evidence in the store that a held hardware fault was acted on (kinds/_held.py), each the earliest after a
line, up to the judged end:

- boot: the node booted (a `boot` event: the kernel log's boot, or the agent's start on a new boot_id);
- reset: the GPU was reset without a boot: its NVML recovery action went back to NONE (0) from another value,
  an XID 154 says the recovery action changed to "None", or the driver announced the GPU again ("NVRM: GPU at
  PCI:...", printed when the driver initialises it);
- new-gpu: another GPU sits at the index (a sample, or the driver's announcement at the PCI address, with
  another UUID than the line's GPU had);
- lifecycle-return: the node was returned to service (`fleettool node N return`: to healthy) with a burn-in
  run after the line whose every result passed;
- returned (a lost GPU): the GPU's own series again, RETURN_AFTER_S or more after the line.

Read-only queries; each finder is answered once per span of lines it covers (the first sample after x is also
the first after any later x' below it), so a GPU's many lines cost a few queries.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fleettool.engine.kinds._sql import epoch, read, ts_param
from fleettool.store import Store
from fleettool.store.gpu_history import gpu_uuid_at

RETURN_AFTER_S = 60.0  # a sample this long after the line proves the GPU back (not one read in flight)


@dataclass
class Evidence:
    """What can close the held lines of one GPU (or, without an index, of one PCI address) of a node."""

    store: Store
    node: str
    gpu: int | None
    pci: str | None
    uuid: str | None  # the GPU the lines are about, when the line named it
    boots: list[float]
    end: float
    _lists: dict[str, list[float]] = field(default_factory=dict)
    _firsts: dict[str, tuple[float, float | None]] = field(default_factory=dict)

    def q(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        base = {"node": self.node, "end": ts_param(self.end)}
        return read(self.store, sql, {**base, **params})

    def times(self, name: str, load: Callable[[], list[float]]) -> list[float]:
        if name not in self._lists:
            self._lists[name] = sorted(load())
        return self._lists[name]

    def first_after(self, name: str, x: float, query: Callable[[float], float | None]) -> float | None:
        """The earliest time >= x a finder gives, reusing the previous answer while it still applies."""
        prev = self._firsts.get(name)
        if prev is not None and prev[0] <= x and (prev[1] is None or x <= prev[1]):
            return prev[1]
        got = query(x)
        self._firsts[name] = (x, got)
        return got


def _after(times: list[float], t: float) -> float | None:
    i = bisect.bisect_right(times, t)
    return times[i] if i < len(times) else None


def _boot(ev: Evidence, t: float, start: float) -> float | None:
    return _after([b for b in sorted(ev.boots) if b <= ev.end], t)


def _where_gpu(ev: Evidence) -> str:
    """Events of this GPU: by index, or by PCI address (the driver's lines carry the address only)."""
    alts = []
    if ev.gpu is not None:
        alts.append(f"gpu = {int(ev.gpu)}")
    if ev.pci:
        alts.append("pci_bus_id = '" + ev.pci.replace("'", "''") + "'")
    return "(" + " OR ".join(alts) + ")" if alts else "false"


def _reset(ev: Evidence, t: float, start: float) -> float | None:
    def load() -> list[float]:
        rows = ev.q(
            f"""SELECT ts FROM events WHERE node = $node AND ts > $lo AND ts <= $end AND {_where_gpu(ev)}
                AND ((kind = 'xid' AND code = 154 AND json_extract_string(detail, '$.recovery_to') = 'None')
                     OR kind = 'gpu-announce')""",
            lo=ts_param(t),
        )
        out = [epoch(r["ts"]) for r in rows]
        if ev.gpu is not None:
            rows = ev.q(
                """SELECT ts FROM (SELECT ts, value, lag(value) OVER (ORDER BY ts) AS prev FROM samples
                     WHERE node = $node AND gpu = $gpu AND metric = 'recovery_action' AND ts >= $lo
                     AND ts <= $end) WHERE value = 0 AND prev > 0""",
                gpu=ev.gpu,
                lo=ts_param(t - 600.0),
            )
            out += [epoch(r["ts"]) for r in rows]
        return out

    return _after(ev.times("reset", load), t)


def _new_gpu(ev: Evidence, t: float, start: float) -> float | None:
    if ev.gpu is None:
        return None
    was = ev.uuid or gpu_uuid_at(ev.store, ev.node, ev.gpu, t)
    if was is None:
        return None

    def query(x: float) -> float | None:
        row = ev.q(
            f"""SELECT min(t) AS t FROM (
                  SELECT min(ts) AS t FROM samples WHERE node = $node AND gpu = $gpu AND ts > $x AND ts <= $end
                    AND uuid IS NOT NULL AND uuid <> $was
                  UNION ALL SELECT min(ts) FROM events WHERE node = $node AND kind = 'gpu-announce'
                    AND ts > $x AND ts <= $end AND {_where_gpu(ev)} AND uuid IS NOT NULL AND uuid <> $was)""",
            gpu=ev.gpu,
            x=ts_param(x),
            was=was,
        )[0]
        return epoch(row["t"]) if row["t"] is not None else None

    return ev.first_after(f"new-gpu:{was}", t, query)


def _lifecycle_return(ev: Evidence, t: float, start: float) -> float | None:
    rows = ev.q(
        """SELECT min(a.ts) AS t FROM node_audit a WHERE a.node = $node AND a.to_state = 'healthy'
             AND a.ts > $t AND a.ts <= $end AND EXISTS (
               SELECT 1 FROM burnin_results b WHERE b.node = $node AND b.ts > $t AND b.ts <= a.ts
               GROUP BY b.run_id HAVING bool_and(b.verdict IN ('PASS', 'SKIPPED'))
                 AND bool_or(b.verdict = 'PASS'))""",
        t=ts_param(t),
    )
    return epoch(rows[0]["t"]) if rows and rows[0]["t"] is not None else None


def _returned(ev: Evidence, t: float, start: float) -> float | None:
    if ev.gpu is None:
        return None

    def query(x: float) -> float | None:
        row = ev.q(
            "SELECT min(ts) AS t FROM samples WHERE node = $node AND gpu = $gpu AND ts >= $x AND ts <= $end",
            gpu=ev.gpu,
            x=ts_param(x),
        )[0]
        return epoch(row["t"]) if row["t"] is not None else None

    return ev.first_after("returned", max(t + RETURN_AFTER_S, start), query)


FINDERS: dict[str, Callable[[Evidence, float, float], float | None]] = {
    "boot": _boot,
    "reset": _reset,
    "new-gpu": _new_gpu,
    "lifecycle-return": _lifecycle_return,
    "returned": _returned,
}


def first_closing(
    ev: Evidence, accepted: tuple[str, ...], t: float, start: float, end: float
) -> tuple[float, str] | None:
    """The earliest evidence of the accepted kinds after a line at t (and up to `end`), and its kind."""
    best: tuple[float, str] | None = None
    for how in accepted:
        at = FINDERS[how](ev, t, start)
        if at is not None and at <= end and (best is None or at < best[0]):
            best = (at, how)
    return best
