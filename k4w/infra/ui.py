"""Everything k4w prints goes through here, so it is redacted and looks the same everywhere."""

from __future__ import annotations

import io
import os
import sys
from collections import Counter

from rich.console import Console
from rich.table import Table

from k4w.infra.errors import K4wError
from k4w.infra.redact import redact


class StdoutError(K4wError):
    """Standard output cannot be written (a full disk or /dev/full behind a redirect, a closed
    pipe): named as stdout, so no one looks for the fault in --out."""


class _Stdout:
    """sys.stdout as the console writes to it (looked up at each call, so a test's capture works),
    with a failed write reported as StdoutError."""

    def __getattr__(self, name):
        return getattr(sys.stdout, name)

    def write(self, text: str) -> int:
        try:
            return sys.stdout.write(text)
        except OSError as exc:
            raise self._failed(exc) from None

    def flush(self) -> None:
        try:
            sys.stdout.flush()
        except OSError as exc:
            raise self._failed(exc) from None

    @staticmethod
    def _failed(exc: OSError) -> StdoutError:
        return StdoutError(f"cannot write to stdout: {exc.strerror or exc} (stdout is redirected to a full disk or "
                           "device, or to a pipe that was closed)")


def stdout_lost() -> None:
    """After StdoutError: point fd 1 at the null device, so the flush at exit does not fail again
    with Python's "Exception ignored" message (the advice of the Python docs, signal module,
    "Note on SIGPIPE")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass  # no real stdout (a test's capture): nothing will flush to a broken one
    finally:
        os.close(devnull)


console = Console(file=_Stdout(), highlight=False, soft_wrap=True)  # type: ignore[arg-type]
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def say(text: str = "", style: str | None = None, *, to: Console | None = None) -> None:
    (to or console).print(redact(str(text)), style=style, markup=False)


def error(text: str) -> None:
    err_console.print(redact(f"error: {text}"), style="bold red", markup=False)


def table(title: str, columns: list[str], rows: list[list[object]], *, to: Console | None = None) -> None:
    """A table on a terminal wide enough for it; otherwise aligned plain text, one row per line.

    Plain text when piped or redirected (CI logs, `| tee`), where Rich would cut every row at 80
    columns, and on a terminal too narrow for the table's longest words: Rich would then cut or
    fold an IP, NO_PROXY or a path in the middle, and a value a user copies must stay whole. The
    terminal wraps a long plain line itself, which a copy joins again. to: another console than
    the process's own (a build's)."""
    out = to or console
    cells = [[redact(str(c)) for c in row] for row in rows]
    tbl = Table(title=title, title_justify="left", show_lines=False)
    for col in columns:
        # Wrap only between words; a word wider than its column never reaches Rich (see below).
        tbl.add_column(col, overflow="fold")
    for row in cells:
        tbl.add_row(*row)
    if out.is_terminal and _fits(out, tbl, [str(c) for c in columns], cells):
        out.print(tbl)
        return
    lines = [[redact(str(c)) for c in columns]] + cells
    widths = [max(len(line.split("\n")[0]) for line in col) for col in zip(*lines)]
    out.print(title, markup=False, highlight=False, soft_wrap=True)
    for row in lines:
        text = "  ".join(c.replace("\n", " ").ljust(w) for c, w in zip(row, widths)).rstrip()
        out.print(f"  {text}", markup=False, highlight=False, soft_wrap=True)


def _fits(out: Console, tbl: Table, columns: list[str], cells: list[list[str]]) -> bool:
    """Whether Rich lays the table out at the console's width with every word whole: rendered
    once off-screen, each word of every cell must appear as often as the cells hold it (a word
    Rich folded over two lines does not)."""
    probe = Console(file=io.StringIO(), width=out.width, color_system=None, legacy_windows=False)
    probe.print(tbl)
    text = probe.file.getvalue()
    needed = Counter(word for row in [columns, *cells] for cell in row for word in cell.split())
    return all(text.count(word) >= times for word, times in needed.items())


def command(argv: list[str] | str) -> None:
    """Show a command exactly as it would run (for --dry-run and plans), secrets redacted."""
    import shlex

    text = argv if isinstance(argv, str) else shlex.join(argv)
    say(f"$ {text}", style="cyan")
