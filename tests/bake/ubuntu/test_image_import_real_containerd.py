"""The bake's image import (downloads.images: cache) with the real tools at both ends.

The host side is k4w's: `invoke pin-images` pulls two images from the pinned distribution registry v3.1.2
on 127.0.0.1 (standing as cluster.yml's mirror of registry.k8s.io) into the image cache and pins their
digests; `image_cache.stage` writes the archives Packer's HTTP server serves (here tests/fakes/local_http.py,
a stand-in for Packer's server). The guest side is lib.sh's k4w_import_images, run by bash against the
pinned containerd 2.3.7 and its ctr, the tools a box runs.

What a user notices: the images are in containerd under their names at the pinned digests, a second run
fetches nothing, and an archive that is not the pinned image is refused and removed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from ci.e2e import registry as e2e_registry
from k4w.bake import commands, image_cache
from k4w.derive.cluster import Cluster
from k4w.derive.images import Needed
from k4w.infra import pinned_tools
from k4w.infra.image_platform import Platform
from k4w.model import pins
from tests.fakes import local_http
from tests.helpers import image_archive, modern_config, running_daemon, write_config

from .conftest import ROOT

LIB = ROOT / "guest" / "ubuntu" / "lib.sh"
NAMES = ("registry.k8s.io/pause:3.10.2", "ghcr.io/flannel-io/flannel:v0.28.10")
READY_TIMEOUT = 60  # seconds containerd may take to answer on its socket


@pytest.fixture
def staged(tmp_path, monkeypatch):
    """The two images pinned and cached by k4w, and their archives staged: (cluster, {archive name: bytes})."""
    work = tmp_path / "registry"
    with e2e_registry.serving("127.0.0.1", work, upstreams=("registry.k8s.io", "ghcr.io")) as mirrors:
        for n, name in enumerate(NAMES):
            mirrors.push(name, image_archive(tmp_path, name, 64 * 1024, stem=f"image{n}"))
        config = write_config(tmp_path / "cluster.yml", modern_config(**{
            "registry": mirrors.registry_block(), "downloads.cache": str(tmp_path / "cache"), "downloads.images": "cache"}))
        monkeypatch.setattr(image_cache, "needed", lambda pairs: [
            Needed(name, Platform("linux", "amd64"), ("ubuntu-2404",),
                   pins.image_digests(pins.load(config), "linux/amd64").get(name)) for name in NAMES])
        commands.pin_images(Cluster.load(config))
    cluster = Cluster.load(config)   # the registry is gone: what follows uses the cache alone
    folder = tmp_path / "media"
    archives = image_cache.stage(cluster, "ubuntu-2404", folder)
    return cluster, {path.name: path.read_bytes() for path in archives}, dict(mirrors.pushed)


@pytest.fixture
def containerd():
    if os.geteuid() != 0:
        pytest.fail("this test runs the real containerd, which needs root (CI runs the suite as root)")
    # A short folder: a Unix socket's path is at most 107 bytes.
    run = Path(tempfile.mkdtemp(prefix="k4w-ctri-"))
    config = run / "config.toml"
    config.write_text(f"version = 4\nroot = '{run}/root'\nstate = '{run}/state'\n"
                      "disabled_plugins = ['io.containerd.nri.v1.nri']\n"
                      f"[plugins.'io.containerd.server.v1.grpc']\n  address = '{run}/containerd.sock'\n"
                      f"[plugins.'io.containerd.server.v1.ttrpc']\n  address = '{run}/containerd.sock.ttrpc'\n"
                      f"[plugins.'io.containerd.internal.v1.opt']\n  path = '{run}/opt'\n")
    binary = pinned_tools.require("containerd", "containerd")
    ctr = pinned_tools.require("containerd", "ctr")
    socket = run / "containerd.sock"
    try:
        with running_daemon(["nice", "-n", "19", binary, "--config", config], timeout=READY_TIMEOUT, log=run / "containerd.log",
                            what=f"containerd on {socket}",
                            answers=lambda: not subprocess.run([str(ctr), "--address", str(socket), "version"],
                                                               capture_output=True, timeout=30).returncode):
            yield [str(ctr), "--address", str(socket), "--namespace", "k8s.io"]
    finally:
        shutil.rmtree(run, ignore_errors=True)


def import_images(ctr: list[str], site, imports: str) -> subprocess.CompletedProcess:
    script = f'source "{LIB}"; K4W_STEP=04-kubernetes-node; k4w_import_images "$@"'
    env = {"PATH": os.environ["PATH"], "HOME": "/tmp", "K4W_IMAGE_IMPORTS": imports, "K4W_MEDIA_URL_PATH": "/",
           "PACKER_HTTP_ADDR": site.url.removeprefix("http://")}
    return subprocess.run(["bash", "-c", script, "import", *ctr], env=env, capture_output=True, text=True, timeout=300)


def listed(ctr: list[str]) -> dict[str, str]:
    out = subprocess.run([*ctr, "images", "ls"], capture_output=True, text=True, timeout=60, check=True).stdout
    return {line.split()[0]: line.split()[2] for line in out.splitlines()[1:] if line.strip()}


def test_the_guest_imports_each_pinned_image_once_and_refuses_another(staged, containerd):
    cluster, archives, pushed = staged
    imports = " ".join(f"{name}@{pushed[name]}" for name in NAMES)
    with local_http.site({f"/{name}": data for name, data in archives.items()}) as site:
        res = import_images(containerd, site, imports)
        assert res.returncode == 0, res.stdout + res.stderr
        assert {name: listed(containerd).get(name) for name in NAMES} == {name: pushed[name] for name in NAMES}
        assert sorted(r["path"] for r in site.requests) == sorted(f"/{image_cache.archive_name(pushed[n])}" for n in NAMES)

        again = import_images(containerd, site, imports)
        assert again.returncode == 0 and again.stdout.count("already present") == 2
        assert len(site.requests) == 2   # nothing fetched the second time


def test_an_archive_that_is_not_the_pinned_image_is_refused_and_removed(staged, containerd, tmp_path):
    cluster, archives, pushed = staged
    # The file served for the flannel image holds the pause image under flannel's name: valid blobs, wrong image.
    swapped = image_cache.write_archive(image_cache.cache_root(cluster), NAMES[1], pushed[NAMES[0]], tmp_path / "swapped.tar")
    served = {f"/{image_cache.archive_name(pushed[NAMES[1]])}": swapped.read_bytes()}
    with local_http.site(served) as site:
        res = import_images(containerd, site, f"{NAMES[1]}@{pushed[NAMES[1]]}")
    assert res.returncode != 0
    assert f"image {NAMES[1]} from the build host is {pushed[NAMES[0]]} after the import, not the pinned {pushed[NAMES[1]]}: removed" in res.stderr
    assert NAMES[1] not in listed(containerd)


@pytest.mark.parametrize("entry", ["registry.k8s.io/pause:3.10.2", "registry.k8s.io/pause@sha256:abc", "@sha256:" + "a" * 64])
def test_a_malformed_entry_stops_the_step(entry, tmp_path):
    with local_http.site({}) as site:
        res = import_images(["false"], site, entry)
    assert res.returncode != 0 and "is not <image name>@sha256:<64 hex digits>" in res.stderr
