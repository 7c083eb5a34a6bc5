"""guest/ubuntu/**/*.sh run for real in a sandbox root (K4W_ROOT): files, refusals, idempotence.

The sandbox writes every file under a temporary root and touches nothing on this machine
(no apt, systemctl, sysctl, modprobe); box components come from a local stand-in for Packer's
HTTP server (PACKER_HTTP_ADDR), as in a build. The live-system half (services, packages) runs in
the CI QEMU guest and on Hyper-V.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from k4w.derive import step_env as derive_steps
from tests.fakes import local_http
from tests.helpers import system_tool

from .conftest import HTTP_PROXY, HTTPS_PROXY, ROOT, STEPS, cluster, make_root, proxy_step_env, run_step, snapshot

NO_PROXY = cluster(HTTP_PROXY, HTTPS_PROXY).proxy.no_proxy_str

# ------------------------------------------------------------------ every required variable is named when missing

KUBE_ENV = {
    "K4W_KUBE_VERSION": "1.11.10",
    "K4W_KUBEADM_API": "kubeadm.k8s.io/v1alpha2",
    "K4W_KUBE_IMAGE_REPOSITORY": "registry.k8s.io",
    "K4W_KUBE_PREPULL_IMAGES": "1",
    "K4W_CNI_VERSION": "0.6.0",
    "K4W_CNI_FILE": "cni-cni-plugins-amd64-v0.6.0.tgz",
    "K4W_CNI_SHA256": "0" * 64,
    "K4W_KUBERNETES_VERSION": "1.11.10",
    "K4W_KUBERNETES_FILE": "kubernetes-kubernetes-node-linux-amd64.tar.gz",
    "K4W_KUBERNETES_SHA512": "0" * 128,
    "K4W_MEDIA_URL_PATH": "/components/",  # ubuntu-1604's: its HTTP server also serves preseed.cfg
}
DOCKER_ENV = {
    "K4W_DOCKER_VERSION": "17.03.2",
    "K4W_DOCKER_PACKAGE": "docker-ce",
    "K4W_DOCKER_PACKAGE_VERSION": "17.03.2~ce-0~ubuntu-xenial",
    "K4W_DOCKER_CGROUP_DRIVER": "cgroupfs",
    "K4W_DOCKER_STORAGE_DRIVER": "overlay2",
    "K4W_DOCKER_APT_URL": "https://download.docker.com/linux/ubuntu",
    "K4W_DOCKER_APT_SUITE": "xenial",
    "K4W_DOCKER_APT_COMPONENT": "stable",
    "K4W_DOCKER_GPG_URL": "file:///nonexistent.asc",
    "K4W_DOCKER_GPG_FINGERPRINT": "9DC858229FC7DD38854AE2D88D81803C0EBFCD88",
    "K4W_DOCKER_REGISTRY_MIRRORS": "",  # none: cluster.yml's registry.mirrors has no docker.io
}
REQUIRED = {
    "01-proxy.sh": ({"K4W_PROXY_ENV": "", "K4W_APT_PROXY_CONF": "", "K4W_PROXY_FILE_MODE": "0644",
                     "K4W_CONTAINER_RUNTIME": "docker"}, None),
    "03-docker.sh": (DOCKER_ENV, None),
    "04-kubernetes.sh": (KUBE_ENV, {"K4W_KUBERNETES_SHA512": "K4W_KUBERNETES_SHA512 or K4W_KUBERNETES_SHA256",
                                    "K4W_CNI_SHA256": "K4W_CNI_SHA512 or K4W_CNI_SHA256"}),
    "06-build-record.sh": ({"K4W_BOX": "b", "K4W_RELEASE_JSON": '{"box": "b", "components": {}}'}, None),
    "07-cleanup.sh": ({"K4W_FREE_SPACE": "skip"}, None),
}
CASES = [(script, var) for script, (env, _) in REQUIRED.items() for var in env]


@pytest.mark.parametrize("script,missing", CASES, ids=[f"{s}-{v}" for s, v in CASES])
def test_a_missing_variable_fails_naming_it(tmp_path, script, missing):
    env, alternatives = REQUIRED[script]
    res = run_step(script, make_root(tmp_path), **{k: v for k, v in env.items() if k != missing})
    assert res.returncode == 1
    named = (alternatives or {}).get(missing, missing)
    assert f"missing {named}" in res.stderr, res.stderr
    assert "environment_vars" in res.stderr  # says where the value should have come from


def test_missing_library_is_explained(tmp_path):
    res = run_step("02-kernel.sh", make_root(tmp_path), K4W_LIB="/nonexistent/k4w-lib.sh")
    assert res.returncode == 1 and "library /nonexistent/k4w-lib.sh not found" in res.stderr


def test_unsupported_distribution_is_refused(tmp_path):
    root = make_root(tmp_path)
    (root / "etc" / "os-release").write_text("ID=centos\nVERSION_ID=7\n")
    res = run_step("02-kernel.sh", root)
    assert res.returncode == 1 and "unsupported distribution 'centos 7'" in res.stderr


def test_failures_report_step_line_and_command(tmp_path):
    root = make_root(tmp_path)
    (root / "etc" / "fstab").chmod(0o000)  # unreadable (run as non-root) or ...
    (root / "etc" / "modules-load.d").write_text("")  # ... a file where a directory belongs: mkdir fails
    res = run_step("02-kernel.sh", root)
    assert res.returncode != 0
    assert "k4w 02-kernel:" in res.stderr and " line " in res.stderr and "exited" in res.stderr


# ------------------------------------------------------------------ 01 proxy


def _node_proxy(root: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """guest/ubuntu/cluster/cluster-proxy.sh as cluster-up runs it: the values in a file."""
    values = tmp_path / "proxy.env"
    values.write_text("".join(f"{name}={shlex.quote(value)}\n" for name, value in env.items()))
    script = ROOT / "guest" / "ubuntu" / "cluster" / "cluster-proxy.sh"
    full = {"PATH": os.environ["PATH"], "HOME": str(root), "K4W_ROOT": str(root),
            "K4W_LIB": str(ROOT / "guest" / "ubuntu" / "lib.sh"), "K4W_PROXY_FILE": str(values)}
    return subprocess.run(["bash", str(script)], env=full, capture_output=True, text=True, check=False, timeout=60)


def _holding(root: Path, secret: str) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and secret in p.read_text(errors="replace"))


def test_the_build_proxy_never_reaches_the_disk_only_a_runtime_docker_drop_in(tmp_path):
    root = make_root(tmp_path)
    (root / "etc" / "apt").mkdir()
    # The installer's copy of preseed.cfg's mirror/http/proxy, credentials included.
    (root / "etc" / "apt" / "apt.conf").write_text(f'Acquire::http::Proxy "{HTTP_PROXY}";\n')
    env = proxy_step_env(HTTP_PROXY, HTTPS_PROXY)
    res = run_step("01-proxy.sh", root, **env)
    assert res.returncode == 0, res.stderr

    assert (root / "etc" / "environment").read_text() == 'PATH="/usr/local/sbin:/usr/local/bin:/usr/bin:/bin"\n'
    assert not (root / "etc" / "apt" / "apt.conf.d" / "90k4w-proxy").exists()
    assert not (root / "etc" / "apt" / "apt.conf").exists()
    assert not list((root / "etc").rglob("http-proxy.conf")) and not (root / "etc" / "k4w" / "proxy.env").exists()
    # /run is a tmpfs: docker pulls through the proxy during the build, and the box keeps nothing.
    # The credentials sit in a root-only EnvironmentFile, never in the unit, whose Environment= any
    # local user reads over D-Bus (systemctl show).
    assert _holding(root, "bob") == ["run/k4w/proxy.env"]
    env_file = root / "run" / "k4w" / "proxy.env"
    # An EnvironmentFile takes %-specifiers and $ literally: the URL-encoded '%40' stays as it is.
    assert 'HTTP_PROXY="http://bob:p%40ss$w0rd;x@proxy.corp.example:3128"' in env_file.read_text().splitlines()
    assert env_file.stat().st_mode & 0o777 == 0o600
    drop_in = root / "run" / "systemd" / "system" / "docker.service.d" / "http-proxy.conf"
    assert "EnvironmentFile=/run/k4w/proxy.env" in drop_in.read_text().splitlines()
    assert "Environment=" not in drop_in.read_text().replace("EnvironmentFile=", "")
    assert not (root / "run" / "systemd" / "system" / "kubelet.service.d").exists()  # no kubelet runs in a build

    before = snapshot(root)
    res = run_step("01-proxy.sh", root, **env)
    assert res.returncode == 0 and "wrote" not in res.stdout
    assert snapshot(root) == before
    assert "bob" not in res.stdout + res.stderr  # credentials never logged


def test_a_node_gets_the_proxy_on_disk_readable_only_by_root_and_the_value_file_is_deleted(tmp_path):
    root = make_root(tmp_path)
    run_step("01-proxy.sh", root, **proxy_step_env(HTTP_PROXY, HTTPS_PROXY))  # the build's runtime drop-in
    values = derive_steps.node_proxy_variables(cluster(HTTP_PROXY, HTTPS_PROXY).proxy, "ubuntu")
    node_env = {name: values[name] for name in ("K4W_PROXY_ENV", "K4W_APT_PROXY_CONF", "K4W_PROXY_FILE_MODE")}
    step_01 = proxy_step_env(HTTP_PROXY, HTTPS_PROXY)
    assert node_env == {name: step_01[name] for name in node_env}  # the values Packer gives step 01
    res = _node_proxy(root, tmp_path, **node_env)
    assert res.returncode == 0, res.stderr
    assert not (tmp_path / "proxy.env").exists()  # read once, then deleted

    environment = root / "etc" / "environment"
    assert environment.read_text().startswith('PATH="')  # other lines kept
    assert f'HTTP_PROXY="{HTTP_PROXY}"' in environment.read_text() and f'https_proxy="{HTTPS_PROXY}"' in environment.read_text()
    assert f'NO_PROXY="{NO_PROXY}"' in environment.read_text()
    assert environment.stat().st_mode & 0o777 == 0o600  # pam_env reads it as root
    apt = root / "etc" / "apt" / "apt.conf.d" / "90k4w-proxy"
    assert f'Acquire::http::Proxy "{HTTP_PROXY}";' in apt.read_text() and f'Acquire::https::Proxy "{HTTPS_PROXY}";' in apt.read_text()
    assert apt.stat().st_mode & 0o777 == 0o600
    env_file = root / "etc" / "k4w" / "proxy.env"
    assert 'HTTP_PROXY="http://bob:p%40ss$w0rd;x@proxy.corp.example:3128"' in env_file.read_text().splitlines()
    assert f'no_proxy="{NO_PROXY}"' in env_file.read_text().splitlines()
    assert env_file.stat().st_mode & 0o777 == 0o600
    for service in ("docker", "containerd", "kubelet"):
        drop_in = root / "etc" / "systemd" / "system" / f"{service}.service.d" / "http-proxy.conf"
        assert "EnvironmentFile=/etc/k4w/proxy.env" in drop_in.read_text().splitlines()
        assert "bob" not in drop_in.read_text() and drop_in.stat().st_mode & 0o777 == 0o644
    assert not list((root / "run").rglob("http-proxy.conf"))  # the build's runtime copy is gone
    assert not (root / "run" / "k4w" / "proxy.env").exists()

    before = snapshot(root)
    res = _node_proxy(root, tmp_path, **node_env)
    assert res.returncode == 0 and "wrote" not in res.stdout and snapshot(root) == before
    assert "bob" not in res.stdout + res.stderr


def test_node_files_without_credentials_stay_world_readable(tmp_path):
    root = make_root(tmp_path)
    env = proxy_step_env(None, HTTPS_PROXY)
    assert _node_proxy(root, tmp_path, **env).returncode == 0
    assert (root / "etc" / "apt" / "apt.conf.d" / "90k4w-proxy").stat().st_mode & 0o777 == 0o644
    assert (root / "etc" / "environment").stat().st_mode & 0o777 == 0o644


def test_http_only_proxy_never_sets_https(tmp_path):
    root = make_root(tmp_path)
    _node_proxy(root, tmp_path, **proxy_step_env(HTTP_PROXY, None))
    written = "".join(p.read_text() for p in root.rglob("*") if p.is_file())
    assert "https_proxy" not in written.lower() and "Acquire::https" not in written
    assert f'http_proxy="{HTTP_PROXY}"' in written


def test_without_a_proxy_every_k4w_proxy_file_is_removed(tmp_path):
    root = make_root(tmp_path)
    _node_proxy(root, tmp_path, **proxy_step_env(HTTP_PROXY, HTTPS_PROXY))
    run_step("01-proxy.sh", root, **proxy_step_env(HTTP_PROXY, HTTPS_PROXY))
    res = _node_proxy(root, tmp_path, **proxy_step_env())
    assert res.returncode == 0
    assert not (root / "etc" / "apt" / "apt.conf.d" / "90k4w-proxy").exists()
    assert not list(root.rglob("http-proxy.conf")) and not list(root.rglob("proxy.env"))
    assert (root / "etc" / "environment").read_text() == 'PATH="/usr/local/sbin:/usr/local/bin:/usr/bin:/bin"\n'


def test_a_proxy_env_entry_that_is_not_a_pair_is_refused(tmp_path):
    root = make_root(tmp_path)
    before = snapshot(root)
    env = {**proxy_step_env(HTTP_PROXY, None), "K4W_PROXY_ENV": "HTTP_PROXY=http://proxy:3128 not-a-pair"}
    res = run_step("01-proxy.sh", root, **env)
    assert res.returncode == 1 and "holds 'not-a-pair', which is not a NAME=value pair" in res.stderr
    assert snapshot(root) == before  # refused before writing anything


def test_a_file_mode_that_is_not_one_is_refused(tmp_path):
    res = run_step("01-proxy.sh", make_root(tmp_path), **{**proxy_step_env(), "K4W_PROXY_FILE_MODE": "rw-------"})
    assert res.returncode == 1 and "K4W_PROXY_FILE_MODE must be a file mode" in res.stderr


# ------------------------------------------------------------------ 02 kernel


# What setupKernelTunables requires (k8s.io/kubernetes@v1.37.2 pkg/kubelet/cm/container_manager_linux.go;
# values: k8s.io/component-helpers@v0.37.2 node/util/sysctl/sysctl.go, RootMaxBytesSetting = 25 * RootMaxKeysSetting).
KUBELET_KERNEL_DEFAULTS = {"vm.overcommit_memory": "1", "vm.panic_on_oom": "0", "kernel.panic": "10",
                           "kernel.panic_on_oops": "1", "kernel.keys.root_maxkeys": "1000000",
                           "kernel.keys.root_maxbytes": "25000000"}


def test_swap_modules_and_sysctls_then_idempotent(tmp_path):
    root = make_root(tmp_path)
    assert run_step("02-kernel.sh", root).returncode == 0
    fstab = (root / "etc" / "fstab").read_text().splitlines()
    assert fstab[0] == "UUID=1 / ext4 errors=remount-ro 0 1"
    assert fstab[1].startswith("#") and "swap" in fstab[1]
    assert (root / "etc" / "modules-load.d" / "k4w-kubernetes.conf").read_text().split()[-2:] == ["br_netfilter", "overlay"]
    sysctls = (root / "etc" / "sysctl.d" / "90-k4w-kubernetes.conf").read_text()
    assert "net.bridge.bridge-nf-call-iptables = 1" in sysctls and "net.ipv4.ip_forward = 1" in sysctls
    # Every tunable a kubelet with protectKernelDefaults requires, at the value it requires, or it refuses to start.
    written = dict(line.split(" = ") for line in sysctls.splitlines() if " = " in line)
    assert {key: written.get(key) for key in KUBELET_KERNEL_DEFAULTS} == KUBELET_KERNEL_DEFAULTS
    before = snapshot(root)
    assert run_step("02-kernel.sh", root).returncode == 0
    assert snapshot(root) == before


# ------------------------------------------------------------------ 03 docker: the repository key is checked by fingerprint


@pytest.fixture(scope="module")
def signing_key(tmp_path_factory):
    """A throwaway OpenPGP key standing in for Docker's: (armored key file, fingerprint)."""
    gpg = system_tool("gpg")
    home = tmp_path_factory.mktemp("gnupg")
    os.chmod(home, 0o700)
    run = lambda *a: subprocess.run([gpg, "--homedir", str(home), "--batch", *a], capture_output=True, text=True, check=True)  # noqa: E731
    run("--passphrase", "", "--quick-gen-key", "k4w test <test@example.invalid>", "ed25519", "sign", "never")
    fpr = next(line.split(":")[9] for line in run("--with-colons", "--fingerprint").stdout.splitlines() if line.startswith("fpr:"))
    key = home / "key.asc"
    key.write_text(run("--armor", "--export", fpr).stdout)
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], check=False)
    return key, fpr


def docker_env(key, fingerprint):
    return {**DOCKER_ENV, "K4W_DOCKER_GPG_URL": f"file://{key}", "K4W_DOCKER_GPG_FINGERPRINT": fingerprint}


def test_docker_repository_trusted_only_with_the_pinned_key(tmp_path, signing_key):
    key, fpr = signing_key
    root = make_root(tmp_path)
    res = run_step("03-docker.sh", root, **docker_env(key, fpr))
    assert res.returncode == 0, res.stderr
    keyring = root / "etc" / "apt" / "keyrings" / "k4w-docker.gpg"
    assert keyring.is_file() and oct(keyring.stat().st_mode & 0o777) == "0o644"
    sources = (root / "etc" / "apt" / "sources.list.d" / "k4w-docker.list").read_text()
    assert "signed-by=/etc/apt/keyrings/k4w-docker.gpg] https://download.docker.com/linux/ubuntu xenial stable" in sources
    daemon = json.loads((root / "etc" / "docker" / "daemon.json").read_text())
    assert daemon["exec-opts"] == ["native.cgroupdriver=cgroupfs"]
    assert daemon["log-opts"]["max-file"] and daemon["log-opts"]["max-size"]
    assert daemon["storage-driver"] == "overlay2"

    before = snapshot(root)
    (key.parent / "moved.asc").write_bytes(key.read_bytes())
    # Second run: the keyring already holds the pinned key, so nothing is fetched or written.
    res = run_step("03-docker.sh", root, **{**docker_env(key, fpr), "K4W_DOCKER_GPG_URL": "file:///nonexistent.asc"})
    assert res.returncode == 0, res.stderr
    assert snapshot(root) == before


def test_a_key_with_another_fingerprint_is_refused(tmp_path, signing_key):
    key, _ = signing_key
    root = make_root(tmp_path)
    res = run_step("03-docker.sh", root, **docker_env(key, "9DC858229FC7DD38854AE2D88D81803C0EBFCD88"))
    assert res.returncode == 1 and "refusing to trust it" in res.stderr
    assert not (root / "etc" / "apt" / "keyrings" / "k4w-docker.gpg").exists()
    assert not (root / "etc" / "apt" / "sources.list.d" / "k4w-docker.list").exists()


def test_debian_uses_its_own_signed_docker_without_a_third_party_repository(tmp_path):
    root = make_root(tmp_path, "debian-12")
    env = {k: v for k, v in DOCKER_ENV.items() if "APT" not in k and "GPG" not in k}
    res = run_step("03-docker.sh", root, **{**env, "K4W_DOCKER_PACKAGE": "docker.io",
                                             "K4W_DOCKER_CGROUP_DRIVER": "systemd"})
    assert res.returncode == 0, res.stderr
    assert not (root / "etc" / "apt" / "sources.list.d").exists()
    assert json.loads((root / "etc" / "docker" / "daemon.json").read_text())["exec-opts"] == ["native.cgroupdriver=systemd"]


def test_docker_hubs_mirror_reaches_daemon_json_and_a_malformed_one_is_refused(tmp_path):
    """cluster.yml's registry.mirrors.docker.io as the seed era's Docker takes it (k4w/derive/registry.py)."""
    root = make_root(tmp_path, "debian-12")
    env = {k: v for k, v in DOCKER_ENV.items() if "APT" not in k and "GPG" not in k}
    res = run_step("03-docker.sh", root, **{**env, "K4W_DOCKER_PACKAGE": "docker.io",
                                             "K4W_DOCKER_REGISTRY_MIRRORS": "https://hub-mirror.corp.example:5000"})
    assert res.returncode == 0, res.stderr
    daemon = json.loads((root / "etc" / "docker" / "daemon.json").read_text())
    assert daemon["registry-mirrors"] == ["https://hub-mirror.corp.example:5000"]
    res = run_step("03-docker.sh", root, **{**env, "K4W_DOCKER_PACKAGE": "docker.io",
                                             "K4W_DOCKER_REGISTRY_MIRRORS": 'https://x", "y'})
    assert res.returncode == 1 and "is not a mirror URL" in res.stderr


# ------------------------------------------------------------------ 04 kubernetes: every download verified


@pytest.fixture
def downloads():
    """A stand-in for Packer's HTTP server during a build: the box's components staged under
    /components/ as build-* stages them (k4w/media/build_media.py names), a node tarball laid out like
    kubernetes-node-linux-amd64.tar.gz (kubernetes/node/bin/...) with its sha512, and the CNI
    tarball with its sha256. Yields the step environment; .site is the server's state."""
    node = {f"kubernetes/node/bin/{name}": f"#!/bin/sh\necho {name}\n".encode()
            for name in ("kubeadm", "kubelet", "kubectl", "kube-proxy")}
    plugins = {f"./{name}": f"#!/bin/sh\necho {name}\n".encode() for name in ("bridge", "flannel", "host-local", "loopback", "portmap")}
    node_tarball, cni_tarball = _tar_gz(node), _tar_gz(plugins)
    files = {f"/components/{KUBE_ENV['K4W_KUBERNETES_FILE']}": node_tarball, f"/components/{KUBE_ENV['K4W_CNI_FILE']}": cni_tarball}
    with local_http.site(files) as site:
        env = dict(KUBE_ENV, PACKER_HTTP_ADDR=site.url.removeprefix("http://"),
                   K4W_KUBERNETES_SHA512=hashlib.sha512(node_tarball).hexdigest(),
                   K4W_CNI_SHA256=hashlib.sha256(cni_tarball).hexdigest())
        yield Downloads(env, site, files)


@dataclass
class Downloads:
    env: dict
    site: local_http.Site
    files: dict


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path, body in members.items():
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(body), 0o755
            tar.addfile(info, io.BytesIO(body))
    return buffer.getvalue()


def test_kubernetes_binaries_cni_and_kubelet_units_then_idempotent_without_the_build_host(tmp_path, downloads):
    root = make_root(tmp_path)
    # The build proxy is in every step's environment; the build host must be reached around it
    # (port 9, discard: nothing answers there).
    dead_proxy = {"http_proxy": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
    res = run_step("04-kubernetes.sh", root, **downloads.env, **dead_proxy)
    assert res.returncode == 0, res.stderr
    for name in ("kubeadm", "kubelet", "kubectl"):
        installed = root / "usr" / "local" / "bin" / name
        assert installed.read_text() == f"#!/bin/sh\necho {name}\n"
        assert installed.stat().st_mode & 0o777 == 0o755
    assert sorted(p.name for p in (root / "opt" / "cni" / "bin").iterdir()) == [
        "bridge", "flannel", "host-local", "loopback", "portmap"]
    unit = (root / "etc" / "systemd" / "system" / "kubelet.service").read_text()
    assert "ExecStart=/usr/local/bin/kubelet" in unit
    drop_in = (root / "etc" / "systemd" / "system" / "kubelet.service.d" / "10-kubeadm.conf").read_text()
    assert "EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env" in drop_in
    assert "ExecStart=\nExecStart=/usr/local/bin/kubelet $KUBELET_KUBECONFIG_ARGS" in drop_in
    # Both files came from the build host's server, once each, never through a proxy.
    assert sorted(r["path"] for r in downloads.site.requests) == sorted(downloads.files)

    # Again, with no build host (as on a booted box): the records prove the install complete.
    before = snapshot(root)
    requests = len(downloads.site.requests)
    res = run_step("04-kubernetes.sh", root, **{k: v for k, v in downloads.env.items() if k != "PACKER_HTTP_ADDR"})
    assert res.returncode == 0, res.stderr
    assert "already installed" in res.stdout and len(downloads.site.requests) == requests
    assert snapshot(root) == before


def test_a_changed_binary_is_installed_again_from_the_build_host(tmp_path, downloads):
    root = make_root(tmp_path)
    assert run_step("04-kubernetes.sh", root, **downloads.env).returncode == 0
    (root / "usr" / "local" / "bin" / "kubelet").write_text("#!/bin/sh\necho tampered\n")
    res = run_step("04-kubernetes.sh", root, **downloads.env)
    assert res.returncode == 0, res.stderr
    assert (root / "usr" / "local" / "bin" / "kubelet").read_text() == "#!/bin/sh\necho kubelet\n"


def test_a_node_tarball_that_does_not_match_its_sha512_installs_nothing(tmp_path, downloads):
    downloads.files[f"/components/{KUBE_ENV['K4W_KUBERNETES_FILE']}"] += b"tampered"
    root = make_root(tmp_path)
    res = run_step("04-kubernetes.sh", root, **downloads.env)
    assert res.returncode == 1 and "sha512 mismatch for kubernetes (kubernetes-kubernetes-node-linux-amd64.tar.gz from the build host)" in res.stderr
    assert not (root / "usr" / "local" / "bin").exists() or not list((root / "usr" / "local" / "bin").iterdir())
    assert not list(root.rglob("*.part"))  # nothing half-downloaded left behind


def test_a_file_the_build_host_does_not_serve_is_named_with_the_fix(tmp_path, downloads):
    del downloads.files[f"/components/{KUBE_ENV['K4W_CNI_FILE']}"]
    res = run_step("04-kubernetes.sh", make_root(tmp_path), **downloads.env)
    assert res.returncode == 1
    assert "cni: could not copy" in res.stderr and "cni-cni-plugins-amd64-v0.6.0.tgz staged in OUT/http/<box>/components/" in res.stderr


def test_outside_packer_build_the_step_says_it_needs_the_build_host(tmp_path, downloads):
    env = {k: v for k, v in downloads.env.items() if k != "PACKER_HTTP_ADDR"}
    res = run_step("04-kubernetes.sh", make_root(tmp_path), **env)
    assert res.returncode == 1 and "PACKER_HTTP_ADDR is unset" in res.stderr


def test_the_pinned_digest_decides_not_the_server(tmp_path, downloads):
    root = make_root(tmp_path)
    res = run_step("04-kubernetes.sh", root, **{**downloads.env, "K4W_CNI_SHA256": "1" * 64})
    assert res.returncode == 1 and "sha256 mismatch for cni" in res.stderr
    assert not (root / "opt" / "cni" / "bin").exists()


def test_versions_must_match_the_cluster_version(tmp_path, downloads):
    res = run_step("04-kubernetes.sh", make_root(tmp_path), **{**downloads.env, "K4W_KUBERNETES_VERSION": "1.12.0"})
    assert res.returncode == 1 and "K4W_KUBERNETES_VERSION=1.12.0 differs from K4W_KUBE_VERSION=1.11.10" in res.stderr


# ------------------------------------------------------------------ 05 vagrant key, 06 record, 07 cleanup


def test_vagrant_insecure_key_added_once_keeping_other_keys(tmp_path):
    root = make_root(tmp_path)
    ssh = root / "home" / "vagrant" / ".ssh"
    ssh.mkdir(parents=True)
    (ssh / "authorized_keys").write_text("ssh-ed25519 AAAAC3Nza... someone\n")
    assert run_step("05-vagrant-key.sh", root).returncode == 0
    keys = (ssh / "authorized_keys").read_text().splitlines()
    assert keys[0] == "ssh-ed25519 AAAAC3Nza... someone"
    assert keys[1].endswith("vagrant insecure public key") and len(keys) == 2
    assert (ssh / "authorized_keys").stat().st_mode & 0o777 == 0o600 and ssh.stat().st_mode & 0o777 == 0o700
    before = snapshot(root)
    assert run_step("05-vagrant-key.sh", root).returncode == 0
    assert snapshot(root) == before


def test_an_edited_vagrant_key_fails_its_fingerprint_check(tmp_path):
    root = make_root(tmp_path)
    script = tmp_path / "05-edited.sh"
    original = (STEPS / "05-vagrant-key.sh").read_text()
    script.write_text(original.replace("AAAAB3NzaC1yc2EAAAABIwAAAQEA6NF8", "AAAAB3NzaC1yc2EAAAABIwAAAQEA6NF9"))
    env = {"PATH": os.environ["PATH"], "K4W_ROOT": str(root), "K4W_LIB": str(STEPS.parent / "lib.sh")}
    res = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, check=False)
    assert res.returncode == 1 and "not Vagrant's MD5:dd:3b:b8:2e" in res.stderr
    assert not (root / "home").exists()


def test_build_record_written_once_and_checked_against_the_box(tmp_path):
    root = make_root(tmp_path)
    record = '{"box": "ubuntu-1604", "components": {"docker": "17.03.2", "cni": "0.6.0"}}'
    assert run_step("06-build-record.sh", root, K4W_BOX="ubuntu-1604", K4W_RELEASE_JSON=record).returncode == 0
    assert json.loads((root / "etc" / "k4w-release.json").read_text()) == json.loads(record)
    before = snapshot(root)
    assert run_step("06-build-record.sh", root, K4W_BOX="ubuntu-1604", K4W_RELEASE_JSON=record).returncode == 0
    assert snapshot(root) == before
    res = run_step("06-build-record.sh", root, K4W_BOX="other", K4W_RELEASE_JSON=record)
    assert res.returncode == 1 and "names box ubuntu-1604, not other" in res.stderr


def test_cleanup_leaves_an_anonymous_box(tmp_path):
    root = make_root(tmp_path)
    (root / "etc" / "machine-id").write_text("0123456789abcdef0123456789abcdef\n")
    for folder in ("var/lib/dbus", "var/lib/dhcp", "var/log/apt", "var/cache/k4w", "tmp"):
        (root / folder).mkdir(parents=True)
    (root / "var" / "lib" / "dbus" / "machine-id").write_text("0123456789abcdef0123456789abcdef\n")
    (root / "var" / "lib" / "dhcp" / "dhclient.eth0.leases").write_text("lease {}\n")
    (root / "var" / "log" / "syslog").write_text("boot messages\n")
    (root / "var" / "log" / "syslog.1").write_text("older\n")
    (root / "var" / "log" / "apt" / "history.log.2.gz").write_bytes(b"\x1f\x8b")
    (root / "var" / "cache" / "k4w" / "cni.tgz").write_bytes(b"x")
    (root / "tmp" / "k4w-lib.sh").write_text("# uploaded by packer\n")
    assert run_step("07-cleanup.sh", root, K4W_FREE_SPACE="trim-or-zero").returncode == 0
    assert (root / "etc" / "machine-id").read_text() == ""
    assert os.readlink(root / "var" / "lib" / "dbus" / "machine-id") == "/etc/machine-id"
    assert not (root / "var" / "lib" / "dhcp" / "dhclient.eth0.leases").exists()
    assert (root / "var" / "log" / "syslog").read_text() == ""
    assert not (root / "var" / "log" / "syslog.1").exists() and not (root / "var" / "log" / "apt" / "history.log.2.gz").exists()
    assert not (root / "var" / "cache" / "k4w").exists() and not (root / "tmp" / "k4w-lib.sh").exists()
    before = snapshot(root)
    assert run_step("07-cleanup.sh", root, K4W_FREE_SPACE="trim-or-zero").returncode == 0
    assert snapshot(root) == before


def test_cleanup_fails_the_build_when_a_file_keeps_the_proxy_credentials(tmp_path):
    root = make_root(tmp_path)
    (root / "var" / "log" / "installer").mkdir(parents=True)
    # Installer logs quote preseed answers; the cleanup empties logs before it scans.
    (root / "var" / "log" / "installer" / "syslog").write_text(f"mirror/http/proxy={HTTP_PROXY}\n")
    proxy = {"HTTP_PROXY": HTTP_PROXY, "HTTPS_PROXY": HTTPS_PROXY}
    res = run_step("07-cleanup.sh", root, K4W_FREE_SPACE="skip", **proxy)
    assert res.returncode == 0, res.stderr
    assert "no file under /etc /var" in res.stdout and "HTTP_PROXY credentials" in res.stdout

    (root / "etc" / "wgetrc").write_text(f"http_proxy = {HTTP_PROXY}\n")
    res = run_step("07-cleanup.sh", root, K4W_FREE_SPACE="skip", **proxy)
    assert res.returncode == 1
    assert "would keep the build's proxy credentials (HTTP_PROXY) in:" in res.stderr and "etc/wgetrc" in res.stderr
    assert "p%40ss" not in res.stdout + res.stderr  # the paths, never the password


def test_cleanup_ships_no_ssh_host_keys_and_a_unit_that_makes_them_at_first_boot(tmp_path):
    root = make_root(tmp_path)
    ssh = root / "etc" / "ssh"
    ssh.mkdir(parents=True)
    (ssh / "sshd_config").write_text("PasswordAuthentication yes\n")
    for kind in ("rsa", "ecdsa", "ed25519"):
        (ssh / f"ssh_host_{kind}_key").write_text("PRIVATE\n")
        (ssh / f"ssh_host_{kind}_key.pub").write_text("ssh-x PUBLIC\n")
    res = run_step("07-cleanup.sh", root, K4W_FREE_SPACE="skip")
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in ssh.iterdir()) == ["sshd_config"]  # every VM of the box gets its own keys
    unit = (root / "etc" / "systemd" / "system" / "k4w-ssh-host-keys.service").read_text()
    assert "ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key" in unit
    assert "Before=ssh.service" in unit and "ExecStart=/usr/bin/ssh-keygen -A" in unit
    assert "WantedBy=multi-user.target ssh.service" in unit
    before = snapshot(root)
    assert run_step("07-cleanup.sh", root, K4W_FREE_SPACE="skip").returncode == 0
    assert snapshot(root) == before


def test_cleanup_turns_password_logins_off_first_in_sshd_config_without_include(tmp_path):
    # 16.04's OpenSSH 7.2 has no Include: the first value of a keyword wins, so a block on top.
    root = make_root(tmp_path)
    config = root / "etc" / "ssh" / "sshd_config"
    config.parent.mkdir(parents=True)
    config.write_text("Port 22\nPasswordAuthentication yes\nChallengeResponseAuthentication yes\n")
    res = run_step("07-cleanup.sh", root, K4W_FREE_SPACE="skip")
    assert res.returncode == 0, res.stderr
    lines = config.read_text().splitlines()
    first = {line.split()[0]: line.split()[1] for line in reversed(lines) if line and not line.startswith("#")}
    assert first["PasswordAuthentication"] == "no" and first["ChallengeResponseAuthentication"] == "no"
    assert lines.count("PasswordAuthentication no") == 1
    before = snapshot(root)
    assert run_step("07-cleanup.sh", root, K4W_FREE_SPACE="skip").returncode == 0
    assert snapshot(root) == before   # a second run leaves one block


def test_cleanup_turns_password_logins_off_in_a_drop_in_where_sshd_includes_one(tmp_path):
    root = make_root(tmp_path)
    config = root / "etc" / "ssh" / "sshd_config"
    config.parent.mkdir(parents=True)
    original = "Include /etc/ssh/sshd_config.d/*.conf\nKbdInteractiveAuthentication no\n"
    config.write_text(original)
    res = run_step("07-cleanup.sh", root, K4W_FREE_SPACE="skip")
    assert res.returncode == 0, res.stderr
    drop_in = (root / "etc" / "ssh" / "sshd_config.d" / "00-k4w-keys-only.conf").read_text()
    assert "PasswordAuthentication no" in drop_in.splitlines() and "KbdInteractiveAuthentication no" in drop_in.splitlines()
    assert config.read_text() == original


def test_cleanup_removes_the_persistent_journal_and_keeps_its_folder(tmp_path):
    root = make_root(tmp_path)
    machine = root / "var" / "log" / "journal" / "0123456789abcdef0123456789abcdef"
    machine.mkdir(parents=True)
    # sudo's COMMAND=... lines of the build, in journald's (compressed) binary format.
    (machine / "system.journal").write_bytes(b"LPKSHHRH\x00compressed COMMAND=...")
    (machine / "user-1000@0001.journal~").write_bytes(b"LPKSHHRH")
    res = run_step("07-cleanup.sh", root, K4W_FREE_SPACE="skip")
    assert res.returncode == 0, res.stderr
    assert (root / "var" / "log" / "journal").is_dir()
    assert list((root / "var" / "log" / "journal").iterdir()) == []
    assert "removed the persistent journal" in res.stdout


# ------------------------------------------------------------------ no credential in a unit (every unit-writing step)


def test_every_unit_the_steps_write_keeps_the_proxy_credentials_out_of_environment(tmp_path, downloads):
    """Each step that writes a systemd unit or drop-in, run with the credentialed build proxy in its
    environment (as Packer gives it), then cluster-up's node proxy: no unit holds the credentials, and
    the EnvironmentFile= that does is mode 0600 (systemd_unit_rules.tree_problems)."""
    from k4w.validate.systemd_unit_rules import tree_problems

    root = make_root(tmp_path)
    proxy = proxy_step_env(HTTP_PROXY, HTTPS_PROXY)
    step_proxy = dict(pair.split("=", 1) for pair in proxy["K4W_PROXY_ENV"].split())
    for step, env in (("01-proxy.sh", proxy), ("04-kubernetes.sh", downloads.env),
                      ("07-cleanup.sh", {"K4W_FREE_SPACE": "skip"})):
        res = run_step(step, root, **env, **step_proxy)
        assert res.returncode == 0, f"{step}: {res.stderr}"
    assert (root / "etc" / "systemd" / "system" / "kubelet.service").is_file()
    secrets = ["bob", "p%40ss"]
    assert tree_problems(root, secrets) == []
    assert (root / "run" / "k4w" / "proxy.env").stat().st_mode & 0o777 == 0o600
    assert _node_proxy(root, tmp_path, **{k: proxy[k] for k in ("K4W_PROXY_ENV", "K4W_APT_PROXY_CONF", "K4W_PROXY_FILE_MODE")}).returncode == 0
    assert tree_problems(root, secrets) == []
    assert (root / "etc" / "k4w" / "proxy.env").stat().st_mode & 0o777 == 0o600

    # Planted: the drop-in k4w wrote before (values in Environment=), and a readable value file.
    drop_in = root / "etc" / "systemd" / "system" / "kubelet.service.d" / "http-proxy.conf"
    drop_in.write_text(f'[Service]\nEnvironment="HTTP_PROXY={HTTP_PROXY}"\n')
    (root / "etc" / "k4w" / "proxy.env").chmod(0o644)
    (root / "etc" / "systemd" / "system" / "docker.service.d" / "extra.conf").write_text("[Service]\nEnvironmentFile=/etc/k4w/proxy.env\n")
    problems = tree_problems(root, secrets)
    assert "etc/systemd/system/kubelet.service.d/http-proxy.conf: Environment= sets HTTP_PROXY, readable by every local user over D-Bus" in problems
    assert "etc/systemd/system/docker.service.d/extra.conf: its EnvironmentFile /etc/k4w/proxy.env holds a credential and is mode 0644, not 0600" in problems


def test_a_proxy_value_systemd_would_read_otherwise_is_refused_before_anything_is_written(tmp_path):
    root = make_root(tmp_path)
    before = snapshot(root)
    env = {**proxy_step_env(HTTP_PROXY, None), "K4W_PROXY_ENV": 'HTTP_PROXY=http://a"b@proxy:3128'}
    res = run_step("01-proxy.sh", root, **env)
    assert res.returncode == 1 and "the value of HTTP_PROXY holds a double quote or a backslash" in res.stderr
    assert snapshot(root) == before


# ------------------------------------------------------------------ apt waits for the first boot and its locks


def _fake_tools(folder: Path, cloud_init_status: str, apt_failures: int, apt_error: str) -> Path:
    """cloud-init, systemctl, timeout-free apt-get and apt-mark at the process boundary, recording argv."""
    folder.mkdir(parents=True)
    log = folder / "calls.log"
    scripts = {
        "cloud-init": f'echo "cloud-init $*" >>{log}\nif [ "$2" = --wait ]; then sleep "${{FAKE_CLOUD_INIT_SECONDS:-0}}"; fi\necho "status: {cloud_init_status}"\n',
        # show -p ActiveState: apt-daily.service runs (activating: a oneshot unit's state while its
        # ExecStart runs) for the first FAKE_APT_JOB_BUSY queries, then both units are inactive.
        # is-active answers as systemctl does for activating and inactive units: exit 3.
        "systemctl": (f'echo "systemctl $*" >>{log}\nif [ "$1" = is-active ]; then exit 3; fi\n'
                      f'n=$(grep -c "^systemctl show" {log})\n'
                      f'if [ "$n" -le "${{FAKE_APT_JOB_BUSY:-0}}" ]; then echo ActiveState=activating; else echo ActiveState=inactive; fi\n'
                      'echo\necho ActiveState=inactive\n'),
        "apt-get": (f'echo "apt-get $*" >>{log}\nn=$(grep -c "^apt-get" {log})\n'
                    f'if [ "$n" -le {apt_failures} ]; then echo "{apt_error}" >&2; exit 100; fi\n'),
    }
    for name, body in scripts.items():
        (folder / name).write_text("#!/bin/sh\n" + body)
        (folder / name).chmod(0o755)
    return log


def _k4w_apt(tmp_path: Path, command: str, status="running", failures=0, error="", **env) -> tuple[subprocess.CompletedProcess, list[str]]:
    log = _fake_tools(tmp_path / "bin", status, failures, error)
    script = f"set -Eeuo pipefail\nsource {ROOT / 'guest' / 'ubuntu' / 'lib.sh'}\nK4W_APT_RETRY_SECONDS=0\n{command}\n"
    full = {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "HOME": str(tmp_path), **env}
    res = subprocess.run(["bash", "-c", script], env=full, capture_output=True, text=True, timeout=60)
    return res, log.read_text().splitlines() if log.exists() else []


def test_apt_waits_for_cloud_init_then_passes_the_lock_timeout(tmp_path):
    res, calls = _k4w_apt(tmp_path, "k4w_apt apt-get update")
    assert res.returncode == 0, res.stderr
    assert calls[:2] == ["cloud-init status", "cloud-init status --wait"]
    assert calls[2] == "systemctl show -p ActiveState apt-daily.service apt-daily-upgrade.service"
    assert calls[3] == "apt-get -o DPkg::Lock::Timeout=300 update"
    assert "waiting for cloud-init to finish" in res.stdout


def test_apt_waits_while_an_apt_daily_job_runs_and_stops_after_the_bound(tmp_path):
    """apt-daily*.service are oneshot units: a running job is "activating", which `systemctl is-active`
    calls not active. apt 1.2 (16.04) has no DPkg::Lock::Timeout, so this wait is what keeps a step
    from racing unattended-upgrades for dpkg's lock."""
    res, calls = _k4w_apt(tmp_path, "k4w_apt apt-get update", status="disabled", FAKE_APT_JOB_BUSY="2")
    assert res.returncode == 0, res.stderr
    queries = [i for i, c in enumerate(calls) if c.startswith("systemctl show -p ActiveState")]
    first_apt = next(i for i, c in enumerate(calls) if c.startswith("apt-get"))
    assert len(queries) == 3 and queries[-1] < first_apt   # two busy answers, then idle, then apt

    res, calls = _k4w_apt(tmp_path / "stuck", "K4W_APT_JOBS_TIMEOUT=1; k4w_apt apt-get update", status="disabled",
                          FAKE_APT_JOB_BUSY="1000")
    assert res.returncode == 1
    assert "timed out after 1s waiting for apt's daily jobs (apt-daily.service apt-daily-upgrade.service)" in res.stderr
    assert not [c for c in calls if c.startswith("apt-get")]


def test_apt_skips_a_cloud_init_that_is_disabled(tmp_path):
    res, calls = _k4w_apt(tmp_path, "k4w_apt apt-get update", status="disabled")
    assert res.returncode == 0 and "cloud-init status --wait" not in calls


def test_a_cloud_init_that_never_finishes_stops_the_step_after_the_bound(tmp_path):
    res, calls = _k4w_apt(tmp_path, "K4W_FIRST_BOOT_TIMEOUT=1; k4w_apt apt-get update", FAKE_CLOUD_INIT_SECONDS="30")
    assert res.returncode == 1
    assert "cloud-init was still running after 1s" in res.stderr
    assert not [c for c in calls if c.startswith("apt-get")]


def test_a_held_lists_lock_is_waited_for_and_another_failure_is_not(tmp_path):
    # apt-get update does not wait for the lists lock itself (DPkg::Lock::Timeout covers dpkg's).
    res, calls = _k4w_apt(tmp_path, "k4w_apt apt-get update", failures=2,
                          error="E: Could not get lock /var/lib/apt/lists/lock. It is held by process 812 (apt-get)")
    assert res.returncode == 0, res.stderr
    assert [c for c in calls if c.startswith("apt-get")] == ["apt-get -o DPkg::Lock::Timeout=300 update"] * 3
    assert "an apt lock is held by another process" in res.stdout

    res, calls = _k4w_apt(tmp_path / "again", "k4w_apt apt-get install x", failures=1, error="E: Unable to locate package x")
    assert res.returncode == 100 and len([c for c in calls if c.startswith("apt-get")]) == 1
