"""Fixtures for the Ubuntu box artifacts: rendered templates and guest steps run in a sandbox."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from k4w.model import config, profiles
from k4w.derive import step_env as derive_steps
from k4w.infra import packer_hcl
from k4w import render
from k4w.infra import packer_cli
from k4w.derive.cluster import Cluster
from tests.helpers import use_sources

from k4w.infra.sources import REPO_ROOT as ROOT
STEPS = ROOT / "guest" / "ubuntu" / "bake"
PROFILE = ROOT / "boxes" / "ubuntu-1604.yml"
BOX = "ubuntu-1604"

# Proxy values that exercise escaping: URL-encoded credentials with '%' (systemd specifier),
# '$' (GRUB and shell expansion) and ';' (GRUB command separator).
HTTP_PROXY = "http://bob:p%40ss$w0rd;x@proxy.corp.example:3128"
HTTPS_PROXY = "http://secure-proxy.corp.example:3129"

# What the CI end-to-end profile will look like: an installed Debian 12 disk booted by QEMU.
QEMU_PROFILE = {
    "name": "debian-12-ci",
    "os_family": "ubuntu",
    "node_os": "linux",
    "min_memory_mb": 512,
    "supports_vxlan": True,
    "iso": {"name": "debian-12-ci.raw"},
    "kubernetes": {"version": "1.11.10", "kubeadm_api": "kubeadm.k8s.io/v1alpha2", "node_os_label": "beta.kubernetes.io/os",
                   "flannel_image": "quay.io/coreos/flannel:v0.11.0-amd64", "flannel_manifest": "v0.11"},
    "build": {
        "builder": "qemu",
        "cpus": 2,
        "memory_mb": 1024,
        "disk_gb": 8,
        "free_space": "skip",
        "qemu": {
            "image": "/srv/ci/debian-12.raw",
            "format": "qcow2",
            "accelerator": "tcg",
            "kernel": "/srv/ci/vmlinuz",
            "initrd": "/srv/ci/initrd.img",
            "append": "root=/dev/vda rw console=ttyS0",
        },
    },
    "provision_env": {"K4W_SKIP_KUBERNETES": "1"},
    "provision": yaml.safe_load(PROFILE.read_text())["provision"],
    "components": {
        "docker": {"version": "20.10.24", "package": "docker.io", "package_version": "20.10.24+dfsg1-1+b3",
                   "cgroup_driver": "systemd", "storage_driver": "overlay2"},
    },
}


def resolve_user_variables(template: dict, environ: dict[str, str] | None = None) -> dict:
    """The template as Packer sees it at build time: ${var.x} replaced by variables[x], whose
    env("X") defaults read environ (the build runner's secret environment)."""
    variables = packer_cli.variable_values(template, environ or {})
    return packer_hcl.resolve_all(template, variables)


def cluster(proxy_http=None, proxy_https=None, nodes=None) -> Cluster:
    data = yaml.safe_load((ROOT / "cluster.yml").read_text())
    data["proxy"]["http"] = proxy_http
    data["proxy"]["https"] = proxy_https
    if nodes is not None:
        data["nodes"] = nodes
    return Cluster.resolve(config.parse(yaml.safe_dump(data)))


def step_env(http=None, https=None) -> dict[str, str]:
    """The environment ubuntu-1604's steps get with this proxy, as Packer hands it to them
    (its ${var.x} references resolved)."""
    steps = derive_steps.step_env(profiles.load(BOX), cluster(http, https))
    return {name: steps.resolved(value) for name, value in steps.env.items()}


def proxy_step_env(http=None, https=None) -> dict[str, str]:
    """Exactly the variables step 01 reads, as the template passes them."""
    env = step_env(http, https)
    return {name: env[name] for name in (*PROXY_VALUES, "K4W_CONTAINER_RUNTIME")}


# What step 01 and cluster-up's cluster-proxy.sh both get: the proxy itself. Step 01 also gets the
# runtime whose service pulls through the proxy during the build.
PROXY_VALUES = ("K4W_PROXY_ENV", "K4W_APT_PROXY_CONF", "K4W_PROXY_FILE_MODE")


@pytest.fixture
def render_box(tmp_path):
    """render_box(cluster) -> {relative path: text} for one render, in memory (no secrets written)."""

    def _render(cluster: Cluster) -> dict[str, str]:
        return render.render_files(cluster, tmp_path / "out")

    return _render


@pytest.fixture
def ubuntu(render_box, tmp_path):
    """ubuntu(http=None, https=None) -> (packer template dict, preseed text) for ubuntu-1604; its
    paths as Packer reads them from the template's folder in render_box's out."""

    def _ubuntu(http=None, https=None):
        resolved = cluster(http, https)
        files = render_box(resolved)
        environ = derive_steps.step_env(resolved.profile(BOX), resolved).secret_environment
        return resolve_user_variables(packer_hcl.parse(files[f"packer/{BOX}.pkr.hcl"], root=tmp_path / "out" / "packer"), environ), files[f"http/{BOX}/preseed.cfg"]

    return _ubuntu


@pytest.fixture
def profile_dir(tmp_path, monkeypatch):
    """A profile folder holding the real profiles plus the QEMU one; returns its path."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    for real in (ROOT / "boxes").glob("*.yml"):
        shutil.copy(real, folder / real.name)
    (folder / "debian-12-ci.yml").write_text(yaml.safe_dump(QEMU_PROFILE))
    use_sources(monkeypatch, box_folders=(folder,))
    return folder


def qemu_cluster() -> Cluster:
    return cluster(
        HTTPS_PROXY,
        HTTPS_PROXY,
        nodes=[{"name": "master", "role": "master", "box": "debian-12-ci", "ip": "192.168.250.10", "memory": 1024}],
    )


# ------------------------------------------------------------------ guest steps in a sandbox


def make_root(tmp_path: Path, distro: str = "ubuntu-16.04") -> Path:
    """A fake guest root for K4W_ROOT: os-release and the files the steps edit."""
    root = tmp_path / "root"
    ident, version = distro.split("-")
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "os-release").write_text(f'ID={ident}\nVERSION_ID="{version}"\n')
    (root / "etc" / "environment").write_text('PATH="/usr/local/sbin:/usr/local/bin:/usr/bin:/bin"\n')
    (root / "etc" / "fstab").write_text("UUID=1 / ext4 errors=remount-ro 0 1\nUUID=2 none swap sw 0 0\n")
    return root


def run_step(script: str, root: Path | None, **env: str) -> subprocess.CompletedProcess:
    """Run provision/ubuntu/<script> with exactly the given K4W_* environment (nothing inherited)."""
    full = {"PATH": os.environ["PATH"], "HOME": str(root or "/tmp"), **env}
    if root is not None:
        full["K4W_ROOT"] = str(root)
    return subprocess.run(["bash", str(STEPS / script)], env=full, capture_output=True, text=True, check=False, timeout=60)


def snapshot(root: Path) -> dict[str, tuple]:
    """Every file under root with content, mode and mtime: equal snapshots mean nothing was rewritten."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() or path.is_symlink():
            st = path.lstat()
            out[str(path.relative_to(root))] = (path.read_bytes() if path.is_file() else os.readlink(path), st.st_mode, st.st_mtime_ns)
    return out
