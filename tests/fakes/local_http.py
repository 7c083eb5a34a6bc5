"""A local file server (with Range support) and a forward HTTP proxy that demands basic
credentials, both on 127.0.0.1 and stopped after the test. Stand-ins for a download site and
a corporate proxy: they let the host-side download code run for real without the internet."""

from __future__ import annotations

import base64
import http.server
import threading
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Site:
    files: dict[str, bytes]
    requests: list[dict] = field(default_factory=list)
    honour_range: bool = True
    fail_after: int | None = None  # cut the connection after this many body bytes (once)
    delay: float = 0.0  # seconds each response waits before its body, so parallel requests overlap
    max_concurrent: int = 0  # the most GET requests it served at the same time
    url: str = ""
    _active: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _enter(self) -> None:
        with self._lock:
            self._active += 1
            self.max_concurrent = max(self.max_concurrent, self._active)

    def _leave(self) -> None:
        with self._lock:
            self._active -= 1


@dataclass
class Proxy:
    user: str
    password: str
    requests: list[dict] = field(default_factory=list)
    url: str = ""


def _serve(handler_cls, host: str = "127.0.0.1"):
    server = http.server.ThreadingHTTPServer((host, 0), handler_cls)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


@contextmanager
def site(files: dict[str, bytes], host: str = "127.0.0.1"):
    """host: another loopback address (127.0.0.2) for a site that must not match NO_PROXY's 127.0.0.1."""
    state = Site(files)

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            state._enter()
            try:
                self._get()
            finally:
                state._leave()

        def do_HEAD(self):
            # What `invoke doctor --online` asks: the status and length, no body.
            state.requests.append({"path": self.path, "method": "HEAD", "range": None,
                                   "authorization": self.headers.get("Authorization")})
            body = state.files.get(self.path.split("?")[0])
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()

        def _get(self):
            state.requests.append({"path": self.path, "range": self.headers.get("Range"),
                                   "authorization": self.headers.get("Authorization")})
            if state.delay:
                time.sleep(state.delay)
            body = state.files.get(self.path.split("?")[0])
            if body is None:
                self.send_error(404)
                return
            start = 0
            rng = self.headers.get("Range")
            if rng and state.honour_range and rng.startswith("bytes="):
                start = int(rng[6:].split("-")[0])
                if start >= len(body):
                    # RFC 9110 15.5.17: a 416 names the representation's length.
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(body)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            else:
                self.send_response(200)
            chunk = body[start:]
            self.send_header("Content-Length", str(len(chunk)))
            self.end_headers()
            if state.fail_after is not None:
                cut, state.fail_after = state.fail_after, None
                self.wfile.write(chunk[:cut])
                self.wfile.flush()
                self.connection.shutdown(2)
                return
            self.wfile.write(chunk)

    server, thread = _serve(Handler, host)
    state.url = f"http://{host}:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def proxy(user: str, password: str):
    """Plain-HTTP forward proxy: 407 without the right Proxy-Authorization, else relays the GET."""
    state = Proxy(user, password)
    wanted = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            auth = self.headers.get("Proxy-Authorization")
            state.requests.append({"url": self.path, "authorized": auth == wanted})
            if auth != wanted:
                self.send_response(407)
                self.send_header("Proxy-Authenticate", 'Basic realm="test"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            upstream = urllib.request.Request(self.path)
            if self.headers.get("Range"):
                upstream.add_header("Range", self.headers["Range"])
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            try:
                with opener.open(upstream, timeout=10) as resp:
                    body = resp.read()
                    self.send_response(resp.status)
                    for key in ("Content-Range",):
                        if resp.headers.get(key):
                            self.send_header(key, resp.headers[key])
            except urllib.error.HTTPError as exc:
                body = b""
                self.send_response(exc.code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_HEAD(self):
            auth = self.headers.get("Proxy-Authorization")
            state.requests.append({"url": self.path, "method": "HEAD", "authorized": auth == wanted})
            if auth != wanted:
                self.send_response(407)
                self.send_header("Proxy-Authenticate", 'Basic realm="test"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            try:
                with opener.open(urllib.request.Request(self.path, method="HEAD"), timeout=10) as resp:
                    self.send_response(resp.status)
            except urllib.error.HTTPError as exc:
                self.send_response(exc.code)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server, thread = _serve(Handler)
    state.url = f"http://{user}:{password}@127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
