"""Keep proxy credentials and per-build passwords out of every log line, plan and error."""

import re

# user:password@ inside any URL, e.g. http://bob:s3cret@proxy:3128
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s:]+(?::[^/@\s]*)?@")

# An HTTP credential header, as Packer, curl -v or a proxy log prints it, e.g.
# "Proxy-Authorization: Basic Ym9iOnMzY3JldA==" (base64 is an encoding, not a secret-keeper).
_AUTH_HEADER = re.compile(r"(?i)\b((?:proxy-)?authorization\s*[:=]\s*)(basic|bearer|digest|ntlm|negotiate)\s+[^\s\"',]+")

_secrets: set[str] = set()


def register_secret(value: str | None) -> None:
    """Remember a value that must never be printed (e.g. a generated password)."""
    if value and len(value) >= 4:
        _secrets.add(value)


def redact(text: str) -> str:
    text = _URL_CREDENTIALS.sub(r"\g<scheme>***@", text)
    text = _AUTH_HEADER.sub(r"\1\2 ***", text)
    for secret in sorted(_secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
