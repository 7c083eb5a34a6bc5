"""Keep proxy credentials and per-build passwords out of every log line, plan and error."""

import re

# user:password@ inside any URL, e.g. http://bob:s3cret@proxy:3128
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s:]+(?::[^/@\s]*)?@")

_secrets: set[str] = set()


def register_secret(value: str | None) -> None:
    """Remember a value that must never be printed (e.g. a generated password)."""
    if value and len(value) >= 4:
        _secrets.add(value)


def redact(text: str) -> str:
    text = _URL_CREDENTIALS.sub(r"\g<scheme>***@", text)
    for secret in sorted(_secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
