"""Filling a DataTable so that what is painted first is already right.

DataTable measures new rows on its next idle, and rows it paints before that stay cached at the old column widths
(seen as header-wide columns in snapshots taken under load). `fill` sizes every column to its header and cells
before the rows go in, so no frame shows the table half-measured; columns are rebuilt only when a width changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.widgets import DataTable


def _width(cell: str) -> int:
    return Text.from_markup(cell).cell_len  # a str cell is drawn as markup: "[red]C[/]" is one cell wide


def fill(
    table: DataTable[Any],
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    keys: Sequence[str] | None = None,
) -> None:
    """Replace the table's rows with `rows` (markup strings), columns sized to fit; `keys` are the row keys."""
    widths = [max([_width(h), *(_width(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    current = [(str(c.label), c.width) for c in table.columns.values()]
    if current != list(zip(headers, widths, strict=True)):
        table.clear(columns=True)
        for h, w in zip(headers, widths, strict=True):
            table.add_column(h, width=w, key=h)
    table.clear()
    for i, r in enumerate(rows):
        table.add_row(*r, key=None if keys is None else keys[i])


def move_to_key(table: DataTable[Any], keys: Sequence[str], key: str | None, row: int) -> None:
    """Put the cursor back on the row `key` (gone: on the row where it was, within the table)."""
    if not keys:
        return
    at = keys.index(key) if key in keys else min(max(row, 0), len(keys) - 1)
    if at != table.cursor_row:
        table.move_cursor(row=at, animate=False)
