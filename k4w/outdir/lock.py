"""One k4w command at a time per --out folder.

The lock is OUT/.lock (k4w.infra.filelock: an OS lock that ends with the process, and a file deleted
on release, so --out shows no lock between commands). The holder writes its pid and command into
the file, so a second caller is told who holds it.
Holding is re-entrant within a process: a task that renders and then builds locks once.
"""

from __future__ import annotations

import datetime as _dt
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from k4w.infra import filelock
from k4w.infra.errors import K4wError

LOCK_NAME = ".lock"

_held: dict[Path, int] = {}  # --out -> how many nested holds of this process


class OutBusy(K4wError):
    """Another process holds the --out folder."""


@contextmanager
def hold(out: Path, command: str | None = None) -> Iterator[None]:
    """Hold the lock on out, or raise OutBusy naming the holder's pid and command."""
    out = Path(out).resolve()
    if out in _held:
        _held[out] += 1
        try:
            yield
        finally:
            _held[out] -= 1
        return
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK_NAME

    def busy(fd: int) -> OutBusy:
        return OutBusy(f"{out} is in use by another k4w command ({_holder(fd)}). "
                       f"Wait for it to finish, or stop it, then run again.")

    fd = filelock.acquire(path, within=out, busy=busy)
    try:
        started = _dt.datetime.now().isoformat(timespec="seconds")
        _note(fd, f"pid {os.getpid()}: {command or this_command()}, since {started}\n")
        _held[out] = 1
        try:
            yield
        finally:
            del _held[out]
            _note(fd, "")  # released: leave no holder to be misread later
    finally:
        filelock.release(fd, path)


def this_command() -> str:
    """This process's command line as the user typed it (`python -m invoke` reads as invoke)."""
    argv = list(sys.argv)
    head = Path(argv[0]).name if argv else "python"
    if head in ("__main__.py", "invoke", "invoke.exe", "inv", "inv.exe"):
        head = "invoke"
    return " ".join([head, *argv[1:]])


def _holder(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    note = os.read(fd, 4096).decode("utf-8", "replace").strip()
    return note or "pid unknown: it has only just started"


def _note(fd: int, text: str) -> None:
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)
    os.write(fd, text.encode("utf-8"))
