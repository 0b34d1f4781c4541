"""The same kernel line stored once: a line saved in `kern.log` and in a `journalctl -k` dump, or a file and its
`.gz`, is one event, whichever file is read first.

An event is keyed by what it says and when: its node, kind and code, its time to the whole second (the precision
every kernel-log shape shares: syslog and `dmesg -T` stamps carry seconds, journalctl short-precise and
/dev/kmsg microseconds) or, with no wall time, its uptime, and its message as the driver wrote it (the text from
`NVRM:` / `SXid` (or the NIC driver's device prefix) on, its spaces collapsed: the prefix of each shape differs). Keys are counted, not only matched:
a file holding a line twice in one second, read after a file that held it once, adds one. Two lines with the same
text at different times are two events. Lines with no time at all are never merged (nothing says they are one).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Hashable

from fleettool.formats.nic_lines import nic_start
from fleettool.model import Event
from fleettool.store import Store

_RE_BODY = re.compile(r"NVRM:|nvidia-nvswitch\d*: SXid|SXid \(|Linux version ")
_RE_SPACE = re.compile(r"\s+")


def said(raw: str | None, message: str | None) -> str:
    """What a kernel line says, without the prefix its shape put before it (the NIC driver's lines: from the
    driver's device prefix on, formats/nic_lines.py)."""
    text = raw or message or ""
    m = _RE_BODY.search(text)
    start = m.start() if m else max(nic_start(text), 0)
    return _RE_SPACE.sub(" ", text[start:]).strip()


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

    Each chunk asks the store for the rows of its nodes and time span stored before this file began (rowid up to
    `mark`, Store.events_mark()): this file's own earlier chunks are never its duplicates (a line twice in one
    file stays two). Keys are counted as one pass over the whole file counts them: a key stored n times before
    the file matches its first n occurrences in the file, so the drops of earlier chunks are remembered per key
    (a 64-bit hash each; only keys that were dropped). A chunk for which the store holds no earlier row of its
    nodes and times (a storm's lines seen for the first time) computes no key at all."""

    def __init__(self, store: Store, mark: int) -> None:
        self.store = store
        self.mark = mark
        self.dropped: Counter[int] = Counter()

    def drop(self, events: list[Event]) -> tuple[list[Event], int]:
        """The events of this chunk not already stored by another file (by key, counted), and how many were
        dropped as duplicates."""
        have = self._stored(events)
        if not have:
            return events, 0
        out: list[Event] = []
        dropped = 0
        for ev in events:
            k = key(ev.node, ev.kind, ev.code, ev.ts, _uptime(ev.detail), said(ev.raw, ev.message))
            if k is not None and have[k] > 0:
                h = hash(k)
                if have[k] > self.dropped[h]:
                    self.dropped[h] += 1
                    dropped += 1
                    continue
            out.append(ev)
        return out, dropped

    def _stored(self, events: list[Event]) -> Counter[Hashable]:
        """The count of each key stored before this file among the rows of this chunk's nodes in its seconds
        or uptimes (events with neither are never merged)."""
        have: Counter[Hashable] = Counter()
        times = [ev.ts for ev in events if ev.ts is not None]
        ups = [u for u in (_uptime(ev.detail) for ev in events if ev.ts is None) if u is not None]
        if (not times and not ups) or self.mark < 0:
            return have
        nodes = sorted({ev.node for ev in events if ev.ts is not None or _uptime(ev.detail) is not None})
        lo = math.floor(min(times)) if times else 0
        hi = math.floor(max(times)) + 1 if times else 0
        rows = self.store.query(
            """SELECT node, kind, code, epoch_us(ts) / 1e6 AS t, raw, message, detail FROM events
               WHERE rowid <= ? AND list_contains(?, node)
                 AND ((ts IS NOT NULL AND ts >= make_timestamp(CAST(? AS BIGINT) * 1000000) AND ts < make_timestamp(CAST(? AS BIGINT) * 1000000))
                      OR (ts IS NULL AND detail IS NOT NULL AND ?
                          AND TRY_CAST(json_extract(detail, '$.uptime') AS DOUBLE) BETWEEN ? AND ?))""",
            [
                self.mark,
                nodes,
                lo,
                hi,
                bool(ups),
                (min(ups) - 1e-5) if ups else 0.0,
                (max(ups) + 1e-5) if ups else 0.0,
            ],
        )
        for r in rows:
            k = key(
                r["node"], r["kind"], r["code"], r["t"], _uptime(r["detail"]), said(r["raw"], r["message"])
            )
            if k is not None:
                have[k] += 1
        return have


def drop_stored(store: Store, events: list[Event]) -> tuple[list[Event], int]:
    """The events of one whole list not already stored (by key, counted), and how many were dropped: one chunk
    of FileDedup (bench/bench_kmsg_relative.py measures it)."""
    return FileDedup(store, store.events_mark()).drop(events)
