"""A small Kubernetes API client over HTTPS, from an admin kubeconfig: no kubectl on the host.

Used for a cluster k4w did not create (cluster.existing): reading its facts, creating a bootstrap
token and applying the few objects the Windows workers need. It speaks JSON to the REST paths of
the core and RBAC APIs and nothing else.

Credentials: the kubeconfig's CA is the only trust anchor (never the system store, never
insecure-skip-tls-verify); the client certificate and key, or the bearer token, come from the
kubeconfig and never appear on a command line or in a log. Python's ssl module loads a client
certificate from files only, so inline *-data is written into a private temporary folder (mode
0700, files 0600), loaded and deleted at once. A kubeconfig that others may read is refused, as ssh
refuses such a private key.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import stat
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import yaml

from . import private
from .errors import K4wError
from .redact import register_secret

TIMEOUT_S = 30          # one API request; an API server that does not answer in 30 s is unusable for a join
MAX_ANSWER = 16 << 20   # 16 MiB: a node list of a large cluster fits; a runaway answer is refused


class ApiError(K4wError):
    def __init__(self, message: str, status: int | None = None, body: dict | None = None):
        super().__init__(message)
        self.status = status
        self.body = body or {}


@dataclass(frozen=True)
class Credentials:
    server: str                 # https://host:port
    ca_pem: bytes
    cert_pem: bytes | None = None
    key_pem: bytes | None = None
    token: str | None = None
    source: str = "kubeconfig"

    @property
    def host_port(self) -> str:
        """host:port of the API server, as a kubeadm JoinConfiguration's apiServerEndpoint takes it."""
        parsed = urllib.parse.urlsplit(self.server)
        host, port = parsed.hostname or "", parsed.port or 443
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_private(path: Path) -> None:
    """Refuse a kubeconfig another account could read (POSIX; on Windows the mode bits mean nothing
    and the user's profile folder's ACL decides)."""
    if os.name == "nt":
        return
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise K4wError(f"{path} holds cluster-admin credentials but is readable by other accounts (mode "
                       f"{stat.S_IMODE(mode):04o}); run: chmod 600 {path}")


def _read_file(base: Path, value: str, what: str) -> bytes:
    path = Path(value).expanduser()
    path = path if path.is_absolute() else base / path
    try:
        return path.read_bytes()
    except OSError as exc:
        raise K4wError(f"the kubeconfig's {what} {path} cannot be read: {exc.strerror}") from None


def _data_or_file(entry: dict, key: str, base: Path, what: str) -> bytes | None:
    if entry.get(f"{key}-data"):
        try:
            return base64.b64decode(entry[f"{key}-data"], validate=True)
        except ValueError:
            raise K4wError(f"the kubeconfig's {key}-data is not base64") from None
    if entry.get(key):
        return _read_file(base, entry[key], what)
    return None


def load_kubeconfig(path: str | Path) -> Credentials:
    """The current context's server, CA and user credentials; refused with the reason when the file
    is missing, unreadable, readable by others or uses what this client does not do (exec plugins,
    skipped TLS verification)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise K4wError(f"cluster.existing: kubeconfig {path} does not exist (give the admin kubeconfig of your cluster, "
                       "e.g. a copy of /etc/kubernetes/admin.conf from a control-plane node)")
    if not path.is_file():
        raise K4wError(f"cluster.existing: {path} is not a file")
    check_private(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise K4wError(f"cluster.existing: kubeconfig {path} cannot be read: {exc.strerror}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise K4wError(f"cluster.existing: {path} is not a kubeconfig (YAML: {exc})") from None
    if not isinstance(doc, dict) or doc.get("kind") != "Config":
        raise K4wError(f"cluster.existing: {path} is not a kubeconfig (no kind: Config)")

    def named(section: str, name: str | None) -> dict:
        for item in doc.get(section) or []:
            if isinstance(item, dict) and item.get("name") == name:
                return item.get(section.rstrip("s")) or {}
        raise K4wError(f"cluster.existing: {path} has no {section.rstrip('s')} named {name!r}")

    context = named("contexts", doc.get("current-context"))
    cluster, user = named("clusters", context.get("cluster")), named("users", context.get("user"))
    server = cluster.get("server") or ""
    if not server.startswith("https://"):
        raise K4wError(f"cluster.existing: the server of {path} is {server!r}; k4w talks to an API server over https only")
    if cluster.get("insecure-skip-tls-verify"):
        raise K4wError(f"cluster.existing: {path} skips TLS verification; give it the cluster's CA "
                       "(certificate-authority-data) so k4w can check whom it sends the join token to")
    base = path.parent
    ca = _data_or_file(cluster, "certificate-authority", base, "CA")
    if not ca:
        raise K4wError(f"cluster.existing: {path} names no certificate-authority for its cluster")
    if user.get("exec") or user.get("auth-provider"):
        raise K4wError(f"cluster.existing: {path} gets its credentials from an exec plugin or auth provider; "
                       "k4w needs a kubeconfig with a client certificate or a token (kubeadm's admin.conf)")
    cert = _data_or_file(user, "client-certificate", base, "client certificate")
    key = _data_or_file(user, "client-key", base, "client key")
    token = user.get("token") or (_read_file(base, user["tokenFile"], "token file").decode().strip() if user.get("tokenFile") else None)
    if token:
        register_secret(token)
    if not ((cert and key) or token):
        raise K4wError(f"cluster.existing: {path} has no client certificate and key and no token for its user")
    return Credentials(server=server.rstrip("/"), ca_pem=ca, cert_pem=cert, key_pem=key, token=token, source=str(path))


def _ssl_context(creds: Credentials) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=creds.ca_pem.decode("ascii", "replace"))
    if creds.cert_pem and creds.key_pem:
        with tempfile.TemporaryDirectory(prefix="k4w-client-") as folder:   # mode 0700
            cert, key = Path(folder) / "client.crt", Path(folder) / "client.key"
            for path, data in ((cert, creds.cert_pem), (key, creds.key_pem)):
                private.write_private(path, data.decode("ascii", "replace"))   # PEM is ASCII
            ctx.load_cert_chain(cert, key)
    return ctx


class Client:
    """JSON requests to one API server. Every method raises ApiError naming the request."""

    def __init__(self, creds: Credentials, bearer: str | None = None):
        self.creds = creds
        self._parsed = urllib.parse.urlsplit(creds.server)
        self._ssl = _ssl_context(creds) if bearer is None else ssl.create_default_context(
            ssl.Purpose.SERVER_AUTH, cadata=creds.ca_pem.decode("ascii", "replace"))
        self._bearer = bearer if bearer is not None else creds.token

    def request(self, method: str, path: str, body: dict | None = None, content_type: str = "application/json") -> dict:
        conn = http.client.HTTPSConnection(self._parsed.hostname, self._parsed.port or 443, context=self._ssl, timeout=TIMEOUT_S)
        headers = {"Accept": "application/json"}
        if self._bearer:
            headers["Authorization"] = f"Bearer {self._bearer}"
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        where = f"{method} {self.creds.server}{path}"
        try:
            conn.request(method, (self._parsed.path or "") + path, body=payload, headers=headers)
            answer = conn.getresponse()
            raw = answer.read(MAX_ANSWER + 1)
        except ssl.SSLCertVerificationError as exc:
            raise ApiError(f"{where}: the API server's certificate does not verify against the kubeconfig's CA ({exc.verify_message})") from None
        except (OSError, http.client.HTTPException) as exc:
            raise ApiError(f"{where}: {exc}") from None
        finally:
            conn.close()
        if len(raw) > MAX_ANSWER:
            raise ApiError(f"{where}: the answer is larger than {MAX_ANSWER >> 20} MiB")
        try:
            data = json.loads(raw) if raw else {}
        except RecursionError:   # Python's decoder recurses per level: one line, not a traceback
            raise ApiError(f"{where}: HTTP {answer.status}, the answer is JSON nested too deeply to read", status=answer.status) from None
        except ValueError:
            data = {"message": raw[:300].decode("utf-8", "replace")}
        if answer.status >= 400 and not isinstance(data, dict):
            data = {"message": raw[:300].decode("utf-8", "replace")}
        if answer.status >= 400:
            raise ApiError(f"{where}: HTTP {answer.status} {data.get('reason', '')}: {data.get('message', '')}".rstrip(": "),
                           status=answer.status, body=data)
        return data

    def get(self, path: str) -> dict:
        return self.request("GET", path)

    def get_optional(self, path: str) -> dict | None:
        """The object, or None when the API server says 404 Not Found."""
        try:
            return self.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, path: str, body: dict) -> dict:
        return self.request("POST", path, body)

    def delete(self, path: str) -> bool:
        """True when it deleted the object, False when it was already gone."""
        try:
            self.request("DELETE", path)
            return True
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
