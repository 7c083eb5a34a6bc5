"""A tiny OCI registry on 127.0.0.1 over TLS, the stand-in for a company's image mirror.

It serves one single-layer linux/amd64 image under the names it is given (`published`, the
repository:tag names an upstream publishes, as a pull-through cache resolves only those), or under
every name when given none, by the routes of the OCI
Distribution Specification v1.0.0 that a pull uses: `GET /v2/`, `HEAD|GET /v2/<name>/manifests/<ref>`
and `GET /v2/<name>/blobs/<digest>`. With credentials set it answers 401 with a Basic challenge
(distribution spec "Authentication", RFC 7617) to any request without them. Every request is
recorded (method, path, query, user), which is what the tests read: the pull went here.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import http.server
import io
import json
import ssl
import subprocess
import tarfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
# The one file in the image's layer: a pulled image is recognisable by it.
MARKER_FILE = "k4w-mirror-test"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _image() -> dict[str, bytes]:
    """{digest: blob} of config and layer, and the manifest under "manifest"."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        body = b"served by tests/fakes/oci_registry.py\n"
        info = tarfile.TarInfo(MARKER_FILE)
        info.size, info.mode, info.mtime = len(body), 0o644, 0
        tar.addfile(info, io.BytesIO(body))
    layer_tar = raw.getvalue()
    layer = gzip.compress(layer_tar, mtime=0)
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                         "rootfs": {"type": "layers", "diff_ids": [_digest(layer_tar)]}}).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": CONFIG_TYPE, "digest": _digest(config), "size": len(config)},
        "layers": [{"mediaType": LAYER_TYPE, "digest": _digest(layer), "size": len(layer)}],
    }).encode()
    return {_digest(config): config, _digest(layer): layer, "manifest": manifest}


@dataclass
class Registry:
    url: str = ""
    host: str = ""  # 127.0.0.1:<port>
    requests: list[dict] = field(default_factory=list)
    blobs: dict[str, bytes] = field(default_factory=_image)

    def pulled(self, repository: str) -> list[dict]:
        """The authenticated manifest requests for one repository."""
        return [r for r in self.requests if r["path"].startswith(f"/v2/{repository}/manifests/") and r["user"]]


def make_ca_and_server_cert(folder: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1 signed by it (openssl, which every CI
    image has): (ca.pem, server.pem, server.key)."""
    ca_key, ca_pem = folder / "ca.key", folder / "ca.pem"
    key, csr, pem = folder / "server.key", folder / "server.csr", folder / "server.pem"
    ext = folder / "server.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                   "extendedKeyUsage=serverAuth\n")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca_pem),
            "-days", "2", "-subj", "/CN=k4w test mirror CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", "/CN=127.0.0.1")
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca_pem), "-CAkey", str(ca_key), "-CAcreateserial",
            "-out", str(pem), "-days", "2", "-extfile", str(ext))
    return ca_pem, pem, key


@contextmanager
def serve(cert: Path, key: Path, user: str | None = None, password: str | None = None,
          published: set[str] | None = None):
    """published: the "repository:tag" names to answer; any other name is 404 MANIFEST_UNKNOWN, as
    a mirror answers when its upstream has no such image. None answers every name."""
    state = Registry()
    repositories = {name.rsplit(":", 1)[0] for name in published} if published is not None else None
    expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode() if user else None

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _reply(self, status: int, body: bytes = b"", headers: dict | None = None, head: bool = False) -> None:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Docker-Distribution-API-Version", "registry/2.0")
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def _handle(self, head: bool) -> None:
            url = urlsplit(self.path)
            given = self.headers.get("Authorization")
            authed = expected is None or given == expected
            state.requests.append({"method": self.command, "path": url.path, "query": parse_qs(url.query),
                                   "user": (user if given == expected else None) if expected else "anonymous"})
            if not authed:
                self._reply(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}',
                            {"WWW-Authenticate": 'Basic realm="k4w-test-mirror"', "Content-Type": "application/json"}, head)
                return
            if url.path == "/v2/":
                self._reply(200, b"{}", {"Content-Type": "application/json"}, head)
                return
            name, sep, ref = url.path.removeprefix("/v2/").rpartition("/manifests/")
            if sep and name:
                manifest = state.blobs["manifest"]
                unknown = published is not None and (name not in repositories if ref.startswith("sha256:")
                                                     else f"{name}:{ref}" not in published)
                if unknown or (ref.startswith("sha256:") and ref != _digest(manifest)):
                    self._reply(404, b"", {}, head)
                    return
                self._reply(200, manifest, {"Content-Type": MANIFEST_TYPE, "Docker-Content-Digest": _digest(manifest)}, head)
                return
            name, sep, digest = url.path.removeprefix("/v2/").rpartition("/blobs/")
            if sep and name and digest in state.blobs and (repositories is None or name in repositories):
                blob = state.blobs[digest]
                self._reply(200, blob, {"Content-Type": "application/octet-stream", "Docker-Content-Digest": digest}, head)
                return
            self._reply(404, b"", {}, head)

        def do_GET(self):  # noqa: N802 (http.server's naming)
            self._handle(head=False)

        def do_HEAD(self):  # noqa: N802
            self._handle(head=True)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    state.host = f"127.0.0.1:{server.server_address[1]}"
    state.url = f"https://{state.host}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
