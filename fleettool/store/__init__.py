"""The DuckDB store: one SQL history of samples, events, NCCL runs, burn-in results and alerts.

`Store` is imported on first use, so the errors and `precheck` cost no duckdb or pyarrow import."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fleettool.store.errors import NotFleettool, StoreCorrupt, StoreError, StoreLocked, precheck

if TYPE_CHECKING:
    from fleettool.store.db import Store

__all__ = ["Store", "StoreError", "StoreLocked", "StoreCorrupt", "NotFleettool", "precheck"]


def __getattr__(name: str) -> Any:
    if name == "Store":
        from fleettool.store.db import Store

        return Store
    raise AttributeError(f"module 'fleettool.store' has no attribute {name!r}")
