"""A small Kubernetes API client over HTTPS, from an admin kubeconfig: no kubectl on the host.

Used for a cluster k4w did not create (cluster.existing): reading its facts, creating a bootstrap
token and applying the few objects the Windows workers need. It speaks JSON to the REST paths of
the core and RBAC APIs and nothing else.

Credentials: the kubeconfig's CA is the only trust anchor (never the system store, never
insecure-skip-tls-verify); the client certificate and key, or the bearer token, come from the
kubeconfig and never appear on a command line or in a log. Python's ssl module loads a client
certificate from files only, so inline *-data is written into a private temporary folder (mode
0700, files 0600), loaded and deleted at once. A kubeconfig, client key or token file that others may read is
refused, as ssh refuses such a private key (the ACL on Windows).

Hostile input: every file is read bounded (k4w.outdir.private.read_bounded; YAML without aliases), each
request has one deadline for the whole of it, and only a 2xx JSON object is an answer: a redirect
or a web page from something in front of the API server is refused, never followed.
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import ssl
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import yaml

from k4w.outdir import private
from k4w.infra.errors import K4wError
from k4w.infra.redact import register_secret

TIMEOUT_S = 30          # one API request, whole (connect, TLS, send, every read): an API server that does not
                        # answer in 30 s is unusable for a join, and a trickle of bytes must not hold k4w forever
MAX_ANSWER = 16 << 20   # 16 MiB: a node list of a large cluster fits; a runaway answer is refused
# Sizes of the files a kubeconfig names, and of the kubeconfig: far above what kubeadm writes (admin.conf
# is ~6 KiB, a CA bundle a few hundred KiB), far below what takes a YAML parser minutes or fills memory.
MAX_KUBECONFIG = 1 << 20
MAX_PEM = 1 << 20
MAX_TOKEN = 64 << 10


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
    # Where each PEM came from, for a TLS error that says which field to fix:
    # "certificate-authority-data of /home/u/.kube/admin.conf" or "certificate-authority /etc/ca.crt".
    ca_from: str = "certificate-authority"
    cert_from: str = "client-certificate"
    key_from: str = "client-key"

    @property
    def host_port(self) -> str:
        """host:port of the API server, as a kubeadm JoinConfiguration's apiServerEndpoint takes it."""
        parsed = urllib.parse.urlsplit(self.server)
        host, port = parsed.hostname or "", parsed.port or 443
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_private(path: Path, what: str = "holds cluster-admin credentials") -> None:
    """Refuse a credential file another account could read or change, as ssh refuses such a private
    key: the mode bits on POSIX, the ACL on Windows (read with icacls; the user, SYSTEM and
    Administrators may hold it, as ssh on Windows allows)."""
    others = private.others_with_access(path)
    if others:
        raise K4wError(f"{path} {what} but is readable by other accounts ({', '.join(others)}); run: "
                       f"{private.tighten_hint(path)}")


def _short(value) -> str:
    """A value from the kubeconfig in a message, never longer than a line."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _read_file(base: Path, value, key: str, source: Path, limit: int) -> tuple[bytes, Path]:
    if not isinstance(value, str) or "\0" in value:
        raise K4wError(f"cluster.existing: {source}: {key} must be a file path, not {_short(value)}")
    path = Path(value).expanduser()
    path = path if path.is_absolute() else base / path
    try:
        return private.read_bounded(path, limit), path
    except private.UnreadableFile as exc:
        raise K4wError(f"cluster.existing: the {key} of {source}, {path}, {exc.reason}") from None


def _data_or_file(entry: dict, key: str, base: Path, source: Path, limit: int) -> tuple[bytes | None, str]:
    """The PEM of key (inline key-data, else the file key names) and where it came from."""
    if entry.get(f"{key}-data"):
        try:
            return base64.b64decode(entry[f"{key}-data"], validate=True), f"{key}-data of {source}"
        except (ValueError, TypeError):
            raise K4wError(f"cluster.existing: the {key}-data of {source} is not base64") from None
    if entry.get(key):
        data, path = _read_file(base, entry[key], key, source, limit)
        return data, f"{key} {path} (named in {source})"
    return None, ""


def _current_context(doc: dict, path: Path) -> str:
    current = doc.get("current-context")
    if current:
        return current
    names = [str(c.get("name")) for c in doc.get("contexts") or [] if isinstance(c, dict)]
    listed = ", ".join(_short(n) for n in names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    raise K4wError(f"cluster.existing: {path} has no current-context, so k4w cannot tell which cluster to join"
                   + (f" (its contexts: {listed}); run: kubectl config use-context NAME --kubeconfig {path}" if names else ""))


def load_kubeconfig(path: str | Path) -> Credentials:
    """The current context's server, CA and user credentials; refused with the reason when the file
    is missing, unreadable, readable by others or uses what this client does not do (exec plugins,
    skipped TLS verification). Every file is read with k4w.outdir.private.read_bounded: a FIFO, a device or
    a huge file named here is refused, never waited on or read whole."""
    path = Path(path).expanduser()
    try:
        raw = private.read_bounded(path, MAX_KUBECONFIG)
    except private.UnreadableFile as exc:
        if exc.reason == "does not exist":
            raise K4wError(f"cluster.existing: kubeconfig {path} does not exist (give the admin kubeconfig of your cluster, "
                           "e.g. a copy of /etc/kubernetes/admin.conf from a control-plane node)") from None
        raise K4wError(f"cluster.existing: kubeconfig {path} {exc.reason}") from None
    check_private(path)
    try:
        doc = private.safe_load_plain(raw.decode("utf-8"), str(path))
    except UnicodeDecodeError:
        raise K4wError(f"cluster.existing: {path} is not a kubeconfig (not UTF-8 text)") from None
    except K4wError as exc:
        raise K4wError(f"cluster.existing: {exc} (is {path} a kubeconfig?)") from None
    if not isinstance(doc, dict) or doc.get("kind") != "Config":
        raise K4wError(f"cluster.existing: {path} is not a kubeconfig (no kind: Config)")

    def named(section: str, name) -> dict:
        for item in doc.get(section) or []:
            if isinstance(item, dict) and item.get("name") == name:
                found = item.get(section.rstrip("s")) or {}
                if not isinstance(found, dict):
                    raise K4wError(f"cluster.existing: {path}: the {section.rstrip('s')} {_short(name)} is not a mapping")
                return found
        raise K4wError(f"cluster.existing: {path} has no {section.rstrip('s')} named {_short(name)}")

    context = named("contexts", _current_context(doc, path))
    cluster, user = named("clusters", context.get("cluster")), named("users", context.get("user"))
    server = cluster.get("server") or ""
    if not isinstance(server, str) or not server.startswith("https://"):
        raise K4wError(f"cluster.existing: the server of {path} is {_short(server)}; k4w talks to an API server over https only")
    if cluster.get("insecure-skip-tls-verify"):
        raise K4wError(f"cluster.existing: {path} skips TLS verification; give it the cluster's CA "
                       "(certificate-authority-data) so k4w can check whom it sends the join token to")
    base = path.parent
    ca, ca_from = _data_or_file(cluster, "certificate-authority", base, path, MAX_PEM)
    if not ca:
        raise K4wError(f"cluster.existing: {path} names no certificate-authority for its cluster")
    if user.get("exec") or user.get("auth-provider"):
        raise K4wError(f"cluster.existing: {path} gets its credentials from an exec plugin or auth provider; "
                       "k4w needs a kubeconfig with a client certificate or a token (kubeadm's admin.conf)")
    cert, cert_from = _data_or_file(user, "client-certificate", base, path, MAX_PEM)
    key, key_from = _data_or_file(user, "client-key", base, path, MAX_PEM)
    if user.get("client-key") and not user.get("client-key-data"):
        check_private(base / Path(user["client-key"]).expanduser(), f"holds the client key of {path}")
    token = user.get("token")
    if not token and user.get("tokenFile"):
        data, token_path = _read_file(base, user["tokenFile"], "tokenFile", path, MAX_TOKEN)
        check_private(token_path, f"holds the token of {path}")
        try:
            token = data.decode("ascii").strip()
        except UnicodeDecodeError:
            raise K4wError(f"cluster.existing: the tokenFile of {path}, {token_path}, holds no token (not ASCII text)") from None
    if token is not None and not isinstance(token, str):
        raise K4wError(f"cluster.existing: the token of {path}'s user is not a string")
    if token:
        register_secret(token)
    if not ((cert and key) or token):
        raise K4wError(f"cluster.existing: {path} has no client certificate and key and no token for its user")
    return Credentials(server=server.rstrip("/"), ca_pem=ca, cert_pem=cert, key_pem=key, token=token, source=str(path),
                       ca_from=ca_from, cert_from=cert_from, key_from=key_from)


def _no_pass_phrase():
    """OpenSSL's pass phrase callback: without one, an encrypted key makes OpenSSL ask on the terminal and wait."""
    raise _EncryptedKey()


class _EncryptedKey(Exception):
    pass


def _verifying_context(creds: Credentials) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=creds.ca_pem.decode("ascii", "replace"))
    except ssl.SSLError as exc:
        raise K4wError(f"cluster.existing: the {creds.ca_from} holds no PEM CA certificate k4w can use "
                       f"(OpenSSL: {exc.reason or exc}); give the cluster's CA, e.g. /etc/kubernetes/pki/ca.crt") from None


def _ssl_context(creds: Credentials) -> ssl.SSLContext:
    ctx = _verifying_context(creds)
    if creds.cert_pem and creds.key_pem:
        with tempfile.TemporaryDirectory(prefix="k4w-client-") as folder:   # mode 0700
            cert, key = Path(folder) / "client.crt", Path(folder) / "client.key"
            for path, data in ((cert, creds.cert_pem), (key, creds.key_pem)):
                private.write_private(path, data.decode("ascii", "replace"))   # PEM is ASCII
            try:
                ctx.load_cert_chain(cert, key, password=_no_pass_phrase)
            except _EncryptedKey:
                raise K4wError(f"cluster.existing: the {creds.key_from} is encrypted with a pass phrase; k4w never asks "
                               "for one: give an unencrypted key (openssl pkey -in KEY -out KEY.plain), kept private") from None
            except ssl.SSLError as exc:
                if "KEY_VALUES_MISMATCH" in str(exc):
                    problem = f"the {creds.key_from} is not the key of the {creds.cert_from}"
                else:
                    problem = (f"the {creds.cert_from} and {creds.key_from} are not a PEM certificate and its private key")
                raise K4wError(f"cluster.existing: {problem} (OpenSSL: {exc.reason or exc})") from None
    return ctx


class _DeadlineSocket:
    """A connected socket whose every send and receive waits only until one deadline: the socket
    timeout alone bounds each wait, so a server that sends a byte every few seconds would hold a
    request open for ever."""

    def __init__(self, sock, deadline: float):
        self._sock, self._deadline = sock, deadline

    def _arm(self) -> None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        self._sock.settimeout(left)

    def sendall(self, data, *flags):
        self._arm()
        return self._sock.sendall(data, *flags)

    def recv_into(self, buffer, nbytes: int = 0):
        self._arm()
        return self._sock.recv_into(buffer, nbytes)

    def makefile(self, mode: str = "rb", **_):
        return io.BufferedReader(_DeadlineReader(self))

    def close(self) -> None:
        self._sock.close()

    def __getattr__(self, name):
        return getattr(self._sock, name)


class _DeadlineReader(io.RawIOBase):
    """What http.client reads an answer from (it calls sock.makefile), through _DeadlineSocket."""

    def __init__(self, sock: _DeadlineSocket):
        super().__init__()
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        return self._sock.recv_into(buffer)


class _Connection(http.client.HTTPSConnection):
    """HTTPS to the API server within one deadline for the whole request: the TCP connect and the
    TLS handshake each get what is left of it (CPython's ssl keeps one deadline across a handshake's
    waits, Modules/_ssl.c do_handshake), then every send and read does (_DeadlineSocket)."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext, deadline: float):
        super().__init__(host, port, context=context, timeout=max(deadline - time.monotonic(), 0.001))
        self._deadline = deadline

    def _left(self) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        return left

    def connect(self) -> None:
        self.timeout = self._left()
        http.client.HTTPConnection.connect(self)
        self.sock.settimeout(self._left())
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self.host)
        self.sock = _DeadlineSocket(self.sock, self._deadline)


def _json_media_type(content_type: str) -> bool:
    """application/json or a +json type (RFC 6839), as the API server labels its JSON answers."""
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


class Client:
    """JSON requests to one API server. Every method raises ApiError naming the request.

    deadline_s bounds each request as a whole (connect, TLS, send and every read), not each wait."""

    def __init__(self, creds: Credentials, bearer: str | None = None, deadline_s: float = TIMEOUT_S):
        self.creds = creds
        self._parsed = urllib.parse.urlsplit(creds.server)
        self._ssl = _ssl_context(creds) if bearer is None else _verifying_context(creds)
        self._bearer = bearer if bearer is not None else creds.token
        self.deadline_s = deadline_s

    def request(self, method: str, path: str, body: dict | None = None, content_type: str = "application/json") -> dict:
        deadline = time.monotonic() + self.deadline_s
        conn = _Connection(self._parsed.hostname, self._parsed.port or 443, self._ssl, deadline)
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
            if time.monotonic() >= deadline:
                raise ApiError(f"{where}: no complete answer within {self.deadline_s:g} s (the limit for a whole "
                               "request); the API server or the network to it is too slow or stuck") from None
            raise ApiError(f"{where}: {exc}") from None
        finally:
            conn.close()
        if len(raw) > MAX_ANSWER:
            raise ApiError(f"{where}: the answer is larger than {MAX_ANSWER >> 20} MiB")
        status, media = answer.status, answer.getheader("Content-Type") or ""
        if 300 <= status < 400:
            # The API server never redirects its REST paths; a redirect comes from something in front of it
            # (a login page, a proxy), and following it would send the credentials there.
            raise ApiError(f"{where}: HTTP {status} redirect to {_short(answer.getheader('Location') or '?')}; k4w does not "
                           f"follow redirects: is {self.creds.server} the API server itself (not a proxy or a login page)?",
                           status=status)
        data = None
        if raw and _json_media_type(media):
            try:
                data = json.loads(raw)
            except RecursionError:   # Python's decoder recurses per level: one line, not a traceback
                raise ApiError(f"{where}: HTTP {status}, the answer is JSON nested too deeply to read", status=status) from None
            except ValueError:
                data = None
        if status >= 400:
            if not isinstance(data, dict):
                data = {"message": raw[:300].decode("utf-8", "replace")}
            raise ApiError(f"{where}: HTTP {status} {data.get('reason', '')}: {data.get('message', '')}".rstrip(": "),
                           status=status, body=data)
        if not 200 <= status < 300 or not isinstance(data, dict):
            raise ApiError(f"{where}: HTTP {status} answered {_short(media or 'no Content-Type')} with no JSON object, not "
                           f"what a Kubernetes API server answers: is {self.creds.server} the API server itself (not a "
                           "proxy or a web page)?", status=status)
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
