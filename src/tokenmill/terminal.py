"""Consoles and tables that never break an id, a path or a sentence.

rich wraps a printed line at the terminal's width (80 columns when the output is a pipe or a file)
by inserting newlines, and folds a table's cells to fit: a document id came out over four lines,
which cannot be copied back into `tokenmill trace` or a grep. Messages are printed with soft wrap
(one line; the terminal folds it on screen, a pipe gets it whole). A table is printed as a table
when it fits the width; when it does not, each row is printed as a block of `column: value` lines,
each value whole.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text


def message_console(stderr: bool = True, markup: bool = False) -> Console:
    """A console for messages: no newline is ever inserted into a line (soft wrap); no markup read
    from the text unless `markup` (paths, ids and exception text are data), no auto-highlight."""
    return Console(stderr=stderr, soft_wrap=True, markup=markup, highlight=False)


def print_table(table: Table, console: Console) -> None:
    """`table` as it is when its widest row fits `console`'s width; else one block per row: the
    first column's value, then `column: value` lines, so that no cell is folded or cut."""
    natural = console.measure(table, options=console.options.update_width(1 << 20)).maximum  # unclamped by the width
    if natural <= console.width:
        console.print(table)
        return
    if table.title:
        console.print(Text(str(table.title), style="bold"), soft_wrap=True)
    columns = [(str(c.header), [c for c in c.cells]) for c in table.columns]
    rows = max((len(cells) for _, cells in columns), default=0)
    for i in range(rows):
        values = [(name, _plain(cells[i]) if i < len(cells) else "") for name, cells in columns]
        first_name, first = values[0]
        console.print(Text(f"{first_name} {first}"), soft_wrap=True)
        for name, value in values[1:]:
            console.print(Text(f"    {name}: {value}"), soft_wrap=True)


def _plain(cell: object) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)
