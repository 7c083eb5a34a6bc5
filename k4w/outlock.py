"""One k4w command at a time per --out folder.

The lock is OUT/.lock, held with an OS lock for as long as the command runs: the OS releases it
when the process ends, however it ends, so a crash never leaves a stale lock. The holder writes
its pid and command into the file, so a second caller is told who holds it, and deletes the file
when it is done, so --out shows no lock between commands. Deleting a lock file races with a
caller that opened it just before: that caller would lock a file no longer at OUT/.lock. So a
caller that got the lock checks that the file it locked is still the one at OUT/.lock, and
starts over if not (POSIX; Windows cannot delete a file another process holds open).
Holding is re-entrant within a process: a task that renders and then builds locks once.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import outfiles
from .errors import K4wError

LOCK_NAME = ".lock"
# msvcrt locks a byte range, and other processes cannot read locked bytes. The lock sits on one
# byte far past the holder's note, so a refused caller can still read who holds it.
_WINDOWS_LOCK_OFFSET = 1 << 20

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
    fd = _acquire(path, out)
    released = False
    try:
        started = _dt.datetime.now().isoformat(timespec="seconds")
        _note(fd, f"pid {os.getpid()}: {command or this_command()}, since {started}\n")
        _held[out] = 1
        try:
            yield
        finally:
            del _held[out]
            _note(fd, "")  # released: leave no holder to be misread later
            if os.name != "nt":
                path.unlink(missing_ok=True)  # while still locked: see the module's docstring
            _unlock(fd)
            os.close(fd)
            released = True
            if os.name == "nt":
                with contextlib.suppress(OSError):  # another caller has it open: it deletes it
                    path.unlink()
    finally:
        if not released:
            os.close(fd)


def _acquire(path: Path, out: Path) -> int:
    """Open and lock path, or raise OutBusy naming the holder. Returns the locked descriptor."""
    while True:
        outfiles.refuse_links(path, out)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | outfiles.BINARY, 0o644)
        try:
            if not _try_lock(fd):
                raise OutBusy(f"{out} is in use by another k4w command ({_holder(fd)}). "
                              f"Wait for it to finish, or stop it, then run again.")
            if _still_at(fd, path):
                return fd
            _unlock(fd)  # its holder deleted it after we opened it: lock the new one
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def _still_at(fd: int, path: Path) -> bool:
    """Whether the open file fd is the one now at path (not deleted or replaced since it was opened)."""
    if os.name == "nt":
        return True  # a file open here cannot be deleted by another process
    try:
        now = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (now.st_dev, now.st_ino)


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


if os.name == "nt":
    import msvcrt

    def _try_lock(fd: int) -> bool:
        os.lseek(fd, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

    def _unlock(fd: int) -> None:
        os.lseek(fd, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)
