"""The DuckDB store: one SQL history of samples, events, NCCL runs, burn-in results and alerts."""

from fleettool.store.db import NotFleettool, Store, StoreCorrupt, StoreError, StoreLocked

__all__ = ["Store", "StoreError", "StoreLocked", "StoreCorrupt", "NotFleettool"]
