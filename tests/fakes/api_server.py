"""An HTTPS server on 127.0.0.1 that answers as a test scripts it: a stand-in for an API server that
misbehaves (trickles bytes, redirects, answers a web page), with a throwaway CA so that k4w's
client verifies it as it verifies a real one. Stopped after the test; a handler that trickles
stops when the test ends (stop is set)."""

from __future__ import annotations

import base64
import http.server
import ssl
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from tests.fakes.oci_registry import make_ca_and_server_cert


@dataclass
class Server:
    url: str = ""
    ca_pem: bytes = b""
    requests: list[dict] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)


@contextmanager
def serve(certs: tuple[Path, Path, Path], answer: Callable[[http.server.BaseHTTPRequestHandler, Server], None]):
    """answer(handler, state) writes the whole answer to handler.wfile (status line included)."""
    ca_pem, cert, key = certs
    state = Server(ca_pem=ca_pem.read_bytes())

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _any(self):
            length = int(self.headers.get("Content-Length") or 0)
            state.requests.append({"method": self.command, "path": self.path,
                                   "body": self.rfile.read(length) if length else b""})
            try:
                answer(self, state)
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                pass   # the client gave up, as it should
            self.close_connection = True

        do_GET = do_POST = do_DELETE = do_PATCH = _any

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.block_on_close = False
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"https://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        state.stop.set()
        server.shutdown()
        server.server_close()


def kubeconfig(folder: Path, server: Server, user: dict | None = None) -> Path:
    """An admin kubeconfig (mode 0600) for server, with a token unless user says otherwise."""
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "admin@fake",
           "contexts": [{"name": "admin@fake", "context": {"cluster": "fake", "user": "admin"}}],
           "clusters": [{"name": "fake", "cluster": {"server": server.url,
                                                     "certificate-authority-data": base64.b64encode(server.ca_pem).decode()}}],
           "users": [{"name": "admin", "user": user or {"token": "abcdef.0123456789abcdef"}}]}
    path = folder / "admin.conf"
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


def certificates(folder: Path) -> tuple[Path, Path, Path]:
    return make_ca_and_server_cert(folder)
