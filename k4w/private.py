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
to that: tests/cli/test_private_files.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TextIO

from . import outfiles, proc
from .errors import K4wError

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
