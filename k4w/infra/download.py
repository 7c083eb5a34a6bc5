"""Download one component on the host, through the cluster's proxy, and verify it.

Used by `invoke pin` (which has no checksum yet and reports the one it measured) and by the
host-side component cache. A file only ever appears under its final name after its checksum
was checked; a mismatch deletes what was downloaded. A partial download is kept as
`<name>.part` and resumed with an HTTP Range request when the server allows it.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from k4w.infra import filelock
from k4w.infra import noproxy
from k4w.infra.errors import K4wError
from k4w.infra.redact import redact

if TYPE_CHECKING:  # annotations only: infra sits below derive, which makes the Proxy
    from k4w.derive.values import Proxy

# 1 MiB reads: progress stays smooth on slow proxies without a syscall per few KB.
CHUNK = 1024 * 1024
TIMEOUT_S = 60  # per socket operation, not for the whole download
ALGORITHMS = ("sha256", "sha512")

Progress = Callable[[int, int | None], None]  # (bytes so far, total or None)


class DownloadError(K4wError):
    """A download failed or did not match its checksum; the message names the URL (redacted).
    status: the server's HTTP status when it refused (a registry client answers a 401)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Expected:
    algorithm: str  # sha256 | sha512
    value: str

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"unsupported checksum algorithm {self.algorithm}")


@dataclass(frozen=True)
class Downloaded:
    path: Path
    size: int
    sha256: str
    sha512: str
    fetched_bytes: int  # 0 when the file was already complete


def opener(url: str, proxy: Proxy | None, context: ssl.SSLContext | None = None) -> urllib.request.OpenerDirector:
    """An opener that uses exactly the cluster's proxy (never the host's environment),
    honouring its NO_PROXY list, with basic credentials from the proxy URL's userinfo. context: the
    TLS trust of a server whose CA the config names (a registry mirror's `ca`), else the system's."""
    handlers: list[urllib.request.BaseHandler] = []
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    target = urllib.parse.urlsplit(url)
    port = str(target.port or noproxy.DEFAULT_PORTS.get(target.scheme, ""))
    chosen = None
    if proxy and proxy.enabled and not noproxy.bypasses(target.hostname or "", port, proxy.no_proxy):
        chosen = proxy.https if url.startswith("https:") else proxy.http
    if chosen:
        parts = urllib.parse.urlsplit(chosen)
        bare = f"{parts.scheme}://{parts.hostname}:{parts.port or 80}"
        handlers.append(urllib.request.ProxyHandler({"http": bare, "https": bare}))
        if parts.username is not None:
            handlers.append(_ProxyAuth(urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password or "")))
    else:
        handlers.append(urllib.request.ProxyHandler({}))
    return urllib.request.build_opener(*handlers)


class _ProxyAuth(urllib.request.BaseHandler):
    """Sends Proxy-Authorization up front: corporate proxies often answer 407 without a
    usable challenge, and urllib's challenge-driven handler then gives up."""

    handler_order = 400

    def __init__(self, user: str, password: str):
        self.header = basic_auth(user, password)

    def http_request(self, req):
        req.add_unredirected_header("Proxy-Authorization", self.header)
        return req

    https_request = http_request


def basic_auth(user: str, password: str) -> str:
    """The value of an Authorization (or Proxy-Authorization) header for Basic auth (RFC 7617)."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def request(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> urllib.request.Request:
    """A request for url; credentials in its userinfo (an internal mirror's, downloads.mirror) or in
    headers (a registry's token) go in headers that a redirect to another host does not carry along."""
    parts = urllib.parse.urlsplit(url)
    sent = dict(headers or {})
    if parts.username is not None:
        url = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
        sent["Authorization"] = basic_auth(urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password or ""))
    made = urllib.request.Request(url, headers={"User-Agent": "k4w"}, method=method)
    for name, value in sent.items():
        made.add_unredirected_header(name, value)
    return made


def hash_file(path: Path) -> tuple[str, str]:
    """(sha256, sha512) of a file in hex, read once (a missing file hashes as empty: a .part not begun)."""
    h256, h512 = hashlib.sha256(), hashlib.sha512()
    if path.is_file():
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(CHUNK), b""):
                h256.update(block)
                h512.update(block)
    return h256.hexdigest(), h512.hexdigest()


def download(url: str, dest: Path, expected: Expected | None, proxy: Proxy | None = None,
             progress: Progress | None = None, on_wait: Callable[[], None] | None = None, *,
             headers: dict[str, str] | None = None, context: ssl.SSLContext | None = None) -> Downloaded:
    """Fetch url to dest (resuming dest.part), verify, then rename into place.

    One process at a time per file (a lock file beside it, k4w.infra.filelock): two fetches resuming
    the same .part would append to it in turn. on_wait is told when this one waits for another.
    expected None is for `invoke pin` only: the caller shows the measured checksum to the user.
    headers: sent to url's host only (a registry's Authorization); context: opener()'s.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with filelock.held(dest.with_name(dest.name + ".lock"), on_wait=on_wait):
        return _download_locked(url, dest, expected, proxy, progress, headers, context)


def _download_locked(url: str, dest: Path, expected: Expected | None, proxy: Proxy | None,
                     progress: Progress | None, headers: dict[str, str] | None,
                     context: ssl.SSLContext | None) -> Downloaded:
    if dest.is_file():
        sha256, sha512 = hash_file(dest)
        if expected is None or matches(expected, sha256, sha512):
            return Downloaded(dest, dest.stat().st_size, sha256, sha512, 0)
        dest.unlink()  # a stale or corrupt copy: fetch it again
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.is_file() else 0
    req = request(url, headers)
    if have:
        req.add_header("Range", f"bytes={have}-")
    fetched = 0
    try:
        with opener(url, proxy, context).open(req, timeout=TIMEOUT_S) as resp:
            if have and resp.status != 206:
                have = 0  # the server ignored the Range: start over rather than append a second copy
            length = resp.headers.get("Content-Length")
            total = have + int(length) if length and length.isdigit() else None
            with open(part, "ab" if have else "wb") as fh:
                while block := resp.read(CHUNK):
                    fh.write(block)
                    fetched += len(block)
                    if progress:
                        progress(have + fetched, total)
            if total is not None and have + fetched < total:
                # http.client returns a short body without an error when the peer closes early.
                raise OSError(f"connection closed after {have + fetched} of {total} bytes")
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have and _whole(part, have, expected, exc.headers.get("Content-Range")):
            pass  # the .part already holds the whole file (stopped after its last block): use it
        else:
            if exc.code == 416 and have:
                part.unlink(missing_ok=True)  # our partial file is longer than the resource
            raise DownloadError(f"{redact(url)}: HTTP {exc.code} {exc.reason}", status=exc.code) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise DownloadError(f"{redact(url)}: {redact(str(reason))} (partial download kept as {part.name}; run again to resume)") from None
    # Hashed from the disk, not from what this process believes it wrote: what is verified is
    # exactly what is used.
    sha256, sha512 = hash_file(part)
    if expected is not None and not matches(expected, sha256, sha512):
        part.unlink(missing_ok=True)
        got = sha256 if expected.algorithm == "sha256" else sha512
        raise DownloadError(f"{redact(url)}: {expected.algorithm} mismatch: expected {expected.value}, got {got}; the file was deleted")
    os.replace(part, dest)
    return Downloaded(dest, dest.stat().st_size, sha256, sha512, fetched)


def _whole(part: Path, have: int, expected: Expected | None, content_range: str | None) -> bool:
    """Whether a .part answered 416 (its Range starts at or past the end) is the whole file: it
    matches the checksum, or with none (`invoke pin`) the server names its length
    (RFC 9110 15.5.17: a 416 carries Content-Range: bytes */<length>) and that is the part's."""
    if expected is not None:
        return matches(expected, *hash_file(part))
    unsatisfied = re.fullmatch(r"bytes \*/(\d+)", (content_range or "").strip())
    return bool(unsatisfied) and int(unsatisfied.group(1)) == have


def matches(expected: Expected, sha256: str, sha512: str) -> bool:
    return (sha256 if expected.algorithm == "sha256" else sha512) == expected.value.lower()
