"""The meta table's free keys: small bookmarks other layers keep in the store (an export's watermark per
table and location, which days were compacted). The schema's own keys (format, schema_version) are db.py's."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleettool.store.db import Store


def get_meta(store: Store, key: str) -> str | None:
    v = store.scalar("SELECT value FROM meta WHERE key = ?", [key])
    return None if v is None else str(v)


def set_meta(store: Store, key: str, value: str) -> None:
    store.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", [key, value])
