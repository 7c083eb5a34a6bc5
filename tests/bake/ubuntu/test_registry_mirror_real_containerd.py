"""The bake's image pre-pull goes to cluster.yml's registry mirror: the REAL containerd and kubeadm.

What runs for real:
- 03-containerd.sh (in a sandbox root) writes config.toml, the certs.d tree (hosts.toml and the
  mirror's CA beside it) and the credentials drop-in from ubuntu-2604's real step variables for a
  cluster.yml with `registry.mirrors.registry.k8s.io` (a relative `ca:` path, user:password@);
- the pinned containerd 2.3.7 (tool cache) reads exactly those files; only their absolute paths are
  moved under the sandbox, and containerd gets a root, state and socket of its own under tmp, with
  NRI off and its opt folder under tmp, so nothing outside tmp is touched;
- the pinned kubeadm pulls through containerd's CRI as 04-kubernetes-node.sh does in the bake
  (`kubeadm config images pull --kubernetes-version --image-repository --cri-socket`).
The mirror is tests/fakes/oci_registry.py over TLS (a throwaway CA) demanding basic credentials, and
answering only the names registry.k8s.io publishes (k4w/validate/facts/upstream-images.yml), as a
pull-through cache does: a name kubeadm builds that the upstream lacks fails here as it would there. The
upstream is made unreachable (containerd's HTTPS_PROXY is a closed port, as a proxy that is down), so
an image only arrives if the mirror served it. Runs as root only (containerd needs it; CI runs as
root): elsewhere it fails naming that, never skips. Everything at nice 19; the daemon always stops.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from k4w.model import config
from k4w.derive import containerd_config, step_env as derive_steps, registry
from k4w.infra import pinned_tools
from k4w.derive.cluster import Cluster
from k4w.validate import registry_rules
from tests.fakes import oci_registry
from tests.helpers import running_daemon

from .conftest import ROOT, make_root, run_step, snapshot
from .test_ubuntu_containerd_era_steps import served  # noqa: F401 (the fixture: Packer's HTTP server)

USER, PASSWORD = "k4w-puller", "s3cr3t@mirror"
KUBE_VERSION = yaml.safe_load((ROOT / "boxes" / "ubuntu-2604.yml").read_text())["kubernetes"]["version"]
# A TCP port nothing listens on (RFC 863 discard): the "proxy" that makes the upstream unreachable.
DEAD_PROXY = "http://127.0.0.1:9"
READY_TIMEOUT = 60  # seconds containerd may take to answer on its socket


def mirrored_cluster(folder: Path, mirror: oci_registry.Registry) -> Cluster:
    data = yaml.safe_load((ROOT / "examples" / "cluster-modern.yml").read_text())
    endpoint = mirror.url.replace("https://", f"https://{USER}:{PASSWORD.replace('@', '%40')}@")
    data["registry"] = {"mirrors": {"registry.k8s.io": {"endpoint": endpoint, "ca": "mirror-ca.pem"}}}
    config_file = folder / "cluster.yml"
    config_file.write_text(yaml.safe_dump(data))
    return Cluster.resolve(config.load(config_file), config_file=config_file)


def guest_env(cluster: Cluster) -> dict[str, str]:
    """ubuntu-2604's (examples/cluster-modern.yml's Linux box) step variables as the guest receives them (Packer's references resolved)."""
    steps = derive_steps.step_env(cluster.profile("ubuntu-2604"), cluster)
    return {name: steps.resolved(value) for name, value in steps.env.items() if name.startswith("K4W_") and name != "K4W_LIB"}


def daemon_config(written: str, root: Path, run: Path) -> str:
    """The config.toml 03-containerd.sh wrote, with its absolute paths moved under the sandbox and a
    private root, state, socket and opt folder for this containerd."""
    text = written
    for path in ("/etc/containerd/certs.d", "/etc/containerd/conf.d", "/run/k4w/containerd"):
        text = text.replace(f"'{path}", f"'{root}{path}")
    assert f"config_path = '{root}/etc/containerd/certs.d'" in text, "03-containerd.sh no longer writes config_path as expected"
    private = (f"root = '{run}/root'\nstate = '{run}/state'\n"
               "disabled_plugins = ['io.containerd.nri.v1.nri']\n")
    version_line = f"version = {containerd_config.CONFIG_VERSION}\n"
    assert text.count(version_line) == 1, "03-containerd.sh no longer writes the config version as expected"
    text = text.replace(version_line, version_line + private, 1)
    # The sockets: in config version 4 they are the server plugins' own tables (containerd@v2.3.7
    # plugins/server/grpc/plugin.go and ttrpc/plugin.go `address`); the top-level [grpc] and [ttrpc]
    # of version 3 are read only from files that containerd migrates (config.go serviceMigrate).
    return text + (f"\n[plugins.'io.containerd.server.v1.grpc']\n  address = '{run}/containerd.sock'\n"
                   f"[plugins.'io.containerd.server.v1.ttrpc']\n  address = '{run}/containerd.sock.ttrpc'\n"
                   f"\n[plugins.'io.containerd.internal.v1.opt']\n  path = '{run}/opt'\n")


@pytest.fixture
def mirror(tmp_path):
    ca, cert, key = oci_registry.make_ca_and_server_cert(tmp_path)
    shutil.copy(ca, tmp_path / "mirror-ca.pem")
    upstream = "registry.k8s.io/"
    names = {name.removeprefix(upstream) for name in registry_rules.published() if name.startswith(upstream)}
    with oci_registry.serve(cert, key, USER, PASSWORD, published=names) as served_registry:
        yield served_registry


@pytest.fixture
def baked(tmp_path, served, mirror):  # noqa: F811 (served is the imported fixture)
    """The sandbox root after 03-containerd.sh ran with the mirror's step variables."""
    env, _, _ = served
    cluster = mirrored_cluster(tmp_path, mirror)
    mirrored = guest_env(cluster)
    root = make_root(tmp_path, "ubuntu-24.04")
    step = {**env, **{k: v for k, v in mirrored.items() if "REGISTRY" in k or k == "K4W_PAUSE_IMAGE"}}
    res = run_step("03-containerd.sh", root, **step)
    assert res.returncode == 0, res.stderr
    return root, mirrored, step


@pytest.fixture
def containerd(tmp_path, baked):
    """The pinned containerd running on the config and files 03-containerd.sh wrote; always stopped."""
    if os.geteuid() != 0:
        pytest.fail("this test runs the real containerd, which needs root (CI runs the suite as root)")
    root, mirrored, _ = baked
    # Its sockets need a short path: a Unix socket's is at most 107 bytes (sun_path), and under
    # xdist tmp_path grows by popen-gwN/, which put containerd.sock.ttrpc past it.
    run = Path(tempfile.mkdtemp(prefix="k4w-ctrd-"))
    config_file = run / "config.toml"
    config_file.write_text(daemon_config((root / "etc" / "containerd" / "config.toml").read_text(), root, run))
    binary = pinned_tools.require("containerd", "containerd")
    ctr = pinned_tools.require("containerd", "ctr")
    socket = run / "containerd.sock"
    env = {**os.environ, "HTTPS_PROXY": DEAD_PROXY, "HTTP_PROXY": DEAD_PROXY, "NO_PROXY": ""}
    try:
        with running_daemon(["nice", "-n", "19", binary, "--config", config_file], env=env, timeout=READY_TIMEOUT,
                            log=run / "containerd.log", what=f"containerd on {socket}",
                            answers=lambda: not subprocess.run([str(ctr), "--address", str(socket), "version"],
                                                               capture_output=True, timeout=30).returncode):
            yield {"socket": socket, "ctr": ctr, "root": root, "mirrored": mirrored, "log": run / "containerd.log"}
    finally:
        shutil.copy(run / "containerd.log", tmp_path / "containerd.log")  # kept with the test's files
        shutil.rmtree(run, ignore_errors=True)


def kubeadm_pull(socket: Path, repository: str) -> subprocess.CompletedProcess:
    """04-kubernetes-node.sh's pre-pull command, with the pinned kubeadm."""
    kubeadm = pinned_tools.require("kubernetes-node", "kubeadm")
    return subprocess.run(["nice", "-n", "19", str(kubeadm), "config", "images", "pull", "--kubernetes-version", f"v{KUBE_VERSION}",
                           "--image-repository", repository, "--cri-socket", f"unix://{socket}"],
                          capture_output=True, text=True, timeout=300)


def listed(d: dict) -> str:
    res = subprocess.run([str(d["ctr"]), "--address", str(d["socket"]), "--namespace", "k8s.io", "images", "ls"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_the_bake_writes_the_mirror_for_containerd_and_the_kubernetes_images_name_it(baked, mirror):
    root, mirrored, _ = baked
    certs = root / "etc" / "containerd" / "certs.d"
    upstream = (certs / "registry.k8s.io" / "hosts.toml").read_text()
    assert f'[host."{mirror.url}"]' in upstream and 'ca = "ca.crt"' in upstream
    assert (certs / "registry.k8s.io" / "ca.crt").read_text() == (root.parent / "mirror-ca.pem").read_text()
    assert not (certs / registry.host_dir(mirror.host)).exists()  # no image names the mirror itself
    # The credentials: a build-scope drop-in in /run, owner-only, never beside the hosts.toml files.
    auth = root / "run" / "k4w" / "containerd" / "k4w-registry-auth.toml"
    assert auth.stat().st_mode & 0o777 == 0o600 and f'password = "{PASSWORD}"' in auth.read_text()
    assert PASSWORD not in "".join(p.read_text() for p in certs.rglob("*") if p.is_file())
    assert not (root / "etc" / "containerd" / "conf.d").exists()
    # kubeadm's image repository and the pinned sandbox image keep their upstream names.
    assert mirrored["K4W_KUBE_IMAGE_REPOSITORY"] == "registry.k8s.io"
    assert f"sandbox = '{mirrored['K4W_PAUSE_IMAGE']}'" in (root / "etc" / "containerd" / "config.toml").read_text()
    assert mirrored["K4W_PAUSE_IMAGE"].startswith("registry.k8s.io/pause:")


def test_the_pre_pull_goes_to_the_mirror_with_its_ca_and_credentials(containerd, mirror):
    # 1. As the bake pulls: kubeadm's images under their upstream names, through the CRI, sent to the
    # mirror by hosts.toml (containerd adds ?ns=registry.k8s.io).
    repository = containerd["mirrored"]["K4W_KUBE_IMAGE_REPOSITORY"]
    res = kubeadm_pull(containerd["socket"], repository)
    assert res.returncode == 0, res.stdout + res.stderr + containerd["log"].read_text()[-3000:]
    # Under the default repository kubeadm names CoreDNS coredns/coredns, as registry.k8s.io publishes it.
    for image in ("kube-apiserver", "kube-proxy", "pause", "coredns/coredns", "etcd"):
        assert mirror.pulled(image), f"no authenticated pull of {image} reached the mirror"
    redirected = [r for r in mirror.requests if r["query"].get("ns") == ["registry.k8s.io"]]
    assert any(r["path"] == f"/v2/kube-apiserver/manifests/v{KUBE_VERSION}" for r in redirected)
    images = listed(containerd)
    assert f"registry.k8s.io/kube-apiserver:v{KUBE_VERSION}" in images
    pause = containerd["mirrored"]["K4W_PAUSE_IMAGE"]
    pause_line = next(line for line in images.splitlines() if line.startswith(pause + " "))
    # The CRI pinned the sandbox image the config names, so the kubelet's image GC spares it.
    assert "io.cri-containerd.pinned=pinned" in pause_line
    # An unauthenticated attempt was answered 401 first; every pull that got content carried the user.
    assert all(r["user"] == USER for r in mirror.requests if "/blobs/" in r["path"])
    # 2. containerd started on config.toml and the credentials drop-in as they are: neither of an older
    # schema it would migrate (and warn about) at every start.
    assert containerd_config.migration_warnings(containerd["log"].read_text()) == []


def test_kubeadms_repository_under_the_mirror_asks_for_a_coredns_name_nobody_publishes(containerd, mirror):
    """The former design, planted: imageRepository naming the mirror. kubeadm then asks for
    <mirror>/coredns:<tag> (its coredns/ path is for the default repository only), which a pull-through
    cache of registry.k8s.io cannot fetch: the pre-pull fails on CoreDNS alone."""
    # The mirror host's own folder, with its CA, as the former design wrote it.
    certs = containerd["root"] / "etc" / "containerd" / "certs.d"
    own = certs / registry.host_dir(mirror.host)
    own.mkdir()
    shutil.copy(certs / "registry.k8s.io" / "ca.crt", own / "ca.crt")
    (own / "hosts.toml").write_text(f'server = "{mirror.url}"\nca = "ca.crt"\n')
    res = kubeadm_pull(containerd["socket"], mirror.host)
    assert res.returncode != 0
    assert re.search(rf"{re.escape(mirror.host)}/coredns:v[\d.]+", res.stdout + res.stderr), res.stdout + res.stderr
    assert mirror.pulled("kube-apiserver") and not mirror.pulled("coredns/coredns")


def test_the_check_fails_without_the_mirrors_files(containerd, mirror):
    """Planted defects: the upstream's hosts.toml without its `ca` line (the mirror's certificate is
    then unknown), then that folder gone (the pull goes to the unreachable upstream). containerd
    reads hosts.toml at every pull, so the running daemon shows it."""
    certs = containerd["root"] / "etc" / "containerd" / "certs.d"
    hosts = certs / "registry.k8s.io" / "hosts.toml"
    kept = hosts.read_text()
    hosts.write_text("".join(line for line in kept.splitlines(keepends=True) if not line.strip().startswith("ca = ")))
    res = kubeadm_pull(containerd["socket"], "registry.k8s.io")
    assert res.returncode != 0 and re.search(r"certificate signed by unknown authority|x509", res.stdout + res.stderr)
    assert "registry.k8s.io/kube-apiserver" not in listed(containerd)

    shutil.rmtree(certs / "registry.k8s.io")
    before = len(mirror.requests)
    res = kubeadm_pull(containerd["socket"], "registry.k8s.io")
    assert res.returncode != 0
    assert not [r for r in mirror.requests[before:] if r["query"].get("ns")]


def test_the_mirror_files_are_idempotent_scoped_and_leave_a_users_own_folder_alone(baked):
    root, _, step = baked
    before = snapshot(root)
    assert run_step("03-containerd.sh", root, **{k: v for k, v in step.items() if k != "PACKER_HTTP_ADDR"}).returncode == 0
    assert snapshot(root) == before  # a second run changes nothing
    certs = root / "etc" / "containerd" / "certs.d"
    (certs / "quay.io").mkdir()
    (certs / "quay.io" / "hosts.toml").write_text('server = "https://quay.io"\n')  # someone else's
    # cluster-up on the node (scope node): the credentials move to /etc/containerd/conf.d, owner-only.
    lib = ROOT / "guest" / "ubuntu" / "lib.sh"
    node = subprocess.run(["bash", "-c", f'set -euo pipefail; source "{lib}"; k4w_configure_registry "$1" "$2" node; '
                           'echo "changed=$K4W_REGISTRY_AUTH_CHANGED"', "-", step["K4W_REGISTRY_FILES"], step["K4W_REGISTRY_AUTH"]],
                          env={"PATH": os.environ["PATH"], "K4W_ROOT": str(root)}, capture_output=True, text=True, timeout=60)
    assert node.returncode == 0 and "changed=1" in node.stdout, node.stderr
    assert not (root / "run" / "k4w" / "containerd" / "k4w-registry-auth.toml").exists()
    assert (root / "etc" / "containerd" / "conf.d" / "k4w-registry-auth.toml").stat().st_mode & 0o777 == 0o600
    # A config without mirrors: k4w's folders and credentials go, the user's folder stays.
    res = run_step("03-containerd.sh", root, **{**{k: v for k, v in step.items() if k != "PACKER_HTTP_ADDR"},
                                                "K4W_REGISTRY_FILES": "", "K4W_REGISTRY_AUTH": ""})
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in certs.iterdir()) == ["quay.io"]
    assert not list((root / "etc" / "containerd" / "conf.d").iterdir())


def test_a_file_outside_a_registry_folder_is_refused(baked):
    root, _, step = baked
    res = run_step("03-containerd.sh", root, **{**{k: v for k, v in step.items() if k != "PACKER_HTTP_ADDR"},
                                                "K4W_REGISTRY_FILES": "../hosts.toml=eA=="})
    assert res.returncode == 1 and "which is not <registry host>/hosts.toml or ca.crt" in res.stderr
