"""Lock files: one process at a time on a thing, with an OS lock that ends with the process.

The OS releases the lock when its holder ends, however it ends, so a crash never leaves a stale
lock. The holder deletes the lock file when it is done, so nothing is left between runs. Deleting
a lock file races with a caller that opened it just before: that caller would lock a file no
longer at the path. So a caller that got the lock checks that the file it locked is still the one
at the path, and starts over if not (POSIX; Windows cannot delete a file another process holds
open, and the holder there deletes it only after closing it).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from k4w.infra import files as outfiles

# msvcrt locks a byte range, and other processes cannot read locked bytes. The lock sits on one
# byte far past a holder's note, so a refused caller can still read who holds it.
_WINDOWS_LOCK_OFFSET = 1 << 20


def acquire(path: Path, *, within: Path | None = None, wait: bool = False,
            busy: Callable[[int], BaseException] | None = None) -> int:
    """Open and lock path (never through a link); returns the locked descriptor. When another
    process holds it: wait for it, or (wait=False) raise busy(descriptor), which may read the
    holder's note from the descriptor first."""
    path = Path(path)
    while True:
        outfiles.refuse_links(path, within)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | outfiles.BINARY, 0o644)
        try:
            if not _lock(fd, wait):
                raise (busy(fd) if busy else BlockingIOError(f"{path} is locked by another process"))
            if _still_at(fd, path):
                return fd
            _unlock(fd)  # its holder deleted it after we opened it: lock the new one
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def release(fd: int, path: Path) -> None:
    """Delete the lock file, unlock and close it."""
    if os.name != "nt":
        Path(path).unlink(missing_ok=True)  # while still locked: see the module's docstring
    try:
        _unlock(fd)
    finally:
        os.close(fd)
    if os.name == "nt":
        with contextlib.suppress(OSError):  # another caller has it open: it deletes it in turn
            Path(path).unlink()


@contextlib.contextmanager
def held(path: Path, *, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold the lock on path for the block, waiting for another holder first (on_wait is told)."""
    try:
        fd = acquire(path)
    except BlockingIOError:
        if on_wait:
            on_wait()
        fd = acquire(path, wait=True)
    try:
        yield
    finally:
        release(fd, path)


@contextlib.contextmanager
def updating(path: Path, *, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold path's lock (`<path>.lock` beside it) for a read-modify-write of a record other k4w
    processes may update at the same time (the caches' indexes, k4w-pins.yml, the ISO catalogue):
    read it inside the block, so an update another process made meanwhile is kept, not lost."""
    with held(Path(path).with_name(Path(path).name + ".lock"), on_wait=on_wait):
        yield


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


if os.name == "nt":
    import msvcrt

    # LK_LOCK gives up after 10 attempts a second apart (Python docs, msvcrt.locking).
    _WINDOWS_RETRY_S = 1.0

    def _lock(fd: int, wait: bool) -> bool:
        while True:
            os.lseek(fd, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
            try:
                msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
                return True
            except OSError:
                if not wait:
                    return False
            time.sleep(_WINDOWS_RETRY_S)  # msvcrt has no blocking lock without a limit

    def _unlock(fd: int) -> None:
        os.lseek(fd, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _lock(fd: int, wait: bool) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return False
        return True

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)
