"""One escaping filter per target format. Templates never interpolate a raw value."""

from __future__ import annotations

import base64
import json as _json
import shlex
from xml.sax.saxutils import escape as _xml_escape

import yaml as _yaml


def json(value) -> str:
    """A complete JSON value, quotes included."""
    return _json.dumps(value)


def xml(value) -> str:
    """XML text or attribute content (quotes escaped too, so it is safe in both)."""
    return _xml_escape(str(value), {'"': "&quot;", "'": "&apos;"})


def sh(value) -> str:
    """One POSIX shell word."""
    return shlex.quote(str(value))


def ps(value) -> str:
    """A PowerShell single-quoted string literal: nothing inside is expanded."""
    text = str(value)
    # PowerShell treats the typographic quotes U+2018/2019/201A/201B as quote characters too.
    for quote in ("'", "\u2018", "\u2019", "\u201a", "\u201b"):
        text = text.replace(quote, quote * 2)
    return f"'{text}'"


def yaml(value) -> str:
    """A YAML flow value (scalar, list or mapping) on one line."""
    dumped = _yaml.safe_dump(value, default_flow_style=True, width=1 << 16, allow_unicode=True)
    return dumped.removesuffix("\n...\n").strip()


def unattend_password(value: str, suffix: str) -> str:
    """Windows Setup's 'PlainText=false' form: base64 of UTF-16LE(password + suffix).

    The suffix is 'Password' for <Password> of accounts and AutoLogon and
    'AdministratorPassword' for <AdministratorPassword> (Windows SIM behaviour). This is an
    encoding, not encryption: it keeps the password out of casual view, nothing more.
    """
    return base64.b64encode((value + suffix).encode("utf-16-le")).decode("ascii")


FILTERS = {"json": json, "xml": xml, "sh": sh, "ps": ps, "yaml": yaml, "unattend_password": unattend_password}
