"""fleettool's own events as JSON lines: the events of a recording that no kernel printed (NVML's errors and
events, the agent's health), one JSON object a line with the fields of the store's event (docs/records.md):

    {"ts": 1796457375.878, "node": "gpu-9", "kind": "nvml-error", "gpu": 1, "uuid": "GPU-fa4e...0001",
     "pci_bus_id": "0000:28:00", "code": 15, "message": "GPU is lost: temperature(gpu 1): GPU is lost",
     "source": "nvml", "raw": "", "detail": {}}

`ts` is unix seconds (UTC) as the agent had it, or null for an event with no time. recording.writer writes
these lines (`events.jsonl`), ingest.read_events reads them back; recording.identify tells the file by its
first line's keys (`EVENT_KEYS_REQUIRED`, and no journal `MESSAGE`). Pure: no I/O.
"""

from __future__ import annotations

import json
import math
from typing import Any

from fleettool.model import Event, EventKind, normalize_pci_bus_id

EVENT_KEYS_REQUIRED = frozenset({"ts", "node", "kind", "message"})
GPU_INDEX_MAX = 1023  # as collectors.series_map: a node's GPU index (NVML/DCGM ordinal)


def dump_event(e: Event) -> str:
    """One event -> its JSON line (without the newline)."""
    doc = {
        "ts": e.ts,
        "node": e.node,
        "kind": e.kind,
        "gpu": e.gpu,
        "uuid": e.uuid,
        "pci_bus_id": e.pci_bus_id,
        "code": e.code,
        "message": e.message,
        "source": e.source,
        "raw": e.raw,
        "detail": e.detail,
    }
    return json.dumps(doc, ensure_ascii=False, default=str, allow_nan=False)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _opt_str(doc: dict[str, Any], key: str) -> str | None:
    v = doc.get(key)
    if v is not None and not isinstance(v, str):
        raise ValueError(f"{key} is {type(v).__name__}, not a string or null")
    return v or None


def _pci(kind: str, pci: str | None) -> str | None:
    """A GPU's PCI id without its function (normalize_pci_bus_id); a NIC line's keeps it: the two functions of a
    dual-port card are two devices."""
    if not pci:
        return None
    return pci.strip().lower() if kind == EventKind.NIC.value else normalize_pci_bus_id(pci)


def parse_event(line: str) -> Event:
    """One JSON line -> the event. Raises ValueError saying what is wrong with it."""
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError) as e:  # RecursionError: arrays nested thousands deep
        raise ValueError(f"not JSON ({type(e).__name__}: {str(e)[:80]})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"a JSON {type(doc).__name__}, not an event object")
    missing = sorted(EVENT_KEYS_REQUIRED - doc.keys())
    if missing:
        raise ValueError(f"no {', '.join(missing)}")
    ts = doc["ts"]
    if ts is not None:
        try:
            ts = float(ts) if isinstance(ts, (int, float)) and not isinstance(ts, bool) else math.nan
        except OverflowError:  # an integer past any float
            ts = math.nan
        if not math.isfinite(ts):
            raise ValueError(f"ts {str(doc['ts'])[:40]} is not unix seconds or null")
    node, kind, message = doc["node"], doc["kind"], doc["message"]
    if not isinstance(node, str) or not node:
        raise ValueError("node is not a non-empty string")
    if not isinstance(kind, str) or not kind:
        raise ValueError("kind is not a non-empty string")
    if not isinstance(message, str):
        raise ValueError("message is not a string")
    gpu, code = doc.get("gpu"), doc.get("code")
    if gpu is not None and not (_int(gpu) and 0 <= gpu <= GPU_INDEX_MAX):
        raise ValueError(f"gpu {str(gpu)[:40]} is not a GPU index (0..{GPU_INDEX_MAX}) or null")
    if code is not None and not (_int(code) and -(2**31) <= code < 2**31):
        raise ValueError(f"code {str(code)[:40]} is not a 32-bit integer or null")
    detail = doc.get("detail") or {}
    if not isinstance(detail, dict):
        raise ValueError("detail is not an object")
    pci = _opt_str(doc, "pci_bus_id")
    return Event(
        ts=ts,
        node=node,
        kind=kind,
        message=message,
        gpu=gpu,
        uuid=_opt_str(doc, "uuid"),
        pci_bus_id=_pci(kind, pci),
        code=code,
        raw=_opt_str(doc, "raw") or "",
        source=_opt_str(doc, "source") or "",
        detail=detail,
    )
