"""The CLI's tables, for people: columns aligned by rich, colour on a terminal only.

rich is imported only when a table is printed (``portal --help`` never pays for it). It honours
``NO_COLOR`` (and ``FORCE_COLOR``, ``TERM=dumb``) by itself, and writes no colour codes into a pipe
or a file. Written to a pipe, a row is never wrapped or cut to a terminal's width: a script reads
whole cells (``portal jobs | grep train``); ``--json`` is the form made for scripts.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["STATE_STYLES", "print_table"]

#: A job's state, coloured by what the user may need to do about it.
STATE_STYLES = {
    "running": "green",
    "pausing": "yellow",
    "suspended": "yellow",
    "done": "dim",
    "failed": "bold red",
    "lost": "bold red",
    "cancelled": "dim",
}

#: Wide enough that no row of a piped table wraps.
_PIPE_WIDTH = 10_000


def print_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    styles: dict[int, dict[str, str]] | None = None,
) -> None:
    """Print ``rows`` under ``headers``. ``styles``: for a column index, the style of each of
    its values (e.g. a job's state); other cells are plain."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    terminal = sys.stdout.isatty()
    console = Console(
        width=None if terminal else _PIPE_WIDTH, highlight=False, soft_wrap=not terminal
    )
    table = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
    for header in headers:
        table.add_column(header, no_wrap=not terminal, overflow="fold")
    for row in rows:
        cells = []
        for index, value in enumerate(row):
            style = (styles or {}).get(index, {}).get(value, "")
            cells.append(Text(value, style=style))
        table.add_row(*cells)
    with console.capture() as captured:
        console.print(table)
    out = "\n".join(line.rstrip() for line in captured.get().splitlines())
    sys.stdout.write(out + "\n")
    sys.stdout.flush()
