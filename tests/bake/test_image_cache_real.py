"""`invoke fetch --images` against a real registry: the pinned distribution registry v3.1.2 on 127.0.0.1
over TLS (ci/e2e/registry.py), standing as cluster.yml's mirror of registry.k8s.io.

What a user notices: the images land in the host cache through the mirror (with containerd's ?ns=),
a second fetch asks the registry nothing and fetches 0 bytes, a damaged blob is fetched again, and
the dry run says where each image would come from without touching the cache.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ci.e2e import registry as e2e_registry
from k4w.bake import commands, image_cache
from k4w.derive import registry
from k4w.derive.cluster import Cluster
from k4w.derive.images import Needed
from k4w.infra.image_platform import Platform
from k4w.infra.errors import K4wError
from k4w.model import pins
from tests.helpers import image_archive, modern_config, write_config

NAMES = ("registry.k8s.io/pause:3.10.2", "registry.k8s.io/kube-proxy:v1.37.2")
LINUX = Platform("linux", "amd64")


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    work = tmp_path_factory.mktemp("registry")
    with e2e_registry.serving("127.0.0.1", work / "served", upstreams=("registry.k8s.io",)) as mirrors:
        for n, name in enumerate(NAMES):
            mirrors.push(name, image_archive(work, name, 256 * 1024 * (n + 1), stem=f"image{n}"))
        yield mirrors


@pytest.fixture
def cluster(mirror, tmp_path, monkeypatch):
    config = write_config(tmp_path / "cluster.yml", modern_config(
        **{"registry": mirror.registry_block(), "downloads.cache": str(tmp_path / "cache")}))
    # The images of the real boxes are not served here: these two stand for a box's list, pinned as the
    # profiles would carry the pins (k4w.model.pins.apply).
    monkeypatch.setattr(image_cache, "needed", lambda pairs: [
        Needed(name, LINUX, ("ubuntu-2404",), pins.image_digests(pins.load(config), "linux/amd64").get(name)) for name in NAMES])
    return Cluster.load(config)


def requests_since(mirror, before: int) -> list:
    return mirror.registries["registry.k8s.io"].requests()[before:]


def test_images_are_pulled_through_the_mirror_then_served_from_the_cache(mirror, cluster, tmp_path):
    before = len(mirror.registries["registry.k8s.io"].requests())
    first = image_cache.fetch(cluster)
    assert [(r.status, r.digest) for r in first.rows] == [("downloaded", mirror.pushed[name]) for name in NAMES]
    assert first.fetched > 3 * 256 * 1024
    asked = requests_since(mirror, before)
    assert asked and all("ns=registry.k8s.io" in r.query for r in asked if r.path != "/v2/")   # containerd's ?ns= to a mirror

    root = tmp_path / "cache" / "images"
    record = json.loads((root / image_cache.RECORD).read_text())["images"]
    assert {k: v["digest"] for k, v in record.items()} == {f"{name} linux/amd64": mirror.pushed[name] for name in NAMES}
    index = json.loads((root / "index.json").read_text())
    assert sorted(m["annotations"]["io.containerd.image.name"] for m in index["manifests"]) == sorted(NAMES)

    before = len(mirror.registries["registry.k8s.io"].requests())
    second = image_cache.fetch(cluster)
    assert [r.status for r in second.rows] == ["cached", "cached"] and second.fetched == 0
    assert requests_since(mirror, before) == []   # a rebuild asks the registry nothing


def test_a_damaged_blob_is_pulled_again(mirror, cluster, tmp_path):
    image_cache.fetch(cluster)
    root = tmp_path / "cache" / "images"
    manifest = json.loads(image_cache.blob_path(root, mirror.pushed[NAMES[0]]).read_bytes())
    layer = image_cache.blob_path(root, manifest["layers"][0]["digest"])
    layer.write_bytes(layer.read_bytes()[:-10])   # truncated on disk

    again = image_cache.fetch(cluster)
    assert [r.status for r in again.rows] == ["downloaded", "cached"]
    assert image_cache.blobs_present(root, mirror.pushed[NAMES[0]]) is not None


def test_the_dry_run_names_each_source_and_writes_nothing(mirror, cluster, tmp_path):
    lines = image_cache.describe(cluster)
    endpoint = mirror.registries["registry.k8s.io"].endpoint
    assert lines == [f"{name} (linux/amd64): would pull by its tag from the registry.k8s.io mirror {endpoint} else "
                     f"https://registry.k8s.io (for ubuntu-2404)" for name in NAMES]
    assert not (tmp_path / "cache").exists()


def test_pull_sources_follow_containerd():
    """Mirror first with ?ns=, then the upstream; Docker Hub's API host; a mirror prefix path kept."""
    cfg = Cluster.load(write_config(Path(os.environ.get("TMPDIR", "/tmp")) / "k4w-sources.yml", modern_config(**{"registry": {"mirrors": {
        "registry.k8s.io": {"endpoint": "https://harbor.corp.example/k8s-proxy"}}}}))).config
    mirror, upstream = registry.pull_sources("registry.k8s.io/coredns/coredns:v1.14.6", cfg)
    assert (mirror.endpoint, mirror.repository, mirror.namespace) == ("https://harbor.corp.example", "k8s-proxy/coredns/coredns", "registry.k8s.io")
    assert (upstream.endpoint, upstream.repository, upstream.namespace) == ("https://registry.k8s.io", "coredns/coredns", None)
    [hub] = registry.pull_sources("busybox:1.28", cfg)
    assert (hub.endpoint, hub.repository) == ("https://registry-1.docker.io", "library/busybox")
    assert registry.split_reference("ghcr.io/flannel-io/flannel@sha256:" + "a" * 64)[2] == "sha256:" + "a" * 64
    assert registry.split_reference("localhost:5000/x")[1:] == ("x", "latest")


def test_pin_images_records_each_digest_and_refuses_a_moved_tag(mirror, cluster, tmp_path):
    result = commands.pin_images(cluster)
    pinned = pins.load(tmp_path / "cluster.yml")[pins.IMAGES]
    assert pinned == {name: {"linux/amd64": mirror.pushed[name]} for name in NAMES}
    assert len(result.recorded) == 2

    # A fetch now asks for the pinned manifest by its digest, not the tag.
    (tmp_path / "cache").rename(tmp_path / "old-cache")
    before = len(mirror.registries["registry.k8s.io"].requests())
    image_cache.fetch(cluster)
    manifests = [r.path for r in requests_since(mirror, before) if "/manifests/" in r.path]
    assert manifests and all(path.rsplit("/", 1)[1].startswith("sha256:") for path in manifests)

    # The tag moves upstream: the pin stands, and pin-images says so.
    old = mirror.pushed[NAMES[0]]
    moved = mirror.push(NAMES[0], image_archive(tmp_path, NAMES[0], 1024, stem="moved"))   # mirror.pushed follows: the module's other tests read it
    with pytest.raises(K4wError, match=rf"{NAMES[0]} \(linux/amd64\) is pinned as {old} but now resolves to {moved}: the tag "
                                       r"moved; find out why, then run: invoke pin-images --replace"):
        commands.pin_images(cluster)
    assert pins.load(tmp_path / "cluster.yml")[pins.IMAGES][NAMES[0]]["linux/amd64"] == old
    commands.pin_images(cluster, replace=True)
    assert pins.load(tmp_path / "cluster.yml")[pins.IMAGES][NAMES[0]]["linux/amd64"] == moved
