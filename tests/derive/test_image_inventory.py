"""The images each box needs (k4w.derive.images), and which of them a bake imports (downloads.images: cache).

What a user notices: the Windows and Linux boxes of one cluster each get the variant of their own platform; a
pinned digest reaches the guest's step variable only for the containerd-era boxes of a cache config, and
an image without a pin is left out (the build refuses such a box before Packer starts: k4w.bake.runner).
"""

from __future__ import annotations

import yaml

from k4w.derive import images, step_env
from k4w.derive.cluster import Cluster
from k4w.infra.image_platform import Platform
from k4w.model import pins
from tests.helpers import config_dict, modern_config, write_config

DIGEST = "sha256:" + "ab" * 32


def cluster(tmp_path, mode: str, pinned: dict | None = None) -> Cluster:
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = write_config(tmp_path / "cluster.yml", modern_config(**{"downloads.images": mode}))
    if pinned:
        (tmp_path / pins.PINS_FILE).write_text(yaml.safe_dump({pins.IMAGES: pinned}))
    return Cluster.load(config)


def test_each_box_needs_its_own_platforms_images(tmp_path):
    c = cluster(tmp_path, "registry")
    found = {(n.name, str(n.platform)): n.boxes for n in images.needed(c.profiles.items())}
    assert found[("registry.k8s.io/pause:3.10.2", "linux/amd64")] == ("ubuntu-2404",)
    assert found[("registry.k8s.io/pause:3.10.2", "windows/amd64 (build 20348)")] == ("windows-2022",)
    assert ("registry.k8s.io/kube-apiserver:v1.37.2", "linux/amd64") in found
    assert not any(name.startswith("registry.k8s.io/kube-apiserver") and "windows" in p for name, p in found)
    assert c.profile("windows-2022").image_platform == Platform("windows", "amd64", 20348)


def test_a_cache_config_hands_the_ubuntu_guest_every_pinned_image(tmp_path):
    names = images.box_images(cluster(tmp_path / "a", "registry").profile("ubuntu-2404"))
    pinned = {name: {"linux/amd64": DIGEST} for name in names[1:]}      # the first one left unpinned
    pinned[names[0]] = {"windows/amd64 (build 20348)": DIGEST}          # pinned for another platform only
    c = cluster(tmp_path / "b", "cache", pinned)
    env = step_env.step_env(c.profile("ubuntu-2404"), c).env
    assert env["K4W_IMAGE_IMPORTS"].split() == [f"{name}@{DIGEST}" for name in names[1:]]
    # windows-2022's pins are for the Windows platform, so none of the Ubuntu ones reach it.
    assert step_env.step_env(c.profile("windows-2022"), c).env["K4W_IMAGE_IMPORTS"] == ""


def test_a_registry_config_imports_nothing_even_with_pins(tmp_path):
    names = images.box_images(cluster(tmp_path / "a", "registry").profile("ubuntu-2404"))
    c = cluster(tmp_path / "b", "registry", {name: {"linux/amd64": DIGEST} for name in names})
    assert step_env.step_env(c.profile("ubuntu-2404"), c).env["K4W_IMAGE_IMPORTS"] == ""


def test_a_cache_config_hands_the_windows_guest_its_images_by_the_name_the_cri_keeps(tmp_path):
    # The Windows containerd-era box imports its 4 images from the build CD; the HostProcess base image is
    # named with a tag and a digest, which the CRI keeps as the digest alone (registry.stored_name).
    names = images.box_images(cluster(tmp_path / "a", "registry").profile("windows-2022"))
    c = cluster(tmp_path / "b", "cache", {name: {"windows/amd64 (build 20348)": DIGEST} for name in names})
    entries = step_env.step_env(c.profile("windows-2022"), c).env["K4W_IMAGE_IMPORTS"].split()
    assert [e.rsplit("@", 1)[0] for e in entries] == [
        "registry.k8s.io/pause:3.10.2", "mcr.microsoft.com/windows/servercore:ltsc2022",
        "mcr.microsoft.com/windows/nanoserver:ltsc2022",
        "mcr.microsoft.com/oss/kubernetes/windows-host-process-containers-base-image"
        "@sha256:b4c9637e032f667c52d1eccfa31ad8c63f1b035e8639f3f48a510536bf34032b"]
    assert {e.rsplit("@", 1)[1] for e in entries} == {DIGEST}
    assert images.imported(c.config, c.profile("windows-2022"))


def test_the_docker_era_ubuntu_box_loads_its_images_and_the_1803_box_pulls(tmp_path):
    # ubuntu-1604's Docker loads docker-save archives (k4w_load_images); windows-1803 still pulls (its Windows
    # layers are not tried by any bake here). Only pinned images are listed.
    config = write_config(tmp_path / "cluster.yml", config_dict(**{"downloads.images": "cache"}))
    names = images.box_images(Cluster.load(config).profile("ubuntu-1604"))
    (tmp_path / pins.PINS_FILE).write_text(yaml.safe_dump({pins.IMAGES: {name: {"linux/amd64": DIGEST} for name in names[:-1]}}))
    c = Cluster.load(config)
    assert {box: (p.container_runtime, images.imported(c.config, p)) for box, p in c.profiles.items()} == {
        "ubuntu-1604": ("docker", True), "windows-1803": ("docker", False)}
    entries = step_env.step_env(c.profile("ubuntu-1604"), c).env["K4W_IMAGE_IMPORTS"].split()
    assert [e.rsplit("@", 1)[0] for e in entries] == names[:-1] and "registry.k8s.io/pause:3.1" in names
    assert step_env.step_env(c.profile("windows-1803"), c).env["K4W_IMAGE_IMPORTS"] == ""
