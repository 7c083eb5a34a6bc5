"""One escaping filter per target format. Templates never interpolate a raw value."""

from __future__ import annotations

import base64
import json as _json
import shlex
from xml.sax.saxutils import escape as _xml_escape

import yaml as _yaml

from k4w.infra.packer_hcl import literal as _hcl_literal_value


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


class _QuotingDumper(_yaml.SafeDumper):
    """Writes every string double-quoted. PyYAML quotes only what ITS resolver would misread, but
    the readers of our YAML resolve more: go-yaml v2 (kubeadm, kubelet, kube-proxy, flanneld)
    reads 08 as the float 8 and 0o10 as the int 8 through strconv (ParseInt base 0, ParseFloat),
    both of which PyYAML leaves plain; YAML 1.1 resolvers read y, n, on, off, ~, .inf, 1e3 as
    bools, nulls and numbers. A quoted scalar is a string for every resolver."""


_QuotingDumper.add_representer(str, lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", text, style='"'))


def yaml(value) -> str:
    """A YAML flow value (scalar, list or mapping) on one line; every string in it double-quoted,
    numbers and booleans plain. The one filter every value in a YAML template goes through
    (k4w.validate.yaml_template_rules enforces it)."""
    dumped = _yaml.dump(value, Dumper=_QuotingDumper, default_flow_style=True, width=1 << 16, allow_unicode=True)
    return dumped.removesuffix("\n...\n").strip()


def unattend_password(value: str, suffix: str) -> str:
    """Windows Setup's 'PlainText=false' form: base64 of UTF-16LE(password + suffix).

    The suffix is 'Password' for <Password> of accounts and AutoLogon and
    'AdministratorPassword' for <AdministratorPassword> (Windows SIM behaviour). This is an
    encoding, not encryption: it keeps the password out of casual view, nothing more.
    """
    return base64.b64encode((value + suffix).encode("utf-16-le")).decode("ascii")


FILTERS = {"json": json, "xml": xml, "sh": sh, "ps": ps, "yaml": yaml, "hcl": _hcl_literal_value, "unattend_password": unattend_password}
