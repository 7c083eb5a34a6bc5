"""Files that hold a credential: readable and writable by this user only, on every write.

POSIX: mode 0600. Windows ignores the mode bits (os.chmod only toggles read-only), and a new file
inherits its folder's ACL, which on a user's drive usually lets every local account read it. There
the file gets an ACL for the current user and SYSTEM only, with inheritance removed, set by
`icacls` (part of every Windows since Server 2003 SP2): a maintained tool, not a hand-built SDDL.

The protection is set on the new file while it is still empty, before the credential is written
into it, and the file then replaces the old one by a rename, which keeps the new file's ACL or
mode. So a file that existed with looser rights (mode 0644, an inherited ACL) is tightened by
every write, and the credential is never readable by others, not even for a moment.
Every write of a credential goes through write_private or open_private (a test holds the source
to that: tests/outdir/test_private_files.py).

Reading is the other half. A file a user (or a kubeconfig) names is read with read_bounded only: a
regular file of at most a stated size, opened so that a FIFO never blocks, so /dev/zero, a named
pipe or a 2 GB file gives a message, not a hang or a MemoryError. YAML from such a file is loaded
with safe_load_plain, which refuses anchors and aliases (an alias bomb is a few hundred bytes that
expand to gigabytes once anything walks or prints the document). The ACL of a credential file k4w
did not write is read back with others_with_access (icacls on Windows, the mode bits elsewhere).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import TextIO

import yaml

from k4w.infra import documents
from k4w.infra import files as outfiles
from k4w.infra import proc
from k4w.infra.errors import K4wError

MODE = 0o600
# Runs the Windows branch here as well (besides the mode), so that its exact icacls call is
# tested at the process boundary with a stand-in icacls on PATH (tests/fakes/icacls.py).
WINDOWS_ACL_TEST_ENV = "K4W_TEST_WINDOWS_ACL"
# The well-known SID of LocalSystem (Microsoft, "Well-known SIDs": S-1-5-18); icacls reads a
# trustee that starts with '*' as a SID, so the name's language does not matter.
SYSTEM_SID = "*S-1-5-18"
ICACLS_TIMEOUT_S = 60


def _windows() -> bool:
    return os.name == "nt" or bool(os.environ.get(WINDOWS_ACL_TEST_ENV))


def current_user() -> str:
    """DOMAIN\\user of this process, as Windows sets USERDOMAIN and USERNAME at logon (the
    domain is the computer's name for a local account), so icacls grants that very account."""
    user, domain = os.environ.get("USERNAME", ""), os.environ.get("USERDOMAIN", "")
    if not user:
        raise K4wError("USERNAME is not set, so k4w cannot tell whom to give a credential file to")
    return f"{domain}\\{user}" if domain else user


def icacls_argv(path: Path, user: str) -> list[str]:
    """The icacls call that leaves path readable by user and SYSTEM only (icacls /?):
    /inheritance:r removes every inherited entry (a new file has only inherited ones), and
    /grant:r replaces the explicit entries of the trustees named, here with full control (F)."""
    return ["icacls", str(path), "/inheritance:r", "/grant:r", f"{user}:(F)", f"{SYSTEM_SID}:(F)"]


def restrict(path: Path) -> None:
    """Leave path (a file) readable and writable by this user only."""
    path = Path(path)
    os.chmod(path, MODE)
    if _windows():
        result = proc.run(icacls_argv(path, current_user()), timeout=ICACLS_TIMEOUT_S)
        if result.returncode != 0:
            raise K4wError(f"{path}: icacls could not restrict it to {current_user()} and SYSTEM "
                           f"(exit {result.returncode}): {(result.stdout + result.stderr).strip()}")


def write_private(path: Path, text: str, *, within: Path | None = None) -> None:
    """Replace path with text, readable by this user only (see the module's docstring)."""
    outfiles.write_file(path, text, within=within, mode=MODE, secure=restrict)


def open_private(path: Path, *, within: Path | None = None) -> TextIO:
    """A new file at path (never through a link), restricted before anything is written to it."""
    handle = outfiles.open_for_write(path, within=within, mode=MODE)
    try:
        restrict(path)
    except BaseException:
        handle.close()
        raise
    return handle


class UnreadableFile(K4wError):
    """A user-named file k4w will not read; reason says why without the path, for callers that
    name the key the path came from."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"{path} {reason}")
        self.path, self.reason = path, reason


def _size(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 and not limit % (1 << 20) else f"{limit >> 10} KiB"


def _refuse_kind(path: Path, mode: int) -> None:
    if stat.S_ISDIR(mode):
        raise UnreadableFile(path, "is a folder, not a file")
    if not stat.S_ISREG(mode):
        kind = "a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) \
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
        raise UnreadableFile(path, f"is {kind}, not a regular file; give the path of a file")


def read_bounded(path: Path | str, limit: int) -> bytes:
    """The bytes of the regular file at path, refused (UnreadableFile) when it is missing, not a
    regular file or larger than limit bytes.

    The kind is checked before the open (a device is never opened) and again on the open
    descriptor (a path swapped in between is caught). O_NONBLOCK makes the open of a FIFO return
    at once instead of waiting for a writer (POSIX open(2)); on a regular file it changes nothing.
    At most limit + 1 bytes are read, so a file that grows while it is read is refused too."""
    path = Path(path)
    try:
        _refuse_kind(path, os.stat(path).st_mode)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise UnreadableFile(path, "does not exist") from None
    except OSError as exc:
        raise UnreadableFile(path, f"cannot be read: {exc.strerror}") from None
    except ValueError:   # a NUL in the path
        raise UnreadableFile(path, "is not a path a file can have") from None
    try:
        st = os.fstat(fd)
        _refuse_kind(path, st.st_mode)
        if st.st_size > limit:
            raise UnreadableFile(path, f"is larger than {_size(limit)} ({st.st_size} bytes); this is not the file k4w expects here")
        chunks, total = [], 0
        while total <= limit and (chunk := os.read(fd, min(1 << 16, limit + 1 - total))):
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise UnreadableFile(path, f"cannot be read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if total > limit:
        raise UnreadableFile(path, f"grew past {_size(limit)} while it was read")
    return b"".join(chunks)


def safe_load_plain(text: str, source: str, max_depth: int = 32):
    """yaml.safe_load of text with no anchors or aliases and at most max_depth levels of nesting,
    checked on the event stream before anything is built (documents.refuse_unbounded_yaml); K4wError
    names source and the line."""
    try:
        documents.refuse_unbounded_yaml(text, source, max_depth)
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        raise K4wError(f"{source}: {where}malformed YAML: {getattr(exc, 'problem', None) or type(exc).__name__}") from None


# One access control entry as `icacls FILE` lists it (icacls /?): TRUSTEE:(flag)...(rights), e.g.
# "BUILTIN\Users:(I)(RX)" or "WORKSTATION\alice:(F)"; the first line carries the file's path before it.
_ACE = re.compile(r"(?P<trustee>[^:()]+):(?P<flags>(?:\([^()]*\))+)")
# Trustees that may hold a credential file besides its owner: what ssh on Windows allows too
# (LocalSystem and the local Administrators group), as icacls names them (English Windows) or
# their well-known SIDs (Microsoft, "Well-known SIDs": S-1-5-18, S-1-5-32-544).
_TRUSTED = {"nt authority\\system", "builtin\\administrators", SYSTEM_SID.lower(), "*s-1-5-32-544"}


def acl_entries(listing: str, path: Path) -> list[str]:
    """The entries of `icacls FILE`'s listing, each as TRUSTEE:(...)(...): the first line after the
    path, then one a line up to the blank line before the (localized) summary. A line that is not
    an entry refuses the whole listing: an entry skipped unread could be the one that lets others in."""
    lines = listing.splitlines()
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines or not lines[0].startswith(str(path)):
        raise K4wError(f"{path}: icacls did not list this file's access rights: {listing.strip()[:300]}")
    lines[0] = lines[0][len(str(path)):]
    entries = []
    for line in lines:
        line = line.strip()
        if not line:
            break
        if not _ACE.fullmatch(line):
            raise K4wError(f"{path}: icacls listed an access right k4w cannot read: {line!r}")
        entries.append(line)
    return entries


def others_with_access(path: Path) -> list[str]:
    """What lets an account other than this user (and SYSTEM and Administrators) at path: the
    icacls entries that grant it on Windows, the group and other mode bits elsewhere; [] if none."""
    path = Path(path)
    found = []
    if os.name != "nt":
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if mode & 0o077:
            found.append(f"mode {mode:04o}")
    if _windows():
        result = proc.run(["icacls", str(path)], timeout=ICACLS_TIMEOUT_S)
        if result.returncode != 0:
            raise K4wError(f"{path}: icacls could not list who may read it (exit {result.returncode}): "
                           f"{(result.stdout + result.stderr).strip()}")
        me = current_user().lower()
        for entry in acl_entries(result.stdout, path):
            m = _ACE.fullmatch(entry)
            trustee, flags = m["trustee"].strip(), m["flags"].upper()
            if "(DENY)" in flags or trustee.lower() in _TRUSTED | {me}:
                continue
            found.append(entry)
    return found


def tighten_hint(path: Path) -> str:
    """The command that gives path the rights write_private gives a file."""
    if _windows():
        # Quoted where PowerShell would read the parentheses (user:(F)) or cmd a space: the same line works in both.
        return " ".join(f'"{a}"' if set(a) & set(" ()") else a for a in icacls_argv(path, current_user()))
    return f"chmod 600 {path}"
