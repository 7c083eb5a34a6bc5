"""Ctrl-C and SIGTERM end any k4w command with one line and a known exit code, at any moment.

Exit codes follow the shell's 128 + signal number: 130 for Ctrl-C (SIGINT), 143 for SIGTERM
(what `kill`, systemd and CI runners send). While a task runs, either signal raises
KeyboardInterrupt in it, so the task cleans up as for Ctrl-C (child processes, temporary
folders, the --out lock) and k4w.commands.cli.user_errors prints the line. Before a task runs (Python
importing k4w, Invoke parsing the command line) or after it returned, there is nothing to clean
up: the line is written and the process exits at once. A second signal during the cleanup also
exits at once, so a stuck cleanup never makes k4w deaf to Ctrl-C.

tasks.py installs this first, before any other import. What runs before tasks.py (Python's
own start-up and `import invoke`) is Python's and Invoke's own handling.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

# signal -> (exit code, the one line); 128 + signal number, as bash reports a process it killed.
OUTCOMES = {signal.SIGINT: (130, "interrupted (Ctrl-C)"), signal.SIGTERM: (143, "terminated (SIGTERM)")}


class Terminated(KeyboardInterrupt):
    """SIGTERM inside a task: a KeyboardInterrupt, so every cleanup written for Ctrl-C runs."""


_task_running = False
_received: int | None = None  # the first signal received while a task ran


def _handle(signum: int, _frame) -> None:
    global _received
    if _task_running and _received is None:
        _received = signum
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
    exit_now(signum)


def exit_now(signum: int) -> None:
    """Write the signal's one line to stderr and end the process, with no cleanup and no traceback."""
    code, line = OUTCOMES[signum]
    with contextlib.suppress(OSError):
        os.write(2, f"error: {line}\n".encode())
    os._exit(code)


def install() -> None:
    for signum in OUTCOMES:
        signal.signal(signum, _handle)


@contextlib.contextmanager
def task() -> Iterator[None]:
    """While the body runs, a signal raises KeyboardInterrupt in it (see the module's doc)."""
    global _task_running, _received
    _task_running, _received = True, None
    try:
        yield
    finally:
        _task_running = False


def outcome(exc: KeyboardInterrupt) -> tuple[int, str]:
    """The exit code and line for an interrupt that ended a task: by the signal received, since a
    cleanup may re-raise a plain KeyboardInterrupt for a SIGTERM."""
    signum = _received if _received is not None else (signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT)
    return OUTCOMES[signum]
