"""Per-build secrets of --out: the Administrator password of each Windows box (rotated by every
build) and the Windows box user's (made once per --out), owner-only files under OUT/secrets/,
each value registered for redaction."""

from __future__ import annotations

import json
import secrets as _secrets
import string
from pathlib import Path

from k4w.infra import files as outfiles

from k4w.outdir import private

from k4w.infra import ui
from k4w.infra.errors import K4wError
from k4w.infra.redact import register_secret

# Stands in for per-build secrets when the up-to-date stamp is computed.
PLACEHOLDER_SECRETS = {"admin_password": "k4w-stamp-placeholder", "box_user_password": "k4w-stamp-placeholder"}


def secrets_path(out: Path, box: str) -> Path:
    return out / "secrets" / f"{box}.json"


# The Windows box user's ("vagrant") password: random, made once per --out folder and kept, unlike
# the Administrator's, which each build rotates. A rotation would lock Vagrant out of every VM made
# from an earlier build of the box (they keep the password they were built with), and the
# Administrator's needs none: it is disabled when its build ends. Vagrant reads it from this file
# (vagrant/Vagrantfile, through cluster.json's box_user_secrets): it is never on a command line
# nor in the box's own Vagrantfile.
BOX_USER_SECRETS = "box-user.json"


def box_user_secrets_path(out: Path) -> Path:
    return Path(out) / "secrets" / BOX_USER_SECRETS


def load_box_user_password(out: Path) -> str:
    out = Path(out)
    path = box_user_secrets_path(out)
    outfiles.refuse_links(path, out)
    password = None
    if path.exists():
        try:
            password = json.loads(path.read_text(encoding="utf-8")).get("password")
        except (OSError, UnicodeDecodeError, ValueError, AttributeError):
            password = None
        if not isinstance(password, str) or not password:
            # Replacing it would lock Vagrant out of the VMs made with the old one: say so, stop.
            raise K4wError(f"{path} holds no readable box user password; restore it, or delete it and rebuild the "
                           "Windows boxes and their VMs (invoke cluster-down, build-windows, cluster-up)")
    else:
        password = _new_secrets()["admin_password"]
    # Written even when it exists, like load_secrets: a file left readable by others is tightened.
    private.write_private(path, json.dumps({"password": password}), within=out)
    register_secret(password)
    return password


def load_secrets(out: Path, box: str) -> dict:
    """Per-build secrets of a box, created on first use and kept (0600) until a build rotates them.

    An unreadable, empty or corrupt file (a disk that filled up mid-write under an older k4w)
    is treated as absent, with a warning naming it: a new password is made, as a build would.
    """
    out = Path(out)
    path = secrets_path(out, box)
    outfiles.refuse_links(path, out)
    data = _read_secrets(path) if path.exists() else None
    if data is None:
        data = _new_secrets()
    # Written even when it exists: a file left readable by others (mode 0644, an inherited
    # Windows ACL) is tightened by every render (k4w.private).
    private.write_private(path, json.dumps(data), within=out)
    for value in data.values():
        register_secret(value)
    return data


def _read_secrets(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        why = getattr(exc, "strerror", None) or type(exc).__name__
        ui.say(f"warning: {path} is unreadable ({why}); it is replaced by new secrets", style="yellow")
        return None
    if not isinstance(data, dict) or not isinstance(data.get("admin_password"), str) or not data["admin_password"]:
        ui.say(f"warning: {path} holds no admin_password; it is replaced by new secrets", style="yellow")
        return None
    return data


def _new_secrets() -> dict:
    alphabet = string.ascii_letters + string.digits
    # Windows complexity rules want upper, lower and digit; 24 random chars plus a fixed tail gives all three.
    return {"admin_password": "".join(_secrets.choice(alphabet) for _ in range(24)) + "aA1"}


def rotate_secrets(out: Path, box: str) -> dict:
    """New secrets for a box, replacing the old file in one rename (never a moment without one)."""
    out = Path(out)
    data = _new_secrets()
    private.write_private(secrets_path(out, box), json.dumps(data), within=out)
    for value in data.values():
        register_secret(value)
    return data
