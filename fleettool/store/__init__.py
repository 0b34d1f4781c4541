"""The DuckDB store: one SQL history of samples, events, NCCL runs, burn-in results and alerts. The only code
that writes SQL which changes data or schema; every other layer calls these modules' named functions:

  db.py          Store: open a file, recognise it, create or upgrade the schema (schema.py)
  connection.py  the lock-retrying connect and the execute/query/scalar/arrow/transaction primitives
  telemetry.py   samples, events, the GPU inventory and pods, NCCL runs, the ingest ledger, retention
  peaks.py       each GPU's hourly peak of a few metrics (peak_1h), recomputed by every sample writer
  bulk.py        a stream of sample batches in one INSERT (replay's ingest)
  alerts.py      the alerts table: put_alert, and list_alerts, the one alerts query (AlertOrder.TRIAGE)
  silences.py    silences and acknowledgements, and how they annotate alert rows
  burnin.py      burn-in results          baselines.py  fleet baselines per SKU and driver
  nodes.py       node lifecycle states and their audit trail
  meta.py        bookmarks in the meta table (export watermarks)
  attach.py      Parquet segments or Arrow datasets attached as tables (fleet reading)
  values.py      how times and evidence are stored
  salvage.py     a damaged store: which tables still read (check), copy them into a fresh store (salvage)

`Store` is imported on first use, so the errors and `precheck` cost no duckdb or pyarrow import."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fleettool.store.errors import (
    NoSuchStore,
    NotFleettool,
    StoreCorrupt,
    StoreDamaged,
    StoreError,
    StoreLocked,
    precheck,
)

if TYPE_CHECKING:
    from fleettool.store.db import Store

__all__ = [
    "Store",
    "StoreError",
    "StoreLocked",
    "StoreCorrupt",
    "StoreDamaged",
    "NotFleettool",
    "NoSuchStore",
    "precheck",
]


def __getattr__(name: str) -> Any:
    if name == "Store":
        from fleettool.store.db import Store

        return Store
    raise AttributeError(f"module 'fleettool.store' has no attribute {name!r}")
