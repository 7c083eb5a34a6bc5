"""Real OCI registries on this host, the only place the libvirt cluster e2e's nodes get images from.

No registry is reachable from here, so the nodes pull every image through k4w's own `registry.mirrors`
(k4w/derive/registry.py writes each upstream's hosts.toml): one CNCF distribution registry
(tools/lock.yml distribution-registry, cmd/registry) per upstream, because one mirror endpoint that
serves several upstreams cannot tell which one a name is from (k4w/validate/registry_rules.py
refuses it). Each serves TLS with a throwaway CA whose file the `registry:` block names, keeps its
storage in the work folder, and writes its access log there: `requests()` counts what the nodes
asked for (issue 36's registry_requests_during_bake).

Images go in with a small OCI distribution client (distribution-spec v1.1.0 spec.md "Pushing blobs":
POST /v2/<name>/blobs/uploads/ then PUT <location>?digest=, monolithic; "Pushing Manifests": PUT
/v2/<name>/manifests/<tag>) from the archives ci/e2e/oci_archive.py writes, under the repository a
mirror is asked for: containerd keeps the upstream's path and only changes the host (hosts.toml with
`?ns=<upstream>`, k4w/derive/registry.py), so registry.k8s.io/kube-apiserver:v1.37.2 is repository
kube-apiserver, ghcr.io/flannel-io/flannel:v0.28.10 flannel-io/flannel, busybox:1.28 library/busybox.

Usage (the lead's libvirt run; tests use 127.0.0.1):

    with registry.serving("192.168.123.1", workdir) as mirrors:
        mirrors.push_archives(built)                      # cluster_images.build(...) + workload_images(...)
        data["registry"] = mirrors.registry_block()       # cluster.yml
        before = mirrors.request_counts()                 # after the pushes: they are in the log too
        ...                                               # bake / cluster-up: the nodes pull
        report["registry_requests_during_bake"] = mirrors.request_count(since=before)
        # the watchdog of a phase must spare mirrors.pids()
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import http.client
import ipaddress
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator
from urllib.parse import urlencode, urljoin, urlsplit

import yaml

from k4w.derive.registry import image_domain
from k4w.infra import pinned_tools
from k4w.infra.errors import ToolMissing
from k4w.outdir import private
from . import cluster_images, oci_archive
from .phases import E2EError

TOOL = "distribution-registry"
PROGRAM = "registry"
# tools/lock.yml puts the registry in group ci: scripts/setup.sh (so CI) builds it.
BUILD_HINT = "scripts/build-tools --group ci"
# The upstreams the cluster's images come from: kubeadm's images and the pause (registry.k8s.io), Flannel's
# (ghcr.io, boxes/ubuntu-2404.yml kubernetes.flannel_image), the cluster-test workloads (docker.io,
# k4w/verify/workloads.py).
UPSTREAMS = ("registry.k8s.io", "ghcr.io", "docker.io")
START_TIMEOUT = 30.0   # seconds a registry may take to answer /v2/
STOP_GRACE = 10.0      # seconds between SIGTERM and SIGKILL
CERT_DAYS = 7          # the throwaway CA outlives a long e2e run, and no longer
# The access log's line: gorilla/handlers CombinedLoggingHandler (distribution@v3.1.2 registry/registry.go
# wraps the app in it on stdout unless log.accesslog.disabled), Apache's combined format.
_COMBINED = re.compile(r'(?P<remote>\S+) \S+ (?P<user>\S+) \[(?P<time>[^\]]+)\] "(?P<method>[A-Z]+) (?P<uri>\S+) '
                       r'(?P<proto>[^"]*)" (?P<status>\d{3}) (?P<size>\d+|-) "(?P<referer>[^"]*)" "(?P<agent>[^"]*)"')


# ------------------------------------------------------------------ names


def mirror_reference(name: str) -> tuple[str, str, str]:
    """(upstream, repository, tag) a mirror is asked for when a node pulls image `name`: the registry
    as distribution/reference splits it (k4w.derive.registry.image_domain, library/ for Docker Hub's
    official images), the rest of the path, the tag. busybox:1.28 -> (docker.io, library/busybox, 1.28)."""
    if "@" in name:
        raise E2EError(f"image {name!r}: a digest reference cannot be pushed under a tag")
    upstream, rest = image_domain(name)
    repository, sep, tag = rest.rpartition(":")
    if not sep or "/" in tag:
        raise E2EError(f"image {name!r} has no tag")
    return upstream, repository, tag


# ------------------------------------------------------------------ TLS


@dataclass(frozen=True)
class Tls:
    ca: Path       # the CA certificate (PEM): cluster.yml `ca:` and the clients trust it
    cert: Path     # the server certificate, SAN = the listen address
    key: Path      # its private key, owner-only


def make_tls(folder: Path, address: str) -> Tls:
    """A throwaway CA (its key kept in memory only, so nothing can sign with it later) and a server
    certificate for IP `address` signed by it. Go's TLS (containerd, the registry) checks the IP
    against the SAN only, never the CN (crypto/x509 VerifyHostname)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ip = ipaddress.ip_address(address)
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=CERT_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "k4w e2e throwaway registry CA")])
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                            crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
               .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"k4w e2e registry {ip}")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ip)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    folder.mkdir(parents=True, exist_ok=True)
    tls = Tls(ca=folder / "ca.pem", cert=folder / "server.pem", key=folder / "server.key")
    tls.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    tls.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    # k4w's one owner-only writer (created private, never chmod-ed after the key is in it).
    private.write_private(tls.key, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                     serialization.NoEncryption()).decode("ascii"))
    return tls


def client_context(ca: Path) -> ssl.SSLContext:
    """A TLS client context that trusts only the throwaway CA (hostname = IP checked against the SAN)."""
    return ssl.create_default_context(cafile=str(ca))


# ------------------------------------------------------------------ one registry process


@dataclass(frozen=True)
class Request:
    """One line of a registry's access log."""

    remote: str
    method: str
    path: str       # without the query
    query: str
    status: int
    size: int
    agent: str


def parse_access_log(text: str) -> list[Request]:
    """The requests of a combined-format access log; lines of another shape are not requests."""
    found = []
    for line in text.splitlines():
        match = _COMBINED.match(line)
        if match:
            uri = urlsplit(match["uri"])
            found.append(Request(remote=match["remote"], method=match["method"], path=uri.path, query=uri.query,
                                 status=int(match["status"]), size=0 if match["size"] == "-" else int(match["size"]),
                                 agent=match["agent"]))
    return found


def config_text(address: str, port: int, storage: Path, tls: Tls, manifest_urls: tuple[str, ...] = ()) -> str:
    """distribution's configuration (distribution/distribution v3.1.2, its docs' about/configuration page): filesystem
    storage, TLS, the access log on (stdout), no debug server, no redirects (filesystem has none).
    manifest_urls: regular expressions of the foreign-layer URLs a pushed manifest may name (validation.manifests.urls.allow;
    with none, registry/handlers/app.go allows none)."""
    validation = {"validation": {"manifests": {"urls": {"allow": list(manifest_urls)}}}} if manifest_urls else {}
    return yaml.safe_dump({
        "version": "0.1",
        "log": {"level": "info", "formatter": "text", "accesslog": {"disabled": False}},
        "storage": {"filesystem": {"rootdirectory": str(storage)},
                    # No upload purging: the registry lives for one run only.
                    "maintenance": {"uploadpurging": {"enabled": False}}},
        "http": {"addr": f"{address}:{port}", "tls": {"certificate": str(tls.cert), "key": str(tls.key)},
                 "headers": {"X-Content-Type-Options": ["nosniff"]}},
        **validation,
    }, sort_keys=False)


@dataclass
class Registry:
    """One running registry: the mirror of `upstream`."""

    upstream: str
    address: str
    port: int
    folder: Path
    ca: Path
    process: subprocess.Popen | None = None
    manifest_urls: tuple[str, ...] = ()   # config_text's

    @property
    def host(self) -> str:
        ip = ipaddress.ip_address(self.address)
        return f"[{ip}]:{self.port}" if ip.version == 6 else f"{ip}:{self.port}"

    @property
    def endpoint(self) -> str:
        return f"https://{self.host}"

    @property
    def access_log(self) -> Path:
        return self.folder / "access.log"

    @property
    def server_log(self) -> Path:
        return self.folder / "registry.log"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def requests(self) -> list[Request]:
        """Every request the registry answered so far, from its access log."""
        if not self.access_log.is_file():
            return []
        return parse_access_log(self.access_log.read_text(encoding="utf-8", errors="replace"))

    def log_tail(self, lines: int = 15) -> str:
        text = self.server_log.read_text(encoding="utf-8", errors="replace") if self.server_log.is_file() else ""
        return "\n".join(text.splitlines()[-lines:])

    # -------------------------------------------------------------- HTTP

    def call(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
             timeout: float = 60.0) -> tuple[int, dict[str, str], bytes]:
        """One HTTPS request to the registry, trusting only its CA: (status, headers lower-cased, body)."""
        conn = http.client.HTTPSConnection(self.address, self.port, timeout=timeout, context=client_context(self.ca))
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            data = response.read()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, data
        finally:
            conn.close()

    def _expect(self, wanted: int, method: str, path: str, **kwargs) -> dict[str, str]:
        status, headers, data = self.call(method, path, **kwargs)
        if status != wanted:
            raise E2EError(f"{self.upstream} mirror {self.endpoint}: {method} {path} answered {status}, not {wanted}: "
                           f"{data[:300].decode('utf-8', 'replace')}")
        return headers

    def has_blob(self, repository: str, digest: str) -> bool:
        status, _, _ = self.call("HEAD", f"/v2/{repository}/blobs/{digest}")
        return status == 200

    def push_blob(self, repository: str, digest: str, data: bytes) -> None:
        """A monolithic upload (distribution-spec v1.1.0 "Pushing a blob monolithically", POST then PUT);
        skipped when the repository has the blob already."""
        if self.has_blob(repository, digest):
            return
        headers = self._expect(202, "POST", f"/v2/{repository}/blobs/uploads/", headers={"Content-Length": "0"})
        location = urlsplit(urljoin(f"{self.endpoint}/v2/{repository}/blobs/uploads/", headers["location"]))
        query = (location.query + "&" if location.query else "") + urlencode({"digest": digest})
        self._expect(201, "PUT", f"{location.path}?{query}", body=data,
                     headers={"Content-Type": "application/octet-stream", "Content-Length": str(len(data))})

    def push_manifest(self, repository: str, tag: str, manifest: bytes, media_type: str) -> None:
        self._expect(201, "PUT", f"/v2/{repository}/manifests/{tag}", body=manifest,
                     headers={"Content-Type": media_type, "Content-Length": str(len(manifest))})

    def push_archive(self, archive: Path, repository: str, tag: str) -> str:
        """Push the one image of an OCI archive (oci_archive.write's layout) as repository:tag; return its
        manifest digest, which is the archive's own (the manifest's bytes are pushed unchanged)."""
        with tarfile.open(archive) as tar:
            def blob(digest: str) -> bytes:
                return tar.extractfile("blobs/sha256/" + digest.split(":", 1)[1]).read()

            descriptors = json.loads(tar.extractfile("index.json").read())["manifests"]
            if len(descriptors) != 1:
                raise E2EError(f"{archive}: {len(descriptors)} manifests in index.json; one image per archive is pushed")
            descriptor = descriptors[0]
            manifest = blob(descriptor["digest"])
            parsed = json.loads(manifest)
            for item in [parsed["config"], *parsed.get("layers", [])]:
                self.push_blob(repository, item["digest"], blob(item["digest"]))
            self.push_manifest(repository, tag, manifest, descriptor.get("mediaType") or parsed["mediaType"])
            return descriptor["digest"]

    # -------------------------------------------------------------- process

    def start(self, binary: Path, tls: Tls, timeout: float = START_TIMEOUT) -> None:
        """Start the registry and wait until /v2/ answers over TLS (bounded); a registry that exits or
        does not answer in time is stopped and named with its log."""
        storage = self.folder / "storage"
        storage.mkdir(parents=True, exist_ok=True)
        config = self.folder / "config.yml"
        config.write_text(config_text(self.address, self.port, storage, tls, self.manifest_urls), encoding="utf-8")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               # distribution@v3.1.2 tracing/tracing.go: autoexport's default is an OTLP exporter to
               # localhost:4318; nothing collects traces here.
               "OTEL_TRACES_EXPORTER": "none"}
        with self.access_log.open("ab") as out, self.server_log.open("ab") as err:
            # Its own session: a terminal's Ctrl-C reaches the harness, which stops it in order.
            self.process = subprocess.Popen([str(binary), "serve", str(config)], stdin=subprocess.DEVNULL,
                                            stdout=out, stderr=err, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise E2EError(f"the {self.upstream} mirror (registry on {self.host}) exited with {self.process.returncode}:\n"
                               f"{self.log_tail()}")
            try:
                status, _, _ = self.call("GET", "/v2/", timeout=5)
                if status == 200:
                    return
                last = f"GET /v2/ answered {status}"
            except ssl.SSLCertVerificationError as exc:
                # Either another server holds the port (ours then exits: say that), or ours has a wrong
                # certificate, which stays wrong: no point polling on.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(2)
                if self.process.poll() is not None:
                    continue
                self.stop()
                raise E2EError(f"the {self.upstream} mirror (registry on {self.host}) does not pass TLS verification "
                               f"against {self.ca}: {exc}") from None
            except (OSError, http.client.HTTPException) as exc:
                last = str(exc)
            time.sleep(0.2)
        self.stop()
        raise E2EError(f"the {self.upstream} mirror (registry on {self.host}) did not answer /v2/ within {timeout:.0f} s "
                       f"({last}):\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM (the registry drains and exits), SIGKILL after STOP_GRACE; always reaped."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()


# ------------------------------------------------------------------ the mirrors of every upstream


def registry_binary() -> Path:
    """The pinned registry, or ToolMissing naming the build command and its group."""
    found = pinned_tools.binary(TOOL, PROGRAM)
    if found is None:
        version = pinned_tools.lock()[TOOL]["version"]
        raise ToolMissing(f"{PROGRAM} ({TOOL} {version}, tools/lock.yml)",
                          f"{BUILD_HINT} (it builds into {pinned_tools.tool_dir(TOOL)}; K4W_TOOLS_DIR moves the cache)")
    return found


def free_port(address: str) -> int:
    """A TCP port free on address now (the kernel's pick); start() fails naming it if it is taken since."""
    family = socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((address, 0))
        except OSError as exc:
            raise E2EError(f"cannot listen on {address}: {exc.strerror}; the registries need an address this host "
                           "has (the libvirt management network's, once that network is up)") from None
        return sock.getsockname()[1]


@dataclass
class Mirrors:
    """The running registries, one per upstream, sharing one CA."""

    address: str
    tls: Tls
    registries: dict[str, Registry] = field(default_factory=dict)
    pushed: dict[str, str] = field(default_factory=dict)   # image name -> manifest digest

    @property
    def ca(self) -> Path:
        return self.tls.ca

    def pids(self) -> list[int]:
        """The registries' process ids (a phase watchdog must spare them)."""
        return [r.pid for r in self.registries.values() if r.pid]

    def for_image(self, name: str) -> tuple[Registry, str, str]:
        upstream, repository, tag = mirror_reference(name)
        if upstream not in self.registries:
            raise E2EError(f"image {name}: no mirror serves {upstream} (these do: {', '.join(self.registries)})")
        return self.registries[upstream], repository, tag

    def push(self, name: str, archive: Path) -> str:
        """Push the archive's image where a node pulling `name` through its mirror asks; its manifest digest."""
        registry, repository, tag = self.for_image(name)
        digest = registry.push_archive(archive, repository, tag)
        self.pushed[name] = digest
        return digest

    def push_archives(self, built: list) -> dict[str, str]:
        """Push every archive of cluster_images.build() / workload_images() (objects with .name and .archive)."""
        return {item.name: self.push(item.name, item.archive) for item in built}

    def registry_block(self, ca: str | None = None) -> dict:
        """cluster.yml's `registry:` block: each upstream -> its mirror's https endpoint and the CA file.
        ca: how the file is named in cluster.yml (default the absolute path; a relative one is taken from
        the config file's folder)."""
        return {"mirrors": {upstream: {"endpoint": r.endpoint, "ca": ca or str(self.tls.ca)}
                            for upstream, r in self.registries.items()}}

    def requests(self) -> dict[str, list[Request]]:
        """Each upstream's mirror's requests so far (its access log)."""
        return {upstream: r.requests() for upstream, r in self.registries.items()}

    def request_count(self, since: dict[str, int] | None = None) -> int:
        """How many requests all mirrors answered, less those counted in `since` (an earlier request_counts())."""
        return sum(n - (since or {}).get(upstream, 0) for upstream, n in self.request_counts().items())

    def request_counts(self) -> dict[str, int]:
        return {upstream: len(found) for upstream, found in self.requests().items()}

    def stop(self) -> None:
        for registry in self.registries.values():
            registry.stop()


@contextlib.contextmanager
def serving(address: str, workdir: Path, upstreams: tuple[str, ...] = UPSTREAMS,
            ports: dict[str, int] | None = None, timeout: float = START_TIMEOUT,
            manifest_urls: tuple[str, ...] = ()) -> Iterator[Mirrors]:
    """Run one registry per upstream on address (ports: upstream -> port, else free ones the kernel
    picks) with storage and logs under workdir/<upstream>; all stopped when the block ends, however
    it ends."""
    binary = registry_binary()
    workdir.mkdir(parents=True, exist_ok=True)
    mirrors = Mirrors(address=address, tls=make_tls(workdir / "tls", address))
    try:
        for upstream in upstreams:
            port = (ports or {}).get(upstream) or free_port(address)
            registry = Registry(upstream=upstream, address=address, port=port, folder=workdir / upstream, ca=mirrors.ca,
                                manifest_urls=manifest_urls)
            mirrors.registries[upstream] = registry
            registry.start(binary, mirrors.tls, timeout)
        yield mirrors
    finally:
        mirrors.stop()


# ------------------------------------------------------------------ the cluster-test workloads' images

# k4w/verify/workloads.py BUSYBOX_IMAGE and NGINX_IMAGE as containerd names them (docker.io/library/...).
BUSYBOX_NAME = "docker.io/library/busybox:1.28"
NGINX_NAME = "docker.io/library/nginx:1.15-alpine"
# The page the nginx substitute serves: the matrix counts any HTTP answer (k4w/verify/probes.py); the
# readiness probe wants a 2xx for GET / (workloads.py readinessProbe httpGet path "/").
INDEX_HTML = b"<!DOCTYPE html>\n<title>k4w e2e</title>\n<p>busybox httpd standing in for nginx:1.15-alpine</p>\n"


def busybox_applets(busybox: Path) -> list[str]:
    """The applets the host busybox has (`busybox --list`), each to be a /bin name in the image."""
    done = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, timeout=30, check=False)
    applets = [a.strip() for a in done.stdout.splitlines() if a.strip() and "/" not in a]
    if done.returncode != 0 or "sh" not in applets:
        raise E2EError(f"{busybox} --list failed (exit {done.returncode}) or has no sh: {done.stderr.strip()}")
    return applets


def busybox_version(busybox: Path) -> str:
    done = subprocess.run([str(busybox)], capture_output=True, text=True, timeout=30, check=False)
    match = re.search(r"BusyBox v(\S+)", done.stdout + done.stderr)
    return match.group(1) if match else "unknown"


def _busybox_entries() -> tuple[dict[str, oci_archive.Entry], Path]:
    entries = cluster_images.host_entries("busybox")   # /bin/busybox with its libraries, /bin/cp
    source = entries["/bin/busybox"].source
    for applet in busybox_applets(source):
        entries.setdefault(f"/bin/{applet}", oci_archive.Entry(f"/bin/{applet}", link="busybox"))
    return entries, source


def workload_images(dest: Path) -> tuple[list[cluster_images.Built], dict[str, dict]]:
    """The images `invoke cluster-test` runs on Linux, from the host's busybox: (archives, {image name:
    {kind, what, made_from, version}} for the report's substitutes, beside cluster_images.check_names()'). busybox:1.28 is the host's busybox with every applet (sleep, sh, nslookup, wget, nc: what the
    matrix's pods run), another version: a stand-in. nginx:1.15-alpine is busybox httpd serving an index
    page on port 80 in the foreground: a SUBSTITUTE (another program), named as one."""
    entries, source = _busybox_entries()
    version = busybox_version(source)
    index = dest / "nginx-index.html"
    dest.mkdir(parents=True, exist_ok=True)
    index.write_bytes(INDEX_HTML)
    web = dict(entries)
    web["/www/index.html"] = oci_archive.Entry("/www/index.html", source=index, mode=0o644)
    images = [
        (oci_archive.Image(name=BUSYBOX_NAME, entries=list(entries.values()), cmd=["sh"]),
         {"kind": "stand-in", "what": f"the host's BusyBox v{version}, not busybox 1.28"}),
        # httpd -f: foreground (the container's process), -p 80: workloads.HTTP_PORT, -h: the document root.
        (oci_archive.Image(name=NGINX_NAME, entries=list(web.values()),
                           entrypoint=["/bin/busybox", "httpd", "-f", "-p", "80", "-h", "/www"]),
         {"kind": "substitute", "what": f"the host's BusyBox v{version} httpd serving /www/index.html on port 80, not nginx"}),
    ]
    built, named = [], {}
    for image, what in images:
        archive = dest / cluster_images.archive_name(image.name)
        oci_archive.write(archive, image)
        data = archive.read_bytes()
        built.append(cluster_images.Built(name=image.name, archive=archive, sha256=hashlib.sha256(data).hexdigest(),
                                          bytes=len(data), made_from={"/bin/busybox": f"host {source}"}))
        named[image.name] = {**what, "made_from": f"host {source}", "version": version}
    return built, named
