"""ci/e2e/registry.py: the REAL pinned CNCF distribution registry (tools/lock.yml distribution-registry, group
ci, so CI has it) on 127.0.0.1, one per upstream, over TLS with a throwaway CA. An image built with
oci_archive is pushed by the module's own client and pulled back by an HTTPS client that trusts only that
CA, under the repository a node's containerd asks the mirror for; its `registry:` block loads as a
cluster.yml and passes k4w's own registry checks; every image the libvirt cluster run needs has a mirror."""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import socket
import struct
import threading
import ssl
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from k4w import render
from k4w.derive import registry as derive_registry
from k4w.derive.cluster import Cluster
from k4w.infra.errors import ToolMissing
from k4w.model import config
from k4w.validate import registry_rules
from k4w.verify import workloads
from ci.e2e import cluster_file, cluster_images, cluster_run, oci_archive, procs, registry
from ci.e2e.phases import E2EError

ACCEPT = ", ".join([oci_archive.MANIFEST_TYPE, oci_archive.INDEX_TYPE])


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def small_image(tmp_path: Path, name: str) -> tuple[Path, str]:
    payload = tmp_path / "payload.txt"
    payload.write_bytes(b"k4w registry test " + name.encode() + b"\n")
    archive = tmp_path / cluster_images.archive_name(name)
    digest = oci_archive.write(archive, oci_archive.Image(name=name, entries=[oci_archive.Entry("/k4w/payload.txt", source=payload, mode=0o644)]))
    return archive, digest


def get(reg: registry.Registry, path: str, headers: dict | None = None, ca: Path | None = None) -> tuple[int, dict, bytes]:
    """A pull the way a node's client does it: HTTPS to the IP, trusting only the mirror's CA file."""
    context = ssl.create_default_context(cafile=str(ca or reg.ca))
    conn = http.client.HTTPSConnection(reg.address, reg.port, timeout=30, context=context)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def mirrors(tmp_path_factory):
    work = tmp_path_factory.mktemp("registries")
    with registry.serving("127.0.0.1", work) as running:
        yield running
    # Stopped by PID when the block ended: nothing left behind.
    left = [r.pid for r in running.registries.values() if procs.alive(r.pid)]
    assert not left, f"registry processes still running after the block: {left}"


# ------------------------------------------------------------------ names (no registry needed)


@pytest.mark.parametrize("name, expected", [
    ("registry.k8s.io/kube-apiserver:v1.37.2", ("registry.k8s.io", "kube-apiserver", "v1.37.2")),
    ("registry.k8s.io/coredns/coredns:v1.14.6", ("registry.k8s.io", "coredns/coredns", "v1.14.6")),
    ("ghcr.io/flannel-io/flannel:v0.28.10", ("ghcr.io", "flannel-io/flannel", "v0.28.10")),
    ("busybox:1.28", ("docker.io", "library/busybox", "1.28")),
    ("docker.io/library/nginx:1.15-alpine", ("docker.io", "library/nginx", "1.15-alpine")),
    ("localhost:5000/x/y:1", ("localhost:5000", "x/y", "1")),
])
def test_an_image_name_maps_to_the_repository_its_mirror_is_asked_for(name, expected):
    assert registry.mirror_reference(name) == expected


def test_a_name_without_a_tag_is_refused():
    with pytest.raises(E2EError, match="has no tag"):
        registry.mirror_reference("registry.k8s.io/pause")


def test_without_the_built_registry_the_error_names_the_build_command(monkeypatch, tmp_path):
    monkeypatch.setenv("K4W_TOOLS_DIR", str(tmp_path / "empty"))
    with pytest.raises(ToolMissing, match=r"scripts/build-tools --group ci"):
        registry.registry_binary()


def test_every_image_the_cluster_run_pulls_has_a_mirror_here(tmp_path):
    """What kubeadm lists for the e2e config, the Flannel manifest's images and the cluster-test workloads:
    each maps to one of UPSTREAMS (an image from another registry would find no mirror and fail the run)."""
    out = tmp_path / "out"
    cfg = config.parse(cluster_file.text("http://10.0.2.2:40123", "http://127.0.0.1:40124", str(tmp_path / "cache"), cluster_run.BOX))
    render.render(Cluster.resolve(cfg), out)
    names = cluster_images.required(out) + [workloads.BUSYBOX_IMAGE, workloads.NGINX_IMAGE]
    upstreams = {registry.mirror_reference(name)[0] for name in names}
    assert upstreams == set(registry.UPSTREAMS), names
    # The workload archives are pushed under the names the pods give, as containerd spells them.
    assert {registry.mirror_reference(n)[1:] for n in (workloads.BUSYBOX_IMAGE, workloads.NGINX_IMAGE)} == \
        {registry.mirror_reference(n)[1:] for n in (registry.BUSYBOX_NAME, registry.NGINX_NAME)}


# ------------------------------------------------------------------ the real registry


def test_each_upstream_gets_its_own_registry_answering_v2_over_tls(mirrors):
    assert set(mirrors.registries) == set(registry.UPSTREAMS)
    assert len({r.endpoint for r in mirrors.registries.values()}) == len(registry.UPSTREAMS)
    for reg in mirrors.registries.values():
        status, headers, _ = get(reg, "/v2/")
        assert status == 200 and headers.get("docker-distribution-api-version") == "registry/2.0"


def test_a_pushed_image_pulls_back_with_the_same_digests(mirrors, tmp_path):
    name = "ghcr.io/flannel-io/flannel:k4w-test"
    archive, digest = small_image(tmp_path, name)
    assert mirrors.push(name, archive) == digest
    reg = mirrors.registries["ghcr.io"]
    # containerd's mirror request: the upstream's path and ?ns=<upstream> (k4w/derive/registry.py).
    status, headers, manifest = get(reg, "/v2/flannel-io/flannel/manifests/k4w-test?ns=ghcr.io", {"Accept": ACCEPT})
    assert status == 200, manifest
    assert sha256(manifest) == digest == headers["docker-content-digest"]
    assert headers["content-type"] == oci_archive.MANIFEST_TYPE
    parsed = json.loads(manifest)
    for item in [parsed["config"], *parsed["layers"]]:
        status, _, blob = get(reg, f"/v2/flannel-io/flannel/blobs/{item['digest']}")
        assert status == 200 and sha256(blob) == item["digest"] and len(blob) == item["size"]
    # By digest too (containerd fetches the manifest again by the digest it resolved).
    status, _, again = get(reg, f"/v2/flannel-io/flannel/manifests/{digest}", {"Accept": ACCEPT})
    assert status == 200 and again == manifest
    # A second push of the same archive is the same image (blobs found by HEAD, not uploaded again).
    before = len(reg.requests())
    assert mirrors.push(name, archive) == digest
    posts = [r for r in reg.requests()[before:] if r.method == "POST"]
    assert posts == []


def test_an_image_is_only_on_its_upstreams_mirror_and_an_unknown_tag_is_404(mirrors, tmp_path):
    name = "busybox:k4w-test"
    archive, _ = small_image(tmp_path, name)
    mirrors.push(name, archive)
    hub, k8s = mirrors.registries["docker.io"], mirrors.registries["registry.k8s.io"]
    assert get(hub, "/v2/library/busybox/manifests/k4w-test", {"Accept": ACCEPT})[0] == 200
    status, _, body = get(hub, "/v2/library/busybox/manifests/no-such-tag", {"Accept": ACCEPT})
    assert status == 404 and json.loads(body)["errors"][0]["code"] == "MANIFEST_UNKNOWN"
    status, _, body = get(k8s, "/v2/library/busybox/manifests/k4w-test", {"Accept": ACCEPT})
    assert status == 404, body


def test_a_client_that_does_not_trust_the_ca_is_refused(mirrors, tmp_path):
    other = registry.make_tls(tmp_path / "other", "127.0.0.1")
    with pytest.raises(ssl.SSLCertVerificationError):
        get(mirrors.registries["docker.io"], "/v2/", ca=other.ca)


def test_the_access_log_counts_every_request_with_its_status(mirrors, tmp_path):
    reg = mirrors.registries["registry.k8s.io"]
    before = mirrors.request_counts()
    get(reg, "/v2/pause/manifests/k4w-missing", {"Accept": ACCEPT})
    get(reg, "/v2/")
    time.sleep(0.2)  # the handler writes its line after the response
    found = reg.requests()[before["registry.k8s.io"]:]
    assert [(r.method, r.path, r.status) for r in found] == [("GET", "/v2/pause/manifests/k4w-missing", 404), ("GET", "/v2/", 200)]
    assert mirrors.request_count(since=before) == 2


def test_the_registry_block_loads_as_cluster_yml_and_passes_the_registry_checks(mirrors, tmp_path):
    text = cluster_file.text("http://10.0.2.2:40123", "http://127.0.0.1:40124", str(tmp_path / "cache"), cluster_run.BOX)
    data = yaml.safe_load(text)
    data["registry"] = mirrors.registry_block()
    path = tmp_path / "cluster.yml"
    path.write_text(yaml.safe_dump(data))
    cluster = Cluster.resolve(config.load(path), config_file=path)
    out = tmp_path / "out"
    render.render(cluster, out)
    checked, problems = registry_rules.check(cluster, out)
    assert problems == [], problems
    files = derive_registry.certs_d(cluster.config)
    for upstream, reg in mirrors.registries.items():
        folder = derive_registry.host_dir(upstream)
        assert f'[host."{reg.endpoint}"]' in files[f"{folder}/hosts.toml"]
        assert files[f"{folder}/ca.crt"] == mirrors.ca.read_text()
    # A loopback (and the libvirt network's private) address is reached around the proxy.
    assert derive_registry.no_proxy_hosts(cluster.config) == ["127.0.0.1"]


def test_a_registry_stops_by_pid_and_a_port_in_use_is_named(tmp_path):
    with registry.serving("127.0.0.1", tmp_path / "a", upstreams=("docker.io",)) as first:
        pid = first.pids()[0]
        assert procs.alive(pid)
        taken = first.registries["docker.io"].port
        with pytest.raises(E2EError, match=r"docker.io mirror \(registry on 127.0.0.1:\d+\) exited"):
            with registry.serving("127.0.0.1", tmp_path / "b", upstreams=("docker.io",), ports={"docker.io": taken}):
                pass
    assert not procs.alive(pid)


# ------------------------------------------------------------------ the workload images


def test_the_workload_images_run_what_cluster_test_runs_in_them(tmp_path):
    built, named = registry.workload_images(tmp_path / "images")
    assert [b.name for b in built] == [registry.BUSYBOX_NAME, registry.NGINX_NAME]
    assert named[registry.NGINX_NAME]["kind"] == "substitute"
    assert named[registry.BUSYBOX_NAME]["kind"] == "stand-in"
    box = oci_archive.read(built[0].archive)
    assert box.problems == [] and box.names == [registry.BUSYBOX_NAME]
    # The client pod's command and the probes' programs (k4w/verify/workloads.py, probes.py).
    for program in ("sleep", "sh", "nslookup", "wget", "nc", "echo"):
        assert f"/bin/{program}" in box.files, program
    web = oci_archive.read(built[1].archive)
    entrypoint = web.config["config"]["Entrypoint"]
    assert entrypoint[:2] == ["/bin/busybox", "httpd"] and entrypoint[entrypoint.index("-p") + 1] == str(workloads.HTTP_PORT)
    assert "-f" in entrypoint  # in the foreground: the container's own process


def test_the_nginx_substitute_answers_get_slash_with_its_page(tmp_path):
    """The image's own files and entrypoint, run from its unpacked layer, on a free port instead of 80."""
    built, _ = registry.workload_images(tmp_path / "images")
    root = tmp_path / "rootfs"
    oci_archive.unpack(built[1].archive, root)
    entrypoint = oci_archive.read(built[1].archive).config["config"]["Entrypoint"]
    port = registry.free_port("127.0.0.1")
    argv = [str(root / entrypoint[0].lstrip("/"))] + entrypoint[1:]
    argv[argv.index("-p") + 1] = f"127.0.0.1:{port}"
    argv[argv.index("-h") + 1] = str(root / argv[argv.index("-h") + 1].lstrip("/"))
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/")
                response = conn.getresponse()
                break
            except OSError:
                assert server.poll() is None, server.stderr.read()
                assert time.monotonic() < deadline, "busybox httpd did not answer"
                time.sleep(0.1)
        assert response.status == 200 and response.read() == registry.INDEX_HTML
    finally:
        server.terminate()
        server.wait(10)


def test_the_server_key_is_owner_only_and_the_ca_key_is_nowhere(tmp_path):
    tls = registry.make_tls(tmp_path / "tls", "192.168.123.1")
    assert tls.key.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in (tmp_path / "tls").iterdir()) == ["ca.pem", "server.key", "server.pem"]
    assert b"PRIVATE KEY" not in tls.ca.read_bytes() + tls.cert.read_bytes()


def _dns_server() -> tuple[socket.socket, threading.Thread]:
    """A UDP DNS answerer on a free loopback port (RFC 1035 4.1): NXDOMAIN (rcode 3) for names with
    'missing', else NOERROR with one A record for A queries and none for others (as CoreDNS answers
    AAAA for an IPv4-only Service)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)

    def serve() -> None:
        while sock.fileno() != -1:
            try:
                data, peer = sock.recvfrom(512)
            except (TimeoutError, OSError):
                continue
            question = data[12:]
            end = question.index(b"\0") + 5
            nxdomain = b"missing" in question[:end]
            qtype = struct.unpack(">H", question[end - 4:end - 2])[0]
            answer = b"" if nxdomain or qtype != 1 else \
                b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 60, 4) + socket.inet_aton("10.96.0.10")
            header = struct.pack(">HHHHHH", struct.unpack(">H", data[:2])[0], 0x8180 | (3 if nxdomain else 0), 1,
                                 1 if answer else 0, 0, 0)
            with contextlib.suppress(OSError):
                sock.sendto(header + question[:end] + answer, peer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return sock, thread


def test_the_busybox_stand_ins_nslookup_exits_non_zero_only_when_a_name_does_not_resolve(tmp_path):
    """k4w/verify/probes.py reads nslookup's exit status (busybox 1.28's behaviour); the stand-in is another
    busybox version, so its own binary, unpacked from the image, is held to the same."""
    built, _ = registry.workload_images(tmp_path / "images")
    root = tmp_path / "rootfs"
    oci_archive.unpack(built[0].archive, root)
    sock, thread = _dns_server()
    server = f"127.0.0.1:{sock.getsockname()[1]}"
    try:
        def lookup(name: str) -> subprocess.CompletedProcess:
            return subprocess.run([str(root / "bin" / "nslookup"), name, server], capture_output=True, text=True, timeout=30)

        found = lookup("web.k4w-test.svc.cluster.local")
        assert found.returncode == 0 and "10.96.0.10" in found.stdout, found.stdout + found.stderr
        missing = lookup("missing.k4w-test.svc.cluster.local")
        assert missing.returncode != 0 and "NXDOMAIN" in missing.stdout + missing.stderr, missing.stdout
    finally:
        sock.close()
        thread.join(5)


def test_an_address_this_host_lacks_is_named(tmp_path):
    # 192.0.2.0/24 is TEST-NET-1 (RFC 5737): no host has it.
    with pytest.raises(E2EError, match=r"cannot listen on 192\.0\.2\.1: .*libvirt management network"):
        with registry.serving("192.0.2.1", tmp_path):
            pass
