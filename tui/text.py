"""Data is shown as text, never as markup: the one way a string from a log or the store reaches a widget.

A str given to a DataTable cell, a Static, a Label or notify() is parsed as markup: a PCI bus `ab` in
`0000:ab:00` became an emoji (Rich's `:ab:`), `[bold red]x[/]` in a kernel message lost its brackets, and a
message with a closing tag and no opening one (`[/]`) raised MarkupError and took the screen down. A
rich.text.Text is drawn as it is: never parsed as markup, emoji codes left as typed. So every widget gets a
constant or a Text from here: `plain(value, style)` for one string, `assemble(...)` for a line of parts where
the styling is ours and the strings are the data's. tests/test_tui_text.py scans tui/ for any other way in.
"""

from __future__ import annotations

from rich.text import Text

Part = str | Text | tuple[str, str]
"""A piece of a line: data as it is (str or Text), or (data, style) with a Rich style such as "bold red"."""


def plain(value: object, style: str = "") -> Text:
    """`value` as text (None as ""), optionally in `style`: never read as markup or emoji codes."""
    return Text("" if value is None else str(value), style=style, end="")


def assemble(*parts: Part) -> Text:
    """One Text of `parts`, each shown as it is; a (str, style) part takes that style."""
    return Text.assemble(*parts, end="")
