"""Show builds as they run: a live line per box on a terminal, a line per event otherwise.

CI and redirected output get plain, timestamped lines (no cursor tricks in the log); a
terminal gets one rich status row per box with its phase, provisioner N of M and elapsed time.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

from rich.console import Console
from rich.live import Live
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn
from rich.table import Table
from rich.text import Text

from k4w.media.iso import human_size
from k4w.infra.redact import redact
from .transcript import BuildState, Event


def elapsed(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m{rest % 60:02d}s" if hours else f"{rest // 60:02d}m{rest % 60:02d}s"


@dataclass
class _Row:
    box: str
    state: BuildState
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    result: str | None = None

    @property
    def seconds(self) -> float:
        return (self.finished or time.monotonic()) - self.started


class PlainView:
    """One line per phase, step and error, e.g. `12:03:07 windows-1803 [04m10s] provisioner 2/9: docker.ps1`."""

    def __init__(self, console: Console):
        self.console = console
        self._rows: dict[str, _Row] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> "PlainView":
        return self

    def __exit__(self, *exc) -> None:
        return None

    def _print(self, box: str, text: str) -> None:
        row = self._rows[box]
        stamp = time.strftime("%H:%M:%S")
        with self._lock:
            self.console.print(f"{stamp} {box} [{elapsed(row.seconds)}] {redact(text)}", markup=False, highlight=False, soft_wrap=True)

    def add(self, box: str, state: BuildState) -> None:
        self._rows[box] = _Row(box, state)
        self._print(box, f"packer build started ({state.total_steps} provisioner{'s' if state.total_steps != 1 else ''})")

    def event(self, box: str, event: Event) -> None:
        if event.kind == "step" or event.kind == "phase":
            self._print(box, event.text)
        elif event.kind == "error":
            self._print(box, f"! {event.text}")

    def finish(self, box: str, result: str) -> None:
        row = self._rows[box]
        row.finished, row.result = time.monotonic(), result
        self._print(box, result)


class RichView:
    """A live table: one row per box, refreshed a few times a second."""

    def __init__(self, console: Console):
        self.console = console
        self._rows: dict[str, _Row] = {}
        self._lock = threading.Lock()
        self._live = Live(console=console, refresh_per_second=4, transient=False, get_renderable=self._table)

    def __enter__(self) -> "RichView":
        self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._live.__exit__(*exc)

    def _table(self) -> Table:
        table = Table(show_header=True, header_style="bold", expand=True, box=None)
        table.add_column("box", no_wrap=True)
        table.add_column("time", no_wrap=True, justify="right")
        table.add_column("step", no_wrap=True, justify="right")
        table.add_column("now", no_wrap=True, overflow="ellipsis", ratio=2)
        table.add_column("last output", no_wrap=True, overflow="ellipsis", ratio=1, style="dim")
        with self._lock:
            rows = list(self._rows.values())
        for row in rows:
            st = row.state
            step = f"{st.step}/{st.total_steps}" if st.total_steps else "-"
            now = Text(redact(row.result or st.phase))
            if row.result:
                now.stylize("green" if row.result.startswith("built") else "red")
            table.add_row(row.box, elapsed(row.seconds), step, now, redact(st.last_output))
        return table

    def add(self, box: str, state: BuildState) -> None:
        with self._lock:
            self._rows[box] = _Row(box, state)

    def event(self, box: str, event: Event) -> None:
        if event.kind == "error":
            # Errors scroll above the live table, so they stay visible after it moves on.
            self._live.console.print(Text(f"{box}: ! {redact(event.text)}", style="red"))

    def finish(self, box: str, result: str) -> None:
        with self._lock:
            row = self._rows[box]
            row.finished, row.result = time.monotonic(), result


def make_view(console: Console) -> PlainView | RichView:
    return RichView(console) if console.is_terminal else PlainView(console)


@contextlib.contextmanager
def _byte_progress(console: Console, label: str, total: int | None, doing: str, done_text: str,
                   *columns) -> Iterator[Callable[[int, int | None], None]]:
    """A bar over bytes on a terminal; a plain start and end line when output is piped. Nothing
    shows until the first bytes: a refusal before the work starts never says it started."""
    started: list[float] = []
    if not console.is_terminal:
        def plain(done: int, size: int | None) -> None:
            if not started:
                started.append(time.monotonic())
                console.print(f"{label}: {doing} ...", markup=False, highlight=False)

        yield plain
        if started:
            console.print(f"{label}: {done_text} in {elapsed(time.monotonic() - started[0])}", markup=False, highlight=False)
        return
    with contextlib.ExitStack() as stack:
        bar: list = []

        def update(done: int, size: int | None) -> None:
            if not bar:
                progress = stack.enter_context(Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), *columns,
                                                        TimeRemainingColumn(), console=console, transient=True))
                bar.append((progress, progress.add_task(label, total=total)))
            progress, task = bar[0]
            progress.update(task, completed=done, total=size or total)

        yield update


def hash_progress(console: Console, label: str, total: int):
    """A progress bar for hashing a big file."""
    return _byte_progress(console, label, total, f"computing sha256 of {human_size(total)}", "sha256 done")


def download_progress(console: Console, label: str):
    """Bytes, rate and time left for one download."""
    return _byte_progress(console, label, None, "downloading", "downloaded", TransferSpeedColumn())


class FilesProgress:
    """Several downloads at once: one rich Progress with a bar per file (bytes, rate, time left)
    on a terminal; a plain start line and end line per file when output is piped. Like
    _byte_progress, a file shows nothing until its first bytes arrive, so a file that was
    already cached or was refused never claims a download started."""

    def __init__(self, console: Console):
        self.console = console
        self._lock = threading.Lock()
        self._started: dict[str, float] = {}
        self._tasks: dict[str, object] = {}
        self._bars = None
        if console.is_terminal:
            self._bars = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                                  TimeRemainingColumn(), console=console, transient=True)

    def __enter__(self) -> "FilesProgress":
        if self._bars is not None:
            self._bars.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._bars is not None:
            self._bars.__exit__(*exc)

    def _plain(self, text: str) -> None:
        self.console.print(redact(text), markup=False, highlight=False, soft_wrap=True)

    def callback(self, label: str) -> Callable[[int, int | None], None]:
        def update(done: int, size: int | None) -> None:
            with self._lock:
                first = label not in self._started
                if first:
                    self._started[label] = time.monotonic()
                    if self._bars is None:
                        self._plain(f"{label}: downloading ...")
                    else:
                        self._tasks[label] = self._bars.add_task(redact(label), total=size)
            if self._bars is not None:
                self._bars.update(self._tasks[label], completed=done, total=size)

        return update

    def finish(self, label: str, text: str) -> None:
        """The end of one file: its bar goes, and a plain line says how it ended."""
        with self._lock:
            started = self._started.get(label)
            if started is None:
                return
            if self._bars is not None:
                self._bars.remove_task(self._tasks.pop(label))
            self._plain(f"{label}: {text} in {elapsed(time.monotonic() - started)}")
