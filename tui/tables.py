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
from textual import events
from textual.message import Message
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
    width: int | None = None,
    drop: Sequence[str] = (),
) -> None:
    """Replace the table's rows with `rows` (str cells shown as text, Text cells with their styles), columns
    sized to fit; `keys` are the row keys. `width`: the table fits it as k9s fits a terminal (views.fit_columns:
    the widest column, the summary, ends in an ellipsis; under 30 characters for it, the `drop` columns go,
    least important first)."""
    cells = [[_text(c) for c in r] for r in rows]
    widths = [max([plain(h).cell_len, *(r[i].cell_len for r in cells)]) for i, h in enumerate(headers)]
    if width is not None and headers:
        from fleettool.views import fit_columns

        pad = 2 * table.cell_padding  # each column's cells are padded on both sides
        keep, sized = fit_columns(headers, [w + pad for w in widths], width, drop, flex_min=30 + pad, gap=0)
        headers = [headers[i] for i in keep]
        widths = [sized[i] - pad if sized else widths[i] for i in keep]
        cells = [[_cut(r[i], w) for i, w in zip(keep, widths, strict=True)] for r in cells]
    current = [(str(c.label), c.width) for c in table.columns.values()]
    if current != list(zip(headers, widths, strict=True)):
        table.clear(columns=True)
        for h, w in zip(headers, widths, strict=True):
            table.add_column(plain(h), width=w, key=h)
    table.clear()
    for i, r in enumerate(cells):
        table.add_row(*r, key=None if keys is None else keys[i])


class FitTable(DataTable[Any]):
    """A DataTable whose columns fit its width (fill's `width`): it says when that width changes."""

    class Resized(Message):
        """The table's width changed: fill it again."""

    def on_resize(self, event: events.Resize) -> None:
        self.post_message(self.Resized())


def _cut(cell: Text, width: int) -> Text:
    """The cell within `width` cells, an ellipsis where it was cut."""
    if cell.cell_len <= width:
        return cell
    cut = cell.copy()
    cut.truncate(width, overflow="ellipsis")
    return cut


def move_to_key(table: DataTable[Any], keys: Sequence[str], key: str | None, row: int) -> None:
    """Put the cursor back on the row `key` (gone: on the row where it was, within the table)."""
    if not keys:
        return
    at = keys.index(key) if key in keys else min(max(row, 0), len(keys) - 1)
    if at != table.cursor_row:
        table.move_cursor(row=at, animate=False)
