"""Writing under --out: refuse an unusable folder up front, never write through a link, and
replace files whole (a temp file beside the target, fsync, rename), so a crash or a full disk
leaves the old file or the new one, never half of one."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from k4w.infra.errors import K4wError

# POSIX opens the last component without following a link; Windows has no such flag, so there
# the explicit check in refuse_links is the only guard.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
# Windows' C runtime opens in text mode unless told otherwise, and would translate newlines a
# second time under Python's own text layer (tempfile.mkstemp passes it for the same reason).
BINARY = getattr(os, "O_BINARY", 0)


class LinkRefused(K4wError):
    """A symbolic link sits where k4w would write inside --out."""

    def __init__(self, link: Path):
        self.link = link
        super().__init__(f"{link} is a symbolic link; k4w never writes through a link inside --out. "
                         f"Remove the link and run again (k4w creates a plain file or folder there).")


def check_out(out: Path, repository: Path | None = None) -> None:
    """Refuse an --out that no command could write, or that is k4w's own repository or a folder
    holding it (a render there would replace the tracked vagrant/ sources), naming it, before any
    work starts."""
    out = Path(out)
    if repository is not None:
        repo, chosen = Path(repository).resolve(), out.resolve()
        if chosen == repo or chosen in repo.parents:
            raise K4wError(f"--out {out} is {'the k4w repository' if chosen == repo else f'a folder holding the k4w repository {repo}'}: "
                           f"k4w writes packer/, http/, vagrant/, ... there and would replace its sources; "
                           f"use a folder of its own, e.g. --out {repo / 'build'}")
    if out.exists():
        if not out.is_dir():
            raise K4wError(f"--out {out} is a file, not a folder: point --out at a folder (it is created if missing)")
        if not os.access(out, os.W_OK | os.X_OK):
            raise K4wError(f"--out {out} is not writable (a read-only disk or no write permission for this user)")
        return
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise K4wError(f"--out {out} cannot be created: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise K4wError(f"--out {out} cannot be created: {parent} is not writable "
                       f"(a read-only disk or no write permission for this user)")


def refuse_links(path: Path, within: Path | None = None) -> None:
    """Raise LinkRefused if path, or a folder between within and path, is a symbolic link.

    Without within, path and its own folder are checked. --out itself may be a link: that is the
    user's choice, made on the command line; links inside it are not.
    """
    path = Path(path)
    if within is not None and path.is_relative_to(within):
        parts = path.relative_to(within).parts
        candidates = [Path(within, *parts[:i]) for i in range(1, len(parts) + 1)]
    else:
        candidates = [path.parent, path]
    for candidate in candidates:
        if candidate.is_symlink():
            raise LinkRefused(candidate)


def open_for_write(path: Path, *, within: Path | None = None, append: bool = False, mode: int = 0o644) -> TextIO:
    """Open a text file for writing (or appending) without following a link at its path."""
    path = Path(path)
    refuse_links(path, within)
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC) | _NOFOLLOW | BINARY
    try:
        fd = os.open(path, flags, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # what O_NOFOLLOW reports for a link created since the check
            raise LinkRefused(path) from None
        raise
    return os.fdopen(fd, "a" if append else "w", encoding="utf-8")


@contextmanager
def naming(path: Path) -> Iterator[None]:
    """Give an OSError from writing to an open file (a full disk says only "No space left on
    device") the path it was about, so the user is told which disk filled up."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


def write_file(path: Path, text: str, *, within: Path | None = None, mode: int = 0o644,
               secure: Callable[[Path], None] | None = None) -> None:
    """Replace path with text in one rename. A link at path is refused, not written through.
    secure(temp file) runs before any text is written (k4w.outdir.private gives it the owner-only ACL)."""
    with replacing(path, within=within, mode=mode) as tmp:
        if secure is not None:
            secure(tmp)
        with naming(path), open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)


def write_bytes(path: Path, data: bytes, *, within: Path | None = None, mode: int = 0o644) -> None:
    """Replace path with data in one rename (see replacing)."""
    with replacing(path, within=within, mode=mode) as tmp, naming(path):
        tmp.write_bytes(data)


def move_into(src: Path, dest: Path) -> None:
    """Move a finished file (from another folder, maybe another disk) to dest, whole (see replacing)."""
    with replacing(dest) as tmp:
        try:
            os.replace(src, tmp)   # the same disk: a rename, no copy of a multi-GB file
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            shutil.copyfile(src, tmp)
            Path(src).unlink()


@contextmanager
def replacing(path: Path, *, within: Path | None = None, mode: int = 0o644) -> Iterator[Path]:
    """A new temp file beside path, for the block to fill; when the block ends it is synced and
    renamed over path in one step, so readers see the old file or the new one, never half of one.
    If the block raises, the temp file is deleted and path is untouched.

    The temp name is unique to this caller (mkstemp: O_EXCL, mode 0600 on POSIX): two k4w
    processes writing the same file never write into one temp file, which a fixed name such as
    `<name>.part` would make them do. Every whole-file write in k4w goes through here (a test
    holds the code to it); a read-modify-write of a file another process may update also holds
    its lock (k4w.infra.filelock.updating)."""
    path = Path(path)
    refuse_links(path, within)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with naming(path), open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())   # a full disk often shows only here: the error names path
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    sync_folder(path.parent)


def sync_folder(folder: Path) -> None:
    """Make the renames in folder durable (POSIX). Windows cannot open a folder for fsync; NTFS
    journals the rename itself."""
    if os.name == "nt":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
