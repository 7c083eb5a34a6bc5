"""Everything k4w prints goes through here, so it is redacted and looks the same everywhere."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from .redact import redact

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def say(text: str = "", style: str | None = None, *, to: Console | None = None) -> None:
    (to or console).print(redact(str(text)), style=style, markup=False)


def error(text: str) -> None:
    err_console.print(redact(f"error: {text}"), style="bold red", markup=False)


def table(title: str, columns: list[str], rows: list[list[object]], *, to: Console | None = None) -> None:
    """A table on a terminal; aligned plain text when piped or redirected (CI logs, `| tee`),
    where Rich would cut every row at 80 columns and lose IPs, NO_PROXY and paths. to: another
    console than the process's own (a build's)."""
    out = to or console
    if not out.is_terminal:
        cells = [[redact(str(c)) for c in columns]] + [[redact(str(c)) for c in row] for row in rows]
        widths = [max(len(line.split("\n")[0]) for line in col) for col in zip(*cells)]
        out.print(title, markup=False, highlight=False, soft_wrap=True)
        for row in cells:
            text = "  ".join(c.replace("\n", " ").ljust(w) for c, w in zip(row, widths)).rstrip()
            out.print(f"  {text}", markup=False, highlight=False, soft_wrap=True)
        return
    tbl = Table(title=title, title_justify="left", show_lines=False)
    for col in columns:
        tbl.add_column(col)
    for row in rows:
        tbl.add_row(*(redact(str(cell)) for cell in row))
    out.print(tbl)


def command(argv: list[str] | str) -> None:
    """Show a command exactly as it would run (for --dry-run and plans), secrets redacted."""
    import shlex

    text = argv if isinstance(argv, str) else shlex.join(argv)
    say(f"$ {text}", style="cyan")


def is_tty() -> bool:
    return sys.stdout.isatty()
