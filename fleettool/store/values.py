"""How Python values are stored: unix seconds as naive UTC TIMESTAMPs and back, evidence as compact JSON."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any


def db_time(t: float) -> dt.datetime:
    """Unix seconds -> the naive UTC datetime a TIMESTAMP column holds."""
    return dt.datetime.fromtimestamp(t, tz=dt.timezone.utc).replace(tzinfo=None)


def epoch(v: dt.datetime | None) -> float | None:
    """A TIMESTAMP column's naive UTC datetime -> unix seconds (None stays None)."""
    if v is None:
        return None
    return v.replace(tzinfo=dt.timezone.utc).timestamp()


def dumps_evidence(obj: Any) -> str:
    """Evidence (any JSON-able structure; datetimes and other values as str) -> compact JSON text."""
    return json.dumps(obj, default=str, separators=(",", ":"))
