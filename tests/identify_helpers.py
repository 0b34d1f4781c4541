"""Helpers the identify tests share: fixture paths, UTC times, a JSON replay, the stored XID events."""

from __future__ import annotations

import calendar
import json
from pathlib import Path

from fleettool.store import Store
from tests.conftest import FIXTURES, run_cli

KMSG = FIXTURES / "formats" / "kmsg"
SAMPLES = FIXTURES / "samples"


def utc(y: int, mo: int, d: int, h: int, mi: int, s: float) -> float:
    return calendar.timegm((y, mo, d, h, mi, 0, 0, 0, 0)) + s


def iso(t: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(t, tz=dt.timezone.utc).isoformat()


def replay_json(path: Path, db: Path, *args: str) -> dict:  # type: ignore[type-arg]
    r = run_cli("replay", str(path), "--db", str(db), "--json", *args)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def events(db: Path) -> list[dict]:  # type: ignore[type-arg]
    with Store(db, read_only=True) as s:
        return s.query(
            "SELECT epoch_us(ts) / 1e6 AS t, node, code, kind, detail::VARCHAR AS detail FROM events "
            "WHERE kind = 'xid' ORDER BY code"
        )


# (fixture, arbitrary name, shape, node, XID 79 wall time or None for boot-relative, extra args)
