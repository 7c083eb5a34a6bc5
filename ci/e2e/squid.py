"""A real squid on 127.0.0.1 as the user's corporate proxy, and the reading of its access log.

The QEMU guests reach it at http://10.0.2.2:<port> (QEMU user-mode networking maps the
host's loopback to 10.0.2.2), which is what the e2e cluster.yml puts in proxy.http/https.
Everything squid writes (cache, logs, pid) lives in its own folder; nothing of the host's
squid (a service on 3128, /etc/squid, /var/log/squid) is touched.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import secrets
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from k4w.infra import proc, tools
from .phases import E2EError, Log, Phase, run

# The user Debian's squid package drops privileges to when started as root (its default
# cache_effective_user); our folder must be writable by it.
SQUID_USER = "proxy"
# Seconds squid waits for open connections on shutdown (default 30): nothing to wait for here.
SHUTDOWN_LIFETIME = 1
# Fields of our access-log format (see LOGFORMAT): epoch.millis client status bytes method URL "user agent".
LOGFORMAT = 'k4w %ts.%03tu %>a %Ss/%03>Hs %<st %rm %ru "%{User-Agent}>h"'
_LINE = re.compile(r'^(?P<time>\d+\.\d+) (?P<client>\S+) (?P<code>\S+)/(?P<status>\d{3}) (?P<bytes>\d+) '
                   r'(?P<method>\S+) (?P<url>\S+) "(?P<agent>[^"]*)"$')
# apt's User-Agent ("Debian APT-HTTP/1.3 (2.6.1)"): how a guest's apt requests are told apart.
APT_AGENT = "APT-HTTP"
# squid's NCSA basic-auth helper (Debian package squid); it reads an htpasswd file and accepts
# Apache MD5 ($apr1$) hashes, which `openssl passwd -apr1` makes.
NCSA_HELPER = Path("/usr/lib/squid/basic_ncsa_auth")
PROXY_USER = "k4w-e2e"


@dataclass(frozen=True)
class Credentials:
    """The proxy account of one run: a fresh password, so a scan for it finds only this run's
    traces. '!' and '$' are RFC 3986 sub-delims: legal in a URL's userinfo unencoded, and they
    exercise shell and systemd quoting on the way to the guest."""
    user: str
    password: str

    @classmethod
    def fresh(cls) -> "Credentials":
        return cls(PROXY_USER, f"k4w!{secrets.token_hex(8)}$e2e")

    @property
    def userinfo(self) -> str:
        return f"{self.user}:{self.password}"


def htpasswd_line(credentials: Credentials) -> str:
    """user:$apr1$... for the NCSA helper; the password reaches openssl on stdin, not argv."""
    result = subprocess.run(["openssl", "passwd", "-apr1", "-stdin"], input=credentials.password, capture_output=True,
                            text=True, check=True, timeout=30)
    return f"{credentials.user}:{result.stdout.strip()}\n"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def config_text(port: int, folder: Path, user: str | None, passwords: Path | None = None) -> str:
    """squid.conf for a private instance: loopback only, own cache and logs, access log in
    LOGFORMAT; with passwords (an htpasswd file), only authenticated clients get through."""
    folder = Path(folder)
    auth = []
    if passwords:
        auth = [
            f"auth_param basic program {NCSA_HELPER} {passwords}",
            "auth_param basic realm k4w-e2e",
            "acl authenticated proxy_auth REQUIRED",
            # 407 to anyone without the account, before the localhost allow below.
            "http_access deny !authenticated",
        ]
    lines = [
        "# k4w e2e: a private squid standing in for a corporate proxy",
        f"http_port 127.0.0.1:{port}",
        f"pid_filename {folder / 'squid.pid'}",
        f"cache_log {folder / 'cache.log'}",
        f"logformat {LOGFORMAT}",
        f"access_log stdio:{folder / 'access.log'} k4w",
        "cache_store_log none",
        f"cache_dir ufs {folder / 'cache'} 512 16 256",
        f"coredump_dir {folder / 'cache'}",
        # .debs (docker.io is ~25 MB) are worth keeping for a re-run against the same squid.
        "maximum_object_size 256 MB",
        f"shutdown_lifetime {SHUTDOWN_LIFETIME} seconds",
        "visible_hostname k4w-e2e-proxy",
        # pinger is a setuid ICMP helper for cache-peer selection; there are no peers here.
        "pinger_enable off",
        # The guests connect through QEMU's user-mode network, i.e. from the host's loopback.
        "acl Safe_ports port 80 443",
        "acl SSL_ports port 443",
        "http_access deny !Safe_ports",
        "http_access deny CONNECT !SSL_ports",
        *auth,
        "http_access allow localhost",
        "http_access deny all",
    ]
    if user:
        lines.append(f"cache_effective_user {user}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class AccessLine:
    time: float
    client: str
    code: str  # squid's result code, e.g. TCP_MISS
    status: int  # HTTP status sent to the client
    bytes: int
    method: str
    url: str
    agent: str

    @property
    def host(self) -> str:
        match = re.match(r"^[a-z]+://([^/:]+)", self.url)
        return match.group(1) if match else self.url.split(":")[0]


def parse_access_log(text: str) -> tuple[list[AccessLine], list[str]]:
    """(parsed lines, lines that did not parse). Lines not in our format are reported, not dropped."""
    parsed, bad = [], []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        match = _LINE.match(raw.strip())
        if not match:
            bad.append(raw)
            continue
        parsed.append(AccessLine(float(match["time"]), match["client"], match["code"], int(match["status"]),
                                 int(match["bytes"]), match["method"], match["url"], match["agent"]))
    return parsed, bad


def is_package(line: AccessLine) -> bool:
    return line.url.endswith(".deb")


def is_index(line: AccessLine) -> bool:
    # Release files, Packages and Translation indexes, also fetched by hash: all under dists/.
    return "/dists/" in line.url


def apt_requests(lines: list[AccessLine]) -> list[AccessLine]:
    """Requests a guest's apt made: apt's user agent, an archive URL (index or package)."""
    return [l for l in lines if APT_AGENT in l.agent and (is_package(l) or is_index(l))]


def summary(lines: list[AccessLine]) -> dict:
    apt = apt_requests(lines)
    return {
        "lines": len(lines),
        "apt_requests": len(apt),
        "debs": sum(1 for l in apt if is_package(l)),
        "indexes": sum(1 for l in apt if is_index(l)),
        "hosts": sorted({l.host for l in apt}),
        "clients": sorted({l.client for l in apt}),
        "failed": [f"{l.status} {l.url}" for l in apt if l.status >= 400],
        "bytes": sum(l.bytes for l in apt),
        # Everything else the guest sent through the proxy (a component download would show here).
        "other_requests": len(lines) - len(apt),
        "other_bytes": sum(l.bytes for l in lines if l not in apt),
        "other": [f"{l.status} {l.method} {l.url}" for l in lines if l not in apt][:20],
    }


class Squid:
    """A running private squid: .url_for_guests, .access_log, .offset() and .lines_since()."""

    def __init__(self, folder: Path, port: int, server: proc.Process, credentials: Credentials | None = None):
        self.folder = folder
        self.port = port
        self.proc = server
        self.credentials = credentials

    @property
    def access_log(self) -> Path:
        return self.folder / "access.log"

    @property
    def url_for_guests(self) -> str:
        # 10.0.2.2: the host's loopback as a QEMU user-mode guest sees it (QEMU docs, -netdev user).
        userinfo = f"{self.credentials.userinfo}@" if self.credentials else ""
        return f"http://{userinfo}10.0.2.2:{self.port}"

    def offset(self) -> int:
        return self.access_log.stat().st_size if self.access_log.exists() else 0

    def text_since(self, offset: int) -> str:
        if not self.access_log.exists():
            return ""
        with open(self.access_log, "rb") as fh:
            fh.seek(offset)
            return fh.read().decode("utf-8", "replace")


def _wait_listening(port: int, server: proc.Process, phase: Phase, cache_log: Path) -> None:
    while True:
        if server.poll() is not None:
            log_tail = cache_log.read_text(encoding="utf-8", errors="replace")[-2000:] if cache_log.exists() else ""
            raise E2EError(f"squid exited with {server.returncode} before listening on 127.0.0.1:{port}:\n{log_tail}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        phase.remaining(f"squid listens on 127.0.0.1:{port}")
        time.sleep(0.2)  # poll interval of the readiness check above, not a readiness sleep


@contextlib.contextmanager
def running(folder: Path, phase: Phase, log: Log, credentials: Credentials | None = None) -> Iterator[Squid]:
    """Start squid in the foreground (-N) in folder; stop it (and check it stopped) on exit.
    With credentials, squid requires them (basic auth), as many corporate proxies do."""
    exe = shutil.which("squid") or shutil.which("squid", path="/usr/sbin:/sbin")
    if not exe:
        raise tools.missing("squid")
    folder = Path(folder)
    (folder / "cache").mkdir(parents=True, exist_ok=True)  # coredump_dir must exist before -z
    user = None
    if os.geteuid() == 0:
        try:
            pw = pwd.getpwnam(SQUID_USER)
        except KeyError:
            raise E2EError(f"squid runs as user '{SQUID_USER}' when started by root, and it does not exist "
                           f"(the Debian squid package creates it: {tools.INSTALL['squid']})") from None
        user = SQUID_USER
        for path in [folder, *folder.rglob("*")]:
            os.chown(path, pw.pw_uid, pw.pw_gid)
        # The folder's parents must let that user through (mkdtemp makes 0700 folders).
        for parent in folder.parents:
            if parent == Path("/"):
                break
            if not os.stat(parent).st_mode & 0o001:
                raise E2EError(f"{parent} is not searchable by user {SQUID_USER}; put the e2e work folder elsewhere")
    port = free_port()
    passwords = None
    if credentials:
        if not NCSA_HELPER.is_file():
            raise E2EError(f"{NCSA_HELPER} is missing: it comes with the squid package ({tools.INSTALL['squid']})")
        passwords = folder / "passwd"
        passwords.write_text(htpasswd_line(credentials), encoding="utf-8")
    conf = folder / "squid.conf"
    conf.write_text(config_text(port, folder, user, passwords), encoding="utf-8")
    if user:
        for path in (conf, passwords):
            if path:
                os.chown(path, pw.pw_uid, pw.pw_gid)
    # -z creates the cache_dir's swap folders, then exits; -N keeps it in the foreground.
    run([exe, "-N", "-z", "-f", str(conf)], phase, log, "squid -z (create the cache folders)")
    log.write(f"$ {exe} -N -f {conf}\n")
    server = proc.start([exe, "-N", "-f", str(conf)], group=True, capture=False)
    squid = Squid(folder, port, server, credentials)
    try:
        _wait_listening(port, server, phase, folder / "cache.log")
        auth = f"basic auth as {credentials.user}" if credentials else "no auth"
        log.event(f"squid {server.pid} listening on 127.0.0.1:{port} ({auth}); guests use 10.0.2.2:{port}; access log {squid.access_log}")
        yield squid
    finally:
        stop(server, log)


def stop(server: proc.Process, log: Log) -> None:
    # Its whole group: helpers squid started (unlinkd for the ufs cache) share it.
    if server.stop(grace=SHUTDOWN_LIFETIME + 20):
        log.event(f"squid {server.pid} did not stop after SIGTERM; killed it")
    log.event(f"squid {server.pid} stopped (exit {server.returncode})")
