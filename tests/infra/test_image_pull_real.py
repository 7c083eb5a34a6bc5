"""k4w.infra.image_pull against a REAL registry: the pinned CNCF distribution (tools/lock.yml
distribution-registry, started by ci/e2e/registry.py) on 127.0.0.1 over TLS with a throwaway CA,
serving an image built here (ci/e2e/oci_archive.py) and pushed with the distribution API.

What a user would notice: the image arrives whole and by digest; a cut download resumes where it
stopped; a blob whose bytes do not match its digest is refused and nothing of it stays; an index is
resolved to the host's platform, and a platform it lacks is refused naming what it has; a registry that
asks for a token gets one from its realm (a token server here that signs what the real registry
verifies). Only the Basic challenge is answered by a stand-in (tests/fakes/oci_registry.py), named there.
"""

from __future__ import annotations

import base64
import functools
import datetime
import hashlib
import http.server
import json
import os
import ssl
import subprocess
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

from ci.e2e import oci_archive, registry
from k4w.infra import image_pull
from tests.fakes import oci_registry as fake
from tests.helpers import image_archive

NAME = "registry.k8s.io/k4w-test:v1"
REPOSITORY, TAG = "k4w-test", "v1"
LINUX = image_pull.Platform("linux", "amd64")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One registry (the mirror of registry.k8s.io) with NAME pushed: (mirror, manifest digest, layer digest)."""
    work = tmp_path_factory.mktemp("registry")
    # Larger than download.CHUNK, so a cut falls inside the layer.
    archive = image_archive(work, NAME, 3 * 1024 * 1024)
    with registry.serving("127.0.0.1", work / "served", upstreams=("registry.k8s.io",)) as mirrors:
        digest = mirrors.push(NAME, archive)
        mirror = mirrors.registries["registry.k8s.io"]
        status, _, body = mirror.call("GET", f"/v2/{REPOSITORY}/manifests/{TAG}",
                                      headers={"Accept": oci_archive.MANIFEST_TYPE})
        assert status == 200
        layer = json.loads(body)["layers"][0]["digest"]
        yield mirror, digest, layer


def client(mirror) -> image_pull.Registry:
    return image_pull.Registry(mirror.endpoint, ca=mirror.ca)


def blob_path(layout: Path, digest: str) -> Path:
    return layout / "blobs" / "sha256" / digest.split(":", 1)[1]


def test_pull_writes_an_oci_layout_with_every_blob_by_its_digest(served, tmp_path):
    mirror, digest, layer = served
    pulled = image_pull.pull(client(mirror), NAME, REPOSITORY, TAG, LINUX, tmp_path / "layout")

    assert pulled.digest == digest
    assert pulled.bytes_fetched > 3 * 1024 * 1024
    layout = tmp_path / "layout"
    assert json.loads((layout / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    for blob in pulled.blobs:
        assert image_pull.sha256(blob_path(layout, blob).read_bytes()) == blob
    index = json.loads((layout / "index.json").read_text())
    assert [(m["digest"], m["annotations"]) for m in index["manifests"]] == [
        (digest, {image_pull.CONTAINERD_NAME: NAME, image_pull.OCI_REF_NAME: TAG})]
    assert not list(layout.rglob("*.part"))

    again = image_pull.pull(client(mirror), NAME, REPOSITORY, TAG, LINUX, layout)
    assert again.bytes_fetched == 0   # every blob was there and matched: nothing fetched twice


def test_a_cut_download_resumes_where_it_stopped(served, tmp_path):
    mirror, _, layer = served
    layout = tmp_path / "layout"
    whole = image_pull.pull(client(mirror), NAME, REPOSITORY, TAG, LINUX, layout)
    path = blob_path(layout, layer)
    data = path.read_bytes()
    path.unlink()
    half = len(data) // 2
    path.with_name(path.name + ".part").write_bytes(data[:half])

    resumed = image_pull.pull(client(mirror), NAME, REPOSITORY, TAG, LINUX, layout)

    assert resumed.bytes_fetched == len(data) - half
    assert path.read_bytes() == data
    assert whole.digest == resumed.digest


def test_a_blob_that_does_not_match_its_digest_is_refused_and_not_kept(tmp_path):
    work = tmp_path / "tampered"
    archive = image_archive(work, NAME, 64 * 1024)
    with registry.serving("127.0.0.1", work / "served", upstreams=("registry.k8s.io",)) as mirrors:
        mirrors.push(NAME, archive)
        mirror = mirrors.registries["registry.k8s.io"]
        _, _, body = mirror.call("GET", f"/v2/{REPOSITORY}/manifests/{TAG}", headers={"Accept": oci_archive.MANIFEST_TYPE})
        layer = json.loads(body)["layers"][0]["digest"]
        # The registry's own copy of the layer, changed in place (same length): what a bad disk or a
        # rewriting proxy would serve.
        stored = next((work / "served").rglob(f"blobs/sha256/{layer[7:9]}/{layer[7:]}/data"))
        changed = bytearray(stored.read_bytes())
        changed[len(changed) // 2] ^= 0xFF
        stored.write_bytes(bytes(changed))

        with pytest.raises(image_pull.RegistryError, match=f"sha256 mismatch: expected {layer[7:]}"):
            image_pull.pull(client(mirror), NAME, REPOSITORY, TAG, LINUX, tmp_path / "layout")

    assert not blob_path(tmp_path / "layout", layer).exists()
    assert not list((tmp_path / "layout").rglob("*.part"))
    assert not (tmp_path / "layout" / "index.json").exists()


def test_an_index_resolves_to_the_wanted_platform_and_refuses_one_it_lacks(served, tmp_path):
    mirror, digest, _ = served
    _, _, manifest = mirror.call("GET", f"/v2/{REPOSITORY}/manifests/{TAG}", headers={"Accept": oci_archive.MANIFEST_TYPE})
    # An index naming the image for linux/amd64, and (falsely) for linux/arm64 too.
    index = json.dumps({"schemaVersion": 2, "mediaType": image_pull.OCI_INDEX, "manifests": [
        {"mediaType": image_pull.OCI_MANIFEST, "digest": digest, "size": len(manifest),
         "platform": {"os": "linux", "architecture": arch}} for arch in ("amd64", "arm64")]}).encode()
    mirror.push_manifest(REPOSITORY, "multi", index, image_pull.OCI_INDEX)
    name = "registry.k8s.io/k4w-test:multi"

    pulled = image_pull.pull(client(mirror), name, REPOSITORY, "multi", LINUX, tmp_path / "layout")
    assert pulled.digest == digest
    assert image_pull.sha256(index) in pulled.blobs

    windows = image_pull.Platform("windows", "amd64", 26100)
    with pytest.raises(image_pull.RegistryError, match=r"no manifest for windows/amd64 \(build 26100\) in its index "
                                                         r"\(it has: linux/amd64, linux/arm64\)"):
        image_pull.pull(client(mirror), name, REPOSITORY, "multi", windows, tmp_path / "layout")
    with pytest.raises(image_pull.RegistryError, match="its config is for linux/amd64, not linux/arm64"):
        image_pull.pull(client(mirror), name, REPOSITORY, "multi", image_pull.Platform("linux", "arm64"), tmp_path / "other")


def test_a_manifest_asked_for_by_digest_must_hash_to_it(served, tmp_path):
    mirror, digest, _ = served
    pulled = image_pull.pull(client(mirror), f"registry.k8s.io/k4w-test@{digest}", REPOSITORY, digest, LINUX, tmp_path / "l")
    assert pulled.digest == digest
    other = "sha256:" + "0" * 64
    with pytest.raises(image_pull.RegistryError, match="HTTP 404"):
        image_pull.pull(client(mirror), f"registry.k8s.io/k4w-test@{other}", REPOSITORY, other, LINUX, tmp_path / "l")


def test_a_registry_behind_an_untrusted_certificate_is_refused(served, tmp_path):
    mirror, _, _ = served
    with pytest.raises(image_pull.RegistryError, match="CERTIFICATE_VERIFY_FAILED"):
        image_pull.pull(image_pull.Registry(mirror.endpoint), NAME, REPOSITORY, TAG, LINUX, tmp_path / "layout")


def test_a_mirrors_ca_is_trusted_beside_the_system_roots(served):
    """A mirror's own CA must not replace the public roots: its token realm may have a public certificate."""
    mirror, _, _ = served
    system = ssl.create_default_context().cert_store_stats()["x509_ca"]
    with_ca = image_pull.trust(mirror.ca).cert_store_stats()["x509_ca"]
    assert system > 0
    assert with_ca == system + 1


# ------------------------------------------------------------------ token authentication

USER, PASSWORD = "k4w-puller", "s3cr3t@token"
SERVICE, ISSUER = "k4w-test-registry", "k4w-test-token-server"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenServer:
    """The realm of the registry's challenge: hands out ES256 tokens (distribution's "Token
    Authentication Specification") to USER:PASSWORD, signed with a key whose certificate the registry
    trusts (auth.token.rootcertbundle); records what each request asked and sent."""

    def __init__(self, folder: Path, tls: registry.Tls):

        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ISSUER)])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(self.key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=1)).sign(self.key, hashes.SHA256()))
        self.root = folder / "token-root.pem"
        self.root.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        numbers = self.key.public_key().public_numbers()
        # distribution v3.1.2 registry/auth/token/util.go getJWKThumbprint: RFC 7638 over big.Int.Bytes().
        jwk = '{"crv":"P-256","kty":"EC","x":"%s","y":"%s"}' % (
            _b64(numbers.x.to_bytes((numbers.x.bit_length() + 7) // 8, "big")),
            _b64(numbers.y.to_bytes((numbers.y.bit_length() + 7) // 8, "big")))
        self.kid = _b64(hashlib.sha256(jwk.encode()).digest())
        self.seen: list[dict] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                query = parse_qs(urlsplit(self.path).query)
                auth = self.headers.get("Authorization", "")
                server.seen.append({"query": query, "authorization": auth})
                if auth != "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode():
                    self.send_response(401)
                    self.end_headers()
                    return
                body = json.dumps({"token": server.token(query["scope"][0])}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # The registry's own certificate (its SAN is 127.0.0.1): the client trusts the same CA for both.
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(tls.cert), str(tls.key))
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.realm = f"https://127.0.0.1:{self.httpd.server_address[1]}/token"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def token(self, scope: str) -> str:
        kind, name, actions = scope.split(":")
        now = int(time.time())
        header = {"alg": "ES256", "typ": "JWT", "kid": self.kid}
        claims = {"iss": ISSUER, "sub": USER, "aud": SERVICE, "exp": now + 300, "nbf": now - 10, "iat": now,
                  "jti": os.urandom(8).hex(), "access": [{"type": kind, "name": name, "actions": actions.split(",")}]}
        signing = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        r, s = decode_dss_signature(self.key.sign(signing.encode(), ec.ECDSA(hashes.SHA256())))
        return f"{signing}.{_b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def token_registry(tmp_path):
    """The real registry with NAME in its storage, restarted with token authentication (auth.token,
    distribution v3.1.2 registry/auth/token/accesscontroller.go): (registry, token server)."""
    work = tmp_path / "token"
    archive = image_archive(work, NAME, 256 * 1024)
    with registry.serving("127.0.0.1", work / "served", upstreams=("registry.k8s.io",)) as mirrors:
        tokens = TokenServer(work, mirrors.tls)
        mirrors.push(NAME, archive)
        mirror = mirrors.registries["registry.k8s.io"]
        mirror.stop()
        config = yaml.safe_load(registry.config_text(mirror.address, mirror.port, mirror.folder / "storage", mirrors.tls))
        config["auth"] = {"token": {"realm": tokens.realm, "service": SERVICE, "issuer": ISSUER,
                                    "rootcertbundle": str(tokens.root)}}
        path = mirror.folder / "config-token.yml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        with mirror.access_log.open("ab") as out, mirror.server_log.open("ab") as err:
            mirror.process = subprocess.Popen([str(registry.registry_binary()), "serve", str(path)], stdout=out, stderr=err,
                                              env={"PATH": os.environ["PATH"], "OTEL_TRACES_EXPORTER": "none"},
                                              start_new_session=True)
        deadline = time.monotonic() + 30
        while True:   # with authentication on, /v2/ answers 401 once it serves
            try:
                if mirror.call("GET", "/v2/", timeout=5)[0] == 401:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, mirror.log_tail()
            time.sleep(0.2)
        try:
            yield mirror, tokens
        finally:
            tokens.stop()


def test_a_401_is_answered_with_a_token_the_realm_gives_for_the_repositorys_pull(token_registry, tmp_path):
    mirror, tokens = token_registry
    puller = image_pull.Registry(mirror.endpoint, ca=mirror.ca, credentials=image_pull.Credentials(USER, PASSWORD))

    pulled = image_pull.pull(puller, NAME, REPOSITORY, TAG, LINUX, tmp_path / "layout")

    assert pulled.bytes_fetched > 256 * 1024
    assert [(s["query"]["service"], s["query"]["scope"]) for s in tokens.seen] == [([SERVICE], [f"repository:{REPOSITORY}:pull"])]
    # k4w's requests (User-Agent k4w; the pushes before were the harness's): the manifest refused once,
    # then it, the config and the layer with the token.
    assert [(r.method, r.path.split("/")[3], r.status) for r in mirror.requests() if r.agent == "k4w"] == [
        ("GET", "manifests", 401), ("GET", "manifests", 200), ("GET", "blobs", 200), ("GET", "blobs", 200)]
    assert [s["authorization"].split()[0] for s in tokens.seen] == ["Basic"]


def test_wrong_or_missing_credentials_are_refused_without_printing_the_password(token_registry, tmp_path):
    mirror, tokens = token_registry
    wrong = image_pull.Registry(mirror.endpoint, ca=mirror.ca, credentials=image_pull.Credentials(USER, "not-" + PASSWORD))
    with pytest.raises(image_pull.RegistryError) as refused:
        image_pull.pull(wrong, NAME, REPOSITORY, TAG, LINUX, tmp_path / "layout")
    assert "HTTP 401" in str(refused.value) and PASSWORD not in str(refused.value)
    with pytest.raises(image_pull.RegistryError, match="HTTP 401"):
        image_pull.pull(image_pull.Registry(mirror.endpoint, ca=mirror.ca), NAME, REPOSITORY, TAG, LINUX, tmp_path / "layout")
    assert not (tmp_path / "layout" / "index.json").exists()


def test_a_basic_challenge_is_answered_with_the_credentials(tmp_path):
    """The Basic branch against tests/fakes/oci_registry.py, a STAND-IN for a company mirror that asks for a
    user and password (the pinned distribution registry would need a bcrypt htpasswd file: no tool here
    writes one)."""
    ca, cert, key = fake.make_ca_and_server_cert(tmp_path)
    with fake.serve(cert, key, user=USER, password=PASSWORD) as mirror:
        puller = image_pull.Registry(mirror.url, ca=ca, credentials=image_pull.Credentials(USER, PASSWORD))
        pulled = image_pull.pull(puller, NAME, REPOSITORY, TAG, LINUX, tmp_path / "layout")
        anonymous = image_pull.Registry(mirror.url, ca=ca)
        with pytest.raises(image_pull.RegistryError, match="asks for a user name and password"):
            image_pull.pull(anonymous, NAME, REPOSITORY, TAG, LINUX, tmp_path / "other")
    assert pulled.digest == image_pull.sha256(mirror.blobs["manifest"])
    assert [r["user"] for r in mirror.requests[:4]] == [None, USER, USER, USER]


def test_the_password_is_not_sent_to_a_realm_without_tls():
    """A registry names its token server; one on plain http would get the password in clear text."""
    puller = image_pull.Registry("https://mirror.example:5000", credentials=image_pull.Credentials(USER, PASSWORD))
    with pytest.raises(image_pull.RegistryError, match="which is not https: k4w does not send the registry's password there"):
        puller._authorize(REPOSITORY, 'Bearer realm="http://tokens.example/token",service="x"', puller.url(REPOSITORY, "manifests", TAG))
    anonymous = image_pull.Registry("https://mirror.example:5000")
    # Without credentials nothing secret is sent: the realm is asked (here a closed port, RFC 863 discard).
    with pytest.raises(image_pull.RegistryError, match=r"127\.0\.0\.1:9/token\?service=x&scope=repository%3Ak4w-test%3Apull: .*refused"):
        anonymous._authorize(REPOSITORY, 'Bearer realm="http://127.0.0.1:9/token",service="x"', anonymous.url(REPOSITORY, "manifests", TAG))


# ------------------------------------------------------------------ foreign layers (Windows Server 1803)

FOREIGN = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"   # Docker image manifest v2, schema 2


@pytest.fixture
def foreign_image(tmp_path):
    """The real registry, allowed to store manifests naming foreign-layer URLs on 127.0.0.1, and an https file
    server on 127.0.0.1 standing for Microsoft's download site: (mirror, files folder, name, layer bytes, layer url)."""
    work = tmp_path / "foreign"
    files = work / "files"
    files.mkdir(parents=True)
    with registry.serving("127.0.0.1", work / "served", upstreams=("mcr.microsoft.com",),
                          manifest_urls=(r"^https://127\.0\.0\.1:\d+/",)) as mirrors:
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(files))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(mirrors.tls.cert, mirrors.tls.key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            mirror = mirrors.registries["mcr.microsoft.com"]
            layer = os.urandom(300 * 1024)
            url = f"https://127.0.0.1:{server.server_address[1]}/layer.tar.gz"
            config = json.dumps({"architecture": "amd64", "os": "windows", "os.version": "10.0.17134.1",
                                 "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "0" * 64]}}).encode()
            mirror.push_blob("windows/servercore", image_pull.sha256(config), config)
            manifest = json.dumps({"schemaVersion": 2, "mediaType": image_pull.DOCKER_MANIFEST,
                                   "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                                              "digest": image_pull.sha256(config), "size": len(config)},
                                   "layers": [{"mediaType": FOREIGN, "digest": image_pull.sha256(layer), "size": len(layer),
                                               "urls": [url]}]}).encode()
            mirror.push_manifest("windows/servercore", "1803", manifest, image_pull.DOCKER_MANIFEST)
            yield mirror, files, "mcr.microsoft.com/windows/servercore:1803", layer, url
        finally:
            server.shutdown()
            server.server_close()


def test_a_foreign_layer_comes_from_its_url_checked_against_its_digest(foreign_image, tmp_path):
    mirror, files, name, layer, url = foreign_image
    (files / "layer.tar.gz").write_bytes(layer)
    pulled = image_pull.pull(client(mirror), name, "windows/servercore", "1803", image_pull.Platform("windows", "amd64", 17134),
                             tmp_path / "layout")
    assert blob_path(tmp_path / "layout", image_pull.sha256(layer)).read_bytes() == layer
    assert pulled.bytes_fetched == len(layer)
    assert not any("/blobs/" + image_pull.sha256(layer) in r.path for r in mirror.requests())  # not asked of the registry

    (files / "layer.tar.gz").write_bytes(os.urandom(len(layer)))   # the site serves other bytes
    with pytest.raises(image_pull.RegistryError, match=r"foreign layer sha256:[0-9a-f]{64} could not be fetched: .*sha256 mismatch.*HTTP 404"):
        image_pull.pull(client(mirror), name, "windows/servercore", "1803", image_pull.Platform("windows", "amd64", 17134),
                        tmp_path / "other")
    assert not blob_path(tmp_path / "other", image_pull.sha256(layer)).exists()
