"""How commands print what they read: the same rows as JSON for scripts (`--json`, `--format json`), CSV or
Parquet for analysis (`--format csv|parquet`), or as a table for people.

stdout is data. JSON is `json.dump(..., indent=1)` plus a newline, the shape scripts and the tests rely on. Tables
are printed by rich without borders: one row per line, columns two spaces apart, headers in capitals, cells
never wrapped (a long one ends in an ellipsis), so `grep` and `cut` still work on them. Piped, a table is as wide
as its cells need (up to 80 characters a column). On a terminal, or wherever `COLUMNS` is set, it fits that
width as k9s and rich do: while the widest column (the summary) would be left under FLEX_MIN characters, the
least important columns are dropped (the command's `drop` order, else right to left), then rich narrows the
widest; a cell is never cut at 80 when the width has room for it. Cell text is shown as it is: no rich markup,
highlighting or emoji codes are read from the data.

    emit(rows, ["ts", "node", "kind", ("gpu", lambda r: r["gpu"] if r["gpu"] is not None else "-")], as_json=j)
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Row = Mapping[str, Any]
Column = str | tuple[str, Callable[[Row], Any]]  # a key of the row, or a header and how to compute the cell
MAX_CELL = 80  # characters a column may take, piped
FLEX_MIN = 30  # characters the widest column keeps on a narrow terminal before others are dropped
GAP = 2  # spaces between columns
NONE = "(none)"  # what a table of no rows prints


def iso(v: Any) -> str | None:
    """A naive UTC datetime from the store as ISO 8601 with Z (milliseconds when there are any); None stays."""
    if v is None:
        return None
    return v.strftime("%Y-%m-%dT%H:%M:%S") + (f".{v.microsecond // 1000:03d}" if v.microsecond else "") + "Z"


def with_iso(row: Row, *keys: str) -> dict[str, Any]:
    """A copy of the row with these datetime fields as ISO 8601 strings."""
    return {**row, **{k: iso(row[k]) for k in keys}}


def print_json(data: Any, *, indent: int | None = 1, default: Callable[[Any], Any] | None = None) -> None:
    json.dump(data, sys.stdout, indent=indent, default=default)
    print()


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def _numeric(values: list[Any]) -> bool:
    present = [v for v in values if v is not None]
    return bool(present) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present)


def table_width() -> int | None:
    """The width a table fits: `COLUMNS` when set, else the terminal's; None piped (as wide as the cells)."""
    env = os.environ.get("COLUMNS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None


def print_table(rows: Sequence[Row], columns: Sequence[Column], drop: Sequence[str] = ()) -> None:
    """The rows as a borderless table of these columns; `(none)` when there are none. `drop`: the headers
    to leave out first where the width is short, least important first."""
    if not rows:
        print(NONE)
        return
    heads = [c if isinstance(c, str) else c[0] for c in columns]
    grid = [[r.get(c) if isinstance(c, str) else c[1](r) for c in columns] for r in rows]
    plain = _plain_text(heads, grid)
    cell_len = len if plain else _rich_cell_len()
    width = table_width()
    keep = list(range(len(heads)))
    sized: dict[int, int] = {}  # a column's width where the table must fit `width` ({}: rich squeezes)
    if width is not None:
        from fleettool.views import fit_columns

        widths = [max(cell_len(h), *(cell_len(_cell(g[i])) for g in grid)) for i, h in enumerate(heads)]
        keep, sized = fit_columns(heads, widths, width, drop, flex_min=FLEX_MIN, gap=GAP)
    if plain and (width is None or sized) and not _styled():
        lines = _plain_lines(heads, grid, keep, sized)
    else:
        lines = _rich_lines(heads, grid, keep, sized, width)
    for line in lines:
        print(line)


def _rich_lines(
    heads: Sequence[str],
    grid: Sequence[Sequence[Any]],
    keep: Sequence[int],
    sized: Mapping[int, int],
    width: int | None,
) -> list[str]:
    """The table's lines as rich lays them out (`sized`: each kept column's width, {} for rich to squeeze it
    into `width`; `width` None: as wide as the cells, up to MAX_CELL each), styled where stdout is styled."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False, header_style="bold")
    for i in keep:
        table.add_column(
            heads[i].upper(),
            justify="right" if _numeric([g[i] for g in grid]) else "left",
            no_wrap=True,
            overflow="ellipsis",
            width=sized.get(i),
            max_width=MAX_CELL if width is None else None,
        )
    for g in grid:
        table.add_row(*(Text(_cell(g[i])) for i in keep))
    # piped: wide enough that no cell is cut short of MAX_CELL; else the width it fits
    console = Console(
        file=sys.stdout,
        width=(MAX_CELL + 2) * len(heads) if width is None else width,
        markup=False,
        highlight=False,
        emoji=False,
    )
    with console.capture() as cap:
        console.print(table)
    return [
        line.rstrip() for line in cap.get().splitlines()
    ]  # rich pads the last column; a line ends where its text does


def _rich_cell_len() -> Callable[[str], int]:
    from rich.cells import cell_len

    return cell_len


def _plain_text(heads: Sequence[str], grid: Sequence[Sequence[Any]]) -> bool:
    """Whether every header and cell is printable ASCII: one character one column, nothing rich would strip."""
    return all(h.isascii() and h.isprintable() for h in heads) and all(
        (t := _cell(v)).isascii() and t.isprintable() for g in grid for v in g
    )


def _styled() -> bool:
    """Whether rich would style the table (the headers bold): stdout a terminal, or the variables rich reads
    to force it either way."""
    return sys.stdout.isatty() or "FORCE_COLOR" in os.environ or "TTY_COMPATIBLE" in os.environ


def _plain_lines(
    heads: Sequence[str], grid: Sequence[Sequence[Any]], keep: Sequence[int], sized: Mapping[int, int]
) -> list[str]:
    """The lines rich prints for an unstyled table of printable ASCII whose column widths are known (each
    `sized`, else as wide as its cells up to MAX_CELL), without loading rich (~30 ms a command): cells padded
    to the width (numbers to the right), one cut short ending in "…", GAP spaces between columns, no spaces
    at a line's end. tests/test_cli_startup.py compares it with rich's."""
    texts = [[_cell(g[i]) for i in keep] for g in grid]
    head = [heads[i].upper() for i in keep]
    widths = [
        sized[i] if sized else min(MAX_CELL, max(len(head[k]), *(len(t[k]) for t in texts)))
        for k, i in enumerate(keep)
    ]
    right = [_numeric([g[i] for g in grid]) for i in keep]

    def line(cells: Sequence[str]) -> str:
        out = []
        for text, w, r in zip(cells, widths, right, strict=True):
            if len(text) > w:
                text = text[: w - 1] + "…" if w > 0 else ""
            out.append(text.rjust(w) if r else text.ljust(w))
        return (" " * GAP).join(out).rstrip()

    return [line(head), *(line(t) for t in texts)]


def _flat(v: Any) -> Any:
    """A cell for CSV or Parquet: lists and mappings as JSON text (a CSV cell holds one value)."""
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(v, default=str, separators=(",", ":"))
    return v


def emit(
    rows: Sequence[Row],
    columns: Sequence[Column],
    *,
    as_json: bool,
    fmt: str = "table",
    drop: Sequence[str] = (),
) -> None:
    """The rows in `fmt`: a table of these columns (`drop`: the headers a narrow terminal loses first); or,
    with every field, a JSON array (`as_json` too), CSV with a header, or Parquet (through polars, to a
    redirected stdout)."""
    if as_json or fmt == "json":
        print_json(list(rows))
    elif fmt == "csv":
        import csv

        keys = list(dict.fromkeys(k for r in rows for k in r)) or [
            c if isinstance(c, str) else c[0] for c in columns
        ]
        w = csv.DictWriter(sys.stdout, fieldnames=keys, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: _flat(r.get(k)) for k in keys})
    elif fmt == "parquet":
        import io

        from fleettool.cli.extras import require_extra

        require_extra("analytics", "--format parquet")
        import polars as pl

        if sys.stdout.isatty():
            import typer

            raise typer.BadParameter(
                "parquet is binary: redirect it to a file (> rows.parquet)", param_hint="--format"
            )
        buf = io.BytesIO()
        pl.DataFrame(
            [{k: _flat(v) for k, v in r.items()} for r in rows], infer_schema_length=None
        ).write_parquet(buf)
        sys.stdout.flush()
        sys.stdout.buffer.write(buf.getvalue())
        sys.stdout.buffer.flush()
    else:
        print_table(rows, columns, drop)
