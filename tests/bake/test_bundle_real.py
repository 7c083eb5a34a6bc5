"""`invoke bundle` on a connected host, `invoke bundle-import` on an air-gapped one.

The connected host pulls two images from the pinned distribution registry v3.1.2 on 127.0.0.1 (standing as
cluster.yml's mirror) and one component from tests/fakes/local_http.py (a stand-in download site). Then both
are stopped: the air-gapped host has a cluster.yml of its own, no pins and empty caches, and imports the bundle.

What a user notices: after the import, `fetch` and `fetch --images` fetch 0 bytes and ask nothing; the image
pins arrived; a bundle whose bytes were changed, or that holds a path leaving its folders, is refused.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from ci.e2e import registry as e2e_registry
from k4w.bake import bundle, cache, commands, fetch, image_cache
from k4w.commands import doctor
from k4w.derive import images
from k4w.derive.cluster import Cluster
from k4w.derive.images import Needed
from k4w.infra.errors import K4wError
from k4w.infra.image_platform import Platform
from k4w.model import pins
from tests.fakes import local_http
from tests.helpers import image_archive, modern_config, write_config

NAMES = ("registry.k8s.io/pause:3.10.2", "ghcr.io/flannel-io/flannel:v0.28.10")
COMPONENT = os.urandom(200 * 1024)
SHA = hashlib.sha256(COMPONENT).hexdigest()


@pytest.fixture
def stand_ins(monkeypatch):
    """The boxes' lists, cut to two images and one component the test serves (their real lists are not served here)."""
    def items(cluster, boxes=None):
        return [cache.Item(("ubuntu-2404",), "cni", "1.9.1", "https://github.com/x/cni.tgz", LOCAL["url"],
                           pins.Checksum("sha256", SHA, "test"), "cni/1.9.1/cni.tgz")]

    def wanted(pairs):
        return [Needed(name, Platform("linux", "amd64"), ("ubuntu-2404",),
                       pins.image_digests(pins.load(LOCAL["config"]), "linux/amd64").get(name)) for name in NAMES]

    monkeypatch.setattr(cache, "plan", items)
    monkeypatch.setattr(image_cache, "needed", wanted)
    monkeypatch.setattr(bundle, "needed", wanted)
    monkeypatch.setattr(images, "needed", wanted)


LOCAL: dict = {}


@pytest.fixture
def made(tmp_path, stand_ins):
    """The bundle, made on the 'connected' host; the registry and the site are gone when it returns."""
    connected = tmp_path / "connected"
    connected.mkdir()
    with e2e_registry.serving("127.0.0.1", tmp_path / "registry", upstreams=("registry.k8s.io", "ghcr.io")) as mirrors, \
            local_http.site({"/cni.tgz": COMPONENT}) as site:
        for n, name in enumerate(NAMES):
            mirrors.push(name, image_archive(tmp_path, name, 64 * 1024, stem=f"image{n}"))
        config = write_config(connected / "cluster.yml", modern_config(**{
            "registry": mirrors.registry_block(), "downloads.cache": str(connected / "cache")}))
        LOCAL.update(config=config, url=f"{site.url}/cni.tgz")
        commands.pin_images(Cluster.load(config))
        dest = tmp_path / "k4w-bundle.tar"
        manifest = bundle.make(Cluster.load(config), dest)
        pushed = dict(mirrors.pushed)
    return dest, manifest, pushed, mirrors


def air_gapped(tmp_path, mirrors) -> Path:
    host = tmp_path / "air-gapped"
    host.mkdir()
    config = write_config(host / "cluster.yml", modern_config(**{
        "registry": mirrors.registry_block(), "downloads.cache": str(host / "cache"), "downloads.images": "cache"}))
    LOCAL["config"] = config
    return config


def test_a_bundle_fills_both_caches_of_an_air_gapped_host(made, tmp_path):
    dest, manifest, pushed, mirrors = made
    assert [i["digest"] for i in manifest["images"]] == [pushed[n] for n in NAMES]
    assert manifest["components"] == [{"path": "cni/1.9.1/cni.tgz", "url": "https://github.com/x/cni.tgz", "sha256": SHA,
                                       "size": len(COMPONENT)}]
    assert "ISOs" in manifest["not_included"]
    config = air_gapped(tmp_path, mirrors)
    # `invoke doctor --offline` before: nothing is there, and a build needs all of it.
    before = doctor.cache_checks(Cluster.load(config), offline=True) + doctor.image_checks(Cluster.load(config), offline=True)
    assert [c.name for c in before if not c.ok] == ["cache: ubuntu-2404 cni", "component cache",
                                                   *(f"image cache: {n} (linux/amd64)" for n in NAMES), "image cache"]
    assert all(c.stages == ("build",) for c in before)

    done = bundle.import_bundle(config, dest)
    assert (done.components, done.images) == (1, 2) and len(done.pinned) == 2
    assert pins.image_digests(pins.load(config), "linux/amd64") == {n: pushed[n] for n in NAMES}

    cluster = Cluster.load(config)
    components = fetch.fetch(cluster)
    assert [r.status for r in components.rows] == ["cached"] and components.fetched == 0
    pulled = image_cache.fetch(cluster)
    assert [r.status for r in pulled.rows] == ["cached", "cached"] and pulled.fetched == 0
    after = doctor.cache_checks(cluster, offline=True) + doctor.image_checks(cluster, offline=True)
    assert [c.name for c in after if not c.ok] == []
    # `invoke plan`'s lines for the box: nothing left to download.
    assert fetch.box_summary(cluster, "ubuntu-2404").endswith(": 1 verified")
    assert image_cache.box_summary(cluster, "ubuntu-2404") == "2 image(s) to import: 2 cached at their pins, 0 to pull"


def _rewrite(src: Path, dest: Path, change) -> None:
    with tarfile.open(src) as old, tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as new:
        for member in old:
            data = old.extractfile(member).read()
            member, data = change(member, data)
            member.size = len(data)
            new.addfile(member, io.BytesIO(data))


def test_a_changed_blob_or_component_is_refused(made, tmp_path):
    dest, manifest, pushed, mirrors = made
    config = air_gapped(tmp_path, mirrors)
    flipped = tmp_path / "flipped.tar"
    _rewrite(dest, flipped, lambda m, d: (m, d[:-1] + bytes([d[-1] ^ 1])) if m.name.startswith("images/blobs/") else (m, d))
    with pytest.raises(K4wError, match="does not hash to its name: not taken"):
        bundle.import_bundle(config, flipped)
    swapped = tmp_path / "swapped.tar"
    _rewrite(dest, swapped, lambda m, d: (m, os.urandom(len(d))) if m.name.startswith("components/") else (m, d))
    shutil.rmtree(tmp_path / "air-gapped" / "cache", ignore_errors=True)
    with pytest.raises(K4wError, match=rf"cni/1.9.1/cni.tgz from the bundle does not match sha256 {SHA}"):
        bundle.import_bundle(config, swapped)
    assert not (tmp_path / "air-gapped" / "cache" / "cni" / "1.9.1" / "cni.tgz").exists()


def test_a_member_that_leaves_the_bundle_is_refused(made, tmp_path):
    dest, _, _, mirrors = made
    config = air_gapped(tmp_path, mirrors)
    evil = tmp_path / "evil.tar"

    def escape(member, data):
        if member.name.startswith("components/"):
            member.name = "components/../../../escaped"
        return member, data

    _rewrite(dest, evil, escape)
    with pytest.raises(K4wError, match="leaves the bundle's folders"):
        bundle.import_bundle(config, evil)
    assert not (tmp_path.parent / "escaped").exists()


def test_the_bundles_component_pins_are_added_never_replaced(tmp_path):
    """A component pinned on the connected host (`invoke pin`, e.g. windows-1803 flannel) must arrive with the
    bundle, or the air-gapped host could not check it; a different pin already there stops the import."""
    config = write_config(tmp_path / "cluster.yml", modern_config())
    pin = {"url": "https://github.com/flannel-io/flannel/releases/download/v0.11.0/flanneld.exe", "sha256": "ab" * 32,
           "size": 1, "pinned": "2026-12-03T00:00:00+00:00"}
    assert pins.add_component_pins(config, {"windows-1803": {"flannel": pin}, pins.IMAGES: {}}) == ["windows-1803.flannel"]
    assert pins.load(config)["windows-1803"]["flannel"]["sha256"] == "ab" * 32
    assert pins.add_component_pins(config, {"windows-1803": {"flannel": pin}}) == []   # the same: nothing to add
    with pytest.raises(K4wError, match="windows-1803.flannel: pinned here as abab"):
        pins.add_component_pins(config, {"windows-1803": {"flannel": {**pin, "sha256": "cd" * 32}}})
    assert pins.load(config)["windows-1803"]["flannel"]["sha256"] == "ab" * 32
