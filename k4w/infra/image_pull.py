"""Pull one image from an OCI distribution registry on the host, into an OCI image layout, verified.

The first piece of the host image cache (issue 36): the Windows host has no Docker, so k4w speaks the
registry API itself (opencontainers/distribution-spec v1.1.0 spec.md "Pulling manifests", "Pulling
blobs"), through exactly the cluster's proxy and NO_PROXY (k4w.infra.download.opener), with a
registry mirror's own CA where the config names one.

- Every byte is checked against its digest before it is kept: a manifest asked for by digest must hash
  to it, one asked for by tag must hash to the registry's Docker-Content-Digest when it sends one, and
  each blob goes through k4w.infra.download (a `.part` resumed with Range, renamed only after its
  sha256 matched). A mismatch is refused naming both digests, and nothing of it stays.
- Authentication follows the registry's 401 (RFC 9110 11.6.1 WWW-Authenticate): Basic sends the
  credentials; Bearer fetches a token from the challenge's realm with its service and scope (the
  distribution token flow, distribution/distribution docs "Token Authentication Specification"),
  with the credentials when there are any, and uses it for that repository. Credentials go only to
  the registry's host (unredirected headers), and every message is redacted.
- A foreign layer (the Windows base images up to 1803) comes from the https URLs its descriptor names, then
  from the registry, checked against its digest like every other.
- An image index (or Docker manifest list) is resolved to the one manifest of the wanted platform:
  os and architecture, and for Windows an `os.version` the box's build runs, chosen the way containerd
  chooses it (`windows_runs`, `select`).

The layout (opencontainers/image-spec v1.1.0 image-layout.md): `oci-layout`, `blobs/sha256/<hex>` for
the index (when there is one), the manifest, its config and layers, and `index.json` naming the
platform manifest with the image's full name in `io.containerd.image.name` and its tag in
`org.opencontainers.image.ref.name`, the two names `ctr images import` reads (containerd v2.3.7
client/import.go imageName).
"""

from __future__ import annotations

import hashlib
import json
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from k4w.infra import download, filelock, files
from k4w.infra.image_platform import Platform, describe
from k4w.infra.errors import K4wError
from k4w.infra.redact import redact, register_secret

if TYPE_CHECKING:  # annotations only: infra sits below derive, which makes the Proxy
    from k4w.derive.values import Proxy

# opencontainers/image-spec v1.1.0 media-types.md, and Docker's image manifest v2 schema 2 (which the
# distribution spec serves alike; Docker Hub still answers with it for many images).
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEXES = (OCI_INDEX, DOCKER_LIST)
MANIFESTS = (OCI_MANIFEST, DOCKER_MANIFEST)
ACCEPT = ", ".join((*INDEXES, *MANIFESTS))
# A manifest, an index or a token answer is small; a larger answer is refused rather than read into memory
# (distribution's own limit for a manifest PUT is 4 MiB: registry/handlers/manifests.go maxManifestBodySize
# at v3.1.2).
MAX_DOCUMENT_BYTES = 4 * 1024 * 1024
# The annotations `ctr images import` takes the image's name from (see the module docstring).
CONTAINERD_NAME = "io.containerd.image.name"
OCI_REF_NAME = "org.opencontainers.image.ref.name"
LAYOUT_VERSION = {"imageLayoutVersion": "1.0.0"}
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# One auth-param of a challenge: name=token or name="quoted string" (RFC 9110 11.2).
_PARAM = re.compile(r'([A-Za-z][\w-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,"]+))')


class RegistryError(K4wError):
    """A registry refused, failed or sent bytes that do not match their digest; the message says which."""


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        register_secret(self.password)

    def basic(self) -> str:
        return download.basic_auth(self.username, self.password)


@dataclass(frozen=True)
class Fetched:
    media_type: str
    digest: str
    data: bytes

    def document(self) -> dict:
        return json.loads(self.data)


@dataclass(frozen=True)
class Pulled:
    name: str                # the image's full name, as index.json records it
    digest: str              # the platform manifest's
    blobs: tuple[str, ...]   # every digest the layout holds for it
    bytes_fetched: int       # 0 when the layout already held every blob


def trust(ca: Path | None) -> ssl.SSLContext | None:
    """The TLS trust for a registry: the system's roots, plus the mirror's own CA when the config names
    one (containerd adds a hosts.toml `ca` to the system pool the same way: v2.3.7
    core/remotes/docker/config/hosts.go updateTLSConfigFromHost), so a mirror whose token server has a public
    certificate still works."""
    if ca is None:
        return None
    context = ssl.create_default_context()
    context.load_verify_locations(cafile=str(ca))
    return context


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def challenge(header: str) -> tuple[str, dict[str, str]]:
    """(scheme in lower case, its parameters) of a WWW-Authenticate header with one challenge."""
    scheme, _, rest = header.strip().partition(" ")
    params = {m.group(1).lower(): (m.group(2).replace('\\"', '"') if m.group(2) is not None else m.group(3))
              for m in _PARAM.finditer(rest)}
    return scheme.lower(), params


class Registry:
    """One registry (or mirror) endpoint, e.g. https://registry.k8s.io or https://mirror.corp:5000."""

    def __init__(self, endpoint: str, *, ca: Path | None = None, credentials: Credentials | None = None,
                 proxy: Proxy | None = None, namespace: str | None = None):
        self.endpoint = endpoint.rstrip("/")
        # A mirror is told which upstream the repository is from (?ns=, as containerd v2.3.7
        # core/remotes/docker/resolver.go addNamespace sends it), so one mirror can serve several.
        self.query = "?" + urllib.parse.urlencode({"ns": namespace}) if namespace else ""
        self.credentials = credentials
        self.proxy = proxy
        self.context = trust(ca)
        self._auth: dict[str, str] = {}   # repository -> Authorization header value

    def url(self, repository: str, kind: str, reference: str) -> str:
        return f"{self.endpoint}/v2/{repository}/{kind}/{reference}{self.query}"

    # ------------------------------------------------------------------ authentication

    def _authorize(self, repository: str, header: str | None, url: str) -> None:
        """Answer a 401's challenge for repository, or raise naming why it cannot be answered."""
        scheme, params = challenge(header or "")
        if scheme == "basic":
            if not self.credentials:
                raise RegistryError(f"{redact(url)}: the registry asks for a user name and password (HTTP 401, Basic): "
                                    "give the mirror's credentials in cluster.yml")
            self._auth[repository] = self.credentials.basic()
            return
        if scheme != "bearer" or not params.get("realm"):
            raise RegistryError(f"{redact(url)}: HTTP 401 with a challenge k4w cannot answer: {redact(header or '(none)')}")
        query = {k: v for k, v in (("service", params.get("service")),
                                   ("scope", params.get("scope") or f"repository:{repository}:pull")) if v}
        realm = params["realm"]
        token_url = realm + ("&" if "?" in realm else "?") + urllib.parse.urlencode(query)
        if self.credentials and urllib.parse.urlsplit(realm).scheme != "https":
            # The realm is the registry's to name; the password goes nowhere in clear text.
            raise RegistryError(f"{redact(url)}: the registry sends its token requests to {redact(realm)}, which is not "
                                "https: k4w does not send the registry's password there")
        headers = {"Authorization": self.credentials.basic()} if self.credentials else {}
        try:
            body = self._get(token_url, headers, limit=MAX_DOCUMENT_BYTES)[1]
        except urllib.error.HTTPError as exc:
            who = "these credentials" if self.credentials else "no credentials: give the registry's in cluster.yml"
            raise RegistryError(f"{redact(token_url)}: the token server refused ({who}): HTTP {exc.code} {exc.reason}") from None
        try:
            answer = json.loads(body)
            token = answer.get("token") or answer.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise RegistryError(f"{redact(token_url)}: the token server's answer holds no token")
        register_secret(token)
        self._auth[repository] = f"Bearer {token}"

    def _get(self, url: str, headers: dict[str, str], limit: int, method: str = "GET") -> tuple[dict[str, str], bytes]:
        """GET (or HEAD) url with headers sent to its host only; (response headers, body). An HTTP error
        status passes through as urllib's HTTPError, for the caller to answer or report."""
        try:
            with download.opener(url, self.proxy, self.context).open(download.request(url, headers, method), timeout=download.TIMEOUT_S) as resp:
                body = resp.read(limit + 1)
                found = {k.lower(): v for k, v in resp.headers.items()}
        except urllib.error.HTTPError:
            raise
        except (urllib.error.URLError, OSError) as exc:
            raise RegistryError(f"{redact(url)}: {redact(str(getattr(exc, 'reason', exc)))}") from None
        if len(body) > limit:
            raise RegistryError(f"{redact(url)}: the answer is larger than {limit} bytes")
        return found, body

    def _get_authorized(self, repository: str, url: str, headers: dict[str, str], limit: int
                        ) -> tuple[dict[str, str], bytes]:
        for attempt in (1, 2):
            sent = dict(headers)
            if repository in self._auth:
                sent["Authorization"] = self._auth[repository]
            try:
                return self._get(url, sent, limit)
            except urllib.error.HTTPError as exc:
                if exc.code == 401 and attempt == 1:
                    self._authorize(repository, exc.headers.get("WWW-Authenticate"), url)
                    continue
                raise RegistryError(f"{redact(url)}: HTTP {exc.code} {exc.reason}") from None
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ manifests and blobs

    def manifest(self, repository: str, reference: str) -> Fetched:
        """The manifest or index `reference` (a tag or a digest) names, checked against its digest."""
        url = self.url(repository, "manifests", reference)
        headers, body = self._get_authorized(repository, url, {"Accept": ACCEPT}, MAX_DOCUMENT_BYTES)
        got = sha256(body)
        wanted = reference if DIGEST.match(reference) else headers.get("docker-content-digest")
        if wanted and wanted != got:
            raise RegistryError(f"{redact(url)}: the manifest's sha256 is {got}, not {wanted}: refused")
        media_type = headers.get("content-type", "").split(";")[0].strip()
        if media_type not in (*INDEXES, *MANIFESTS):
            media_type = json.loads(body).get("mediaType", "") if body.startswith(b"{") else ""
        if media_type not in (*INDEXES, *MANIFESTS):
            raise RegistryError(f"{redact(url)}: not an image manifest or index (media type {media_type or 'none'})")
        return Fetched(media_type, got, body)

    def blob(self, repository: str, digest: str, dest: Path, progress: download.Progress | None = None) -> int:
        """Fetch blob `digest` to dest (resuming dest.part), verified; the bytes fetched (0 when dest was whole)."""
        if not DIGEST.match(digest):
            raise RegistryError(f"{repository}: blob digest {digest!r} is not a sha256 digest")
        url = self.url(repository, "blobs", digest)
        expected = download.Expected("sha256", digest.split(":", 1)[1])
        for attempt in (1, 2):
            headers = {"Authorization": self._auth[repository]} if repository in self._auth else {}
            try:
                return download.download(url, dest, expected, self.proxy, progress, headers=headers,
                                         context=self.context).fetched_bytes
            except download.DownloadError as exc:
                # A blob fetched before any manifest (or after its token expired) meets the challenge here.
                if attempt == 1 and exc.status == 401:
                    self._authorize(repository, self._challenge_of(url), url)
                    continue
                raise RegistryError(str(exc)) from None
        raise AssertionError("unreachable")

    def _challenge_of(self, url: str) -> str | None:
        """The WWW-Authenticate of url's 401, asked with a HEAD (the refused GET went through download())."""
        try:
            self._get(url, {}, limit=0, method="HEAD")
        except urllib.error.HTTPError as exc:
            return exc.headers.get("WWW-Authenticate")
        return None


def select(index: Fetched, platform: Platform, where: str) -> str:
    """The digest of index's manifest for platform, as containerd picks it: of those that run there, the
    highest os.version (platforms v1.0.0-rc.5 windowsMatchComparer.Less compares the strings), else the
    first; refused naming what the index offers."""
    offered = [m for m in index.document().get("manifests", []) if m.get("mediaType", OCI_MANIFEST) in MANIFESTS]
    chosen = [m for m in offered if platform.matches(m.get("platform") or {})]
    if not chosen:
        listed = ", ".join(sorted(describe(m.get("platform") or {}) for m in offered)) or "nothing"
        raise RegistryError(f"{where}: no manifest for {platform} in its index (it has: {listed})")
    return sorted(chosen, key=lambda m: (m.get("platform") or {}).get("os.version") or "", reverse=True)[0]["digest"]


def pull(registry: Registry, name: str, repository: str, reference: str, platform: Platform, layout: Path,
         progress: download.Progress | None = None) -> Pulled:
    """Pull image `name` (repository:reference on registry) for platform into the OCI layout folder."""
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    where = f"{name} ({registry.endpoint})"
    top = registry.manifest(repository, reference)
    kept = []
    if top.media_type in INDEXES:
        _keep(blobs, top)
        kept.append(top.digest)
        top = registry.manifest(repository, select(top, platform, where))
        if top.media_type not in MANIFESTS:
            raise RegistryError(f"{where}: the index names {top.digest}, which is not an image manifest")
    manifest = top.document()
    config = manifest.get("config") or {}
    described = json.loads(_fetch_config(registry, repository, config, blobs, where))
    if not platform.matches(described):
        raise RegistryError(f"{where}: its config is for {describe(described)}, not {platform}")
    _keep(blobs, top)
    kept += [top.digest, config["digest"]]
    fetched = 0
    for layer in manifest.get("layers", []):
        digest = layer.get("digest", "")
        dest = blobs / digest.split(":", 1)[-1]
        if layer.get("urls"):
            fetched += _foreign(registry, repository, layer, dest, where, progress)
        else:
            fetched += registry.blob(repository, digest, dest, progress)
        kept.append(digest)
    _write_index(layout, name, top, {k: described[k] for k in ("os", "architecture", "os.version") if described.get(k)})
    return Pulled(name=name, digest=top.digest, blobs=tuple(kept), bytes_fetched=fetched)


def _foreign(registry: Registry, repository: str, layer: dict, dest: Path, where: str,
             progress: download.Progress | None) -> int:
    """A foreign layer (the Windows base images of Windows Server 2016 to 1803: Microsoft serves them from its
    own URLs and marks them non-distributable) from the https URLs its descriptor names, in order, then from
    the registry (one that allows non-distributable artifacts holds it), the way Docker's pull fetches it;
    every copy is checked against the layer's digest. The bytes fetched."""
    digest = layer.get("digest", "")
    if not DIGEST.match(digest):
        raise RegistryError(f"{where}: layer digest {digest!r} is not a sha256 digest")
    expected = download.Expected("sha256", digest.split(":", 1)[1])
    tried = []
    for url in layer.get("urls") or []:
        if urllib.parse.urlsplit(str(url)).scheme != "https":
            tried.append(f"{redact(str(url))}: not https, not asked")
            continue
        try:
            # No registry credentials: the URL is another server's.
            return download.download(str(url), dest, expected, registry.proxy, progress, context=registry.context).fetched_bytes
        except download.DownloadError as exc:
            tried.append(str(exc))
    try:
        return registry.blob(repository, digest, dest, progress)
    except RegistryError as exc:
        tried.append(str(exc))
    raise RegistryError(f"{where}: foreign layer {digest} could not be fetched: " + "; ".join(tried))


def _fetch_config(registry: Registry, repository: str, config: dict, blobs: Path, where: str) -> bytes:
    digest = config.get("digest", "")
    if not DIGEST.match(digest):
        raise RegistryError(f"{where}: the manifest names no sha256 config ({digest or 'none'})")
    path = blobs / digest.split(":", 1)[1]
    registry.blob(repository, digest, path)
    return path.read_bytes()


def _keep(blobs: Path, fetched: Fetched) -> None:
    path = blobs / fetched.digest.split(":", 1)[1]
    if not path.is_file():
        files.write_bytes(path, fetched.data)


def _write_index(layout: Path, name: str, manifest: Fetched, platform: dict) -> None:
    """index.json of the layout: this image's entry, with the platform its config names, replaces an older
    one of the same name and platform (one layout may hold an image's Windows variants of two builds).
    Under the index's lock: the host cache is one layout, and two fetches may add images to it at once."""
    path = layout / "index.json"
    with filelock.updating(path):
        if not (layout / "oci-layout").is_file():
            files.write_file(layout / "oci-layout", json.dumps(LAYOUT_VERSION))
        index = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"schemaVersion": 2, "manifests": []}
        files.write_file(path, json.dumps(_with_entry(index, name, manifest, platform), indent=2) + "\n")


def _with_entry(index: dict, name: str, manifest: Fetched, platform: dict) -> dict:
    tag = name.rsplit("@", 1)[0].rpartition(":")[2] if ":" in name.rsplit("/", 1)[-1] else ""
    entry = {"mediaType": manifest.media_type, "digest": manifest.digest, "size": len(manifest.data), "platform": platform,
             "annotations": {CONTAINERD_NAME: name, **({OCI_REF_NAME: tag} if tag else {})}}
    index["manifests"] = [m for m in index.get("manifests", [])
                          if ((m.get("annotations") or {}).get(CONTAINERD_NAME), m.get("platform")) != (name, platform)] + [entry]
    index["mediaType"] = OCI_INDEX
    return index
