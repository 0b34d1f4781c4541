"""The same kernel line stored once: a line saved in `kern.log` and in a `journalctl -k` dump, or a file and its
`.gz`, is one event, whichever file is read first.

An event is keyed by what it says and when: its node, kind and code, its time to the whole second (the precision
every kernel-log shape shares: syslog and `dmesg -T` stamps carry seconds, journalctl short-precise and
/dev/kmsg microseconds) or, with no wall time, its uptime, and its message as the driver wrote it (the text from
`NVRM:` / `SXid` on, its spaces collapsed: the prefix of each shape differs). Keys are counted, not only matched:
a file holding a line twice in one second, read after a file that held it once, adds one. Two lines with the same
text at different times are two events. Lines with no time at all are never merged (nothing says they are one).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Hashable

from fleettool.model import Event
from fleettool.store import Store

_RE_BODY = re.compile(r"NVRM:|nvidia-nvswitch\d*: SXid|SXid \(|Linux version ")
_RE_SPACE = re.compile(r"\s+")


def said(raw: str | None, message: str | None) -> str:
    """What a kernel line says, without the prefix its shape put before it."""
    text = raw or message or ""
    m = _RE_BODY.search(text)
    return _RE_SPACE.sub(" ", text[m.start() if m else 0 :]).strip()


def _uptime(detail: object) -> float | None:
    if isinstance(detail, str):
        try:
            detail = json.loads(detail)
        except ValueError:
            return None
    up = detail.get("uptime") if isinstance(detail, dict) else None
    return round(float(up), 6) if isinstance(up, (int, float)) else None


def key(
    node: str, kind: str, code: int | None, ts: float | None, uptime: float | None, text: str
) -> Hashable | None:
    """The identity of one kernel event, or None for one with no time (never merged)."""
    if ts is not None:
        return (node, kind, code, "t", math.floor(ts + 1e-7), text)
    if uptime is not None:
        return (node, kind, code, "up", uptime, text)
    return None


class FileDedup:
    """The duplicate check of one file read in chunks: `drop(chunk)` for each chunk in file order.

    Each chunk asks the store for the rows of its nodes and time span, which hold the earlier files' lines and
    this file's earlier chunks. What this file itself stored must not count as a duplicate (a line twice in one
    file stays two), so the keys of every keyed event of the file so far are counted, compactly (a 64-bit hash of
    the key each), and taken off the store's count: a key the store holds n times and this file has met m times
    so far has max(0, n - m) earlier copies left to match, exactly what one pass over the whole file gives."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.seen: Counter[int] = Counter()

    def drop(self, events: list[Event]) -> tuple[list[Event], int]:
        """The events of this chunk not already stored by another file (by key, counted), and how many were
        dropped as duplicates."""
        keyed = [
            (ev, key(ev.node, ev.kind, ev.code, ev.ts, _uptime(ev.detail), said(ev.raw, ev.message)))
            for ev in events
        ]
        have = self._stored([(ev, k) for ev, k in keyed if k is not None])
        out: list[Event] = []
        dropped = 0
        for ev, k in keyed:
            if k is None:
                out.append(ev)
                continue
            h = hash(k)
            left = have.get(k, 0) - self.seen[h]
            self.seen[h] += 1
            if left > 0:
                dropped += 1
                continue
            out.append(ev)
        return out, dropped

    def _stored(self, keyed: list[tuple[Event, Hashable]]) -> Counter[Hashable]:
        """The store's count of each key this chunk may hold (rows of its nodes in its seconds or uptimes)."""
        have: Counter[Hashable] = Counter()
        if not keyed:
            return have
        nodes = sorted({ev.node for ev, _ in keyed})
        times = [ev.ts for ev, _ in keyed if ev.ts is not None]
        ups = [u for u in (_uptime(ev.detail) for ev, _ in keyed if ev.ts is None) if u is not None]
        lo = math.floor(min(times)) if times else 0
        hi = math.floor(max(times)) + 1 if times else 0
        rows = self.store.query(
            """SELECT node, kind, code, epoch_us(ts) / 1e6 AS t, raw, message, detail FROM events
               WHERE list_contains(?, node)
                 AND ((ts IS NOT NULL AND ts >= make_timestamp(CAST(? AS BIGINT) * 1000000) AND ts < make_timestamp(CAST(? AS BIGINT) * 1000000))
                      OR (ts IS NULL AND detail IS NOT NULL AND ?
                          AND TRY_CAST(json_extract(detail, '$.uptime') AS DOUBLE) BETWEEN ? AND ?))""",
            [nodes, lo, hi, bool(ups), (min(ups) - 1e-5) if ups else 0.0, (max(ups) + 1e-5) if ups else 0.0],
        )
        for r in rows:
            k = key(
                r["node"], r["kind"], r["code"], r["t"], _uptime(r["detail"]), said(r["raw"], r["message"])
            )
            if k is not None:
                have[k] += 1
        return have
