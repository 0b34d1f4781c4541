"""Filling a DataTable so that what is painted first is already right.

DataTable measures new rows on its next idle, and rows it paints before that stay cached at the old column widths
(seen as header-wide columns in snapshots taken under load). `fill` sizes every column to its header and cells
before the rows go in, so no frame shows the table half-measured; columns are rebuilt only when a width changes.
Cells are data: a str cell goes in as text (fleettool.tui.text.plain), never as markup; a styled cell is a Text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from fleettool.tui.text import plain

Cell = str | Text


def _text(cell: Cell) -> Text:
    """A cell as drawn: a Text as it is, a str as text (DataTable would read a str as markup)."""
    return cell if isinstance(cell, Text) else plain(cell)


def fill(
    table: DataTable[Any],
    headers: Sequence[str],
    rows: Sequence[Sequence[Cell]],
    keys: Sequence[str] | None = None,
) -> None:
    """Replace the table's rows with `rows` (str cells shown as text, Text cells with their styles), columns
    sized to fit; `keys` are the row keys."""
    cells = [[_text(c) for c in r] for r in rows]
    widths = [max([plain(h).cell_len, *(r[i].cell_len for r in cells)]) for i, h in enumerate(headers)]
    current = [(str(c.label), c.width) for c in table.columns.values()]
    if current != list(zip(headers, widths, strict=True)):
        table.clear(columns=True)
        for h, w in zip(headers, widths, strict=True):
            table.add_column(plain(h), width=w, key=h)
    table.clear()
    for i, r in enumerate(cells):
        table.add_row(*r, key=None if keys is None else keys[i])


def move_to_key(table: DataTable[Any], keys: Sequence[str], key: str | None, row: int) -> None:
    """Put the cursor back on the row `key` (gone: on the row where it was, within the table)."""
    if not keys:
        return
    at = keys.index(key) if key in keys else min(max(row, 0), len(keys) - 1)
    if at != table.cursor_row:
        table.move_cursor(row=at, animate=False)
