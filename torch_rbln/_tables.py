"""Plain-text tables for reports (fallback report, compiler stats, diagnose), rendered by rich.

rich aligns columns and folds long cells instead of breaking the layout; rendering to a string with no
colour system keeps the result plain text, the same in a terminal, a log file or a test's message."""

from __future__ import annotations

from collections.abc import Sequence


def render_table(columns: Sequence[str], rows: Sequence[Sequence[object]], width: int = 120,
                 right: Sequence[str] = ()) -> str:
    """`rows` under `columns` as text lines (no trailing spaces); columns named in `right` are
    right-aligned (numbers)."""
    import io

    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column in columns:
        table.add_column(column, justify="right" if column in right else "left", overflow="fold")
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    stream = io.StringIO()
    Console(file=stream, width=width, color_system=None, highlight=False).print(table)
    return "\n".join(line.rstrip() for line in stream.getvalue().splitlines())
