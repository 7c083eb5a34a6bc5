"""`invoke cache-prune`: what no box of the config(s) needs any more leaves the caches; what they need stays
cached, so the next fetch asks nobody for it.

The caches are filled by the real fetch code from the pinned distribution registry v3.1.2 on 127.0.0.1 (as
cluster.yml's mirror) and tests/fakes/local_http.py (a stand-in download site); the boxes' image and
component lists are cut to what the test serves (the real lists are not served here).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from ci.e2e import registry as e2e_registry
from k4w.bake import cache, commands, image_cache, prune
from k4w.derive import images
from k4w.derive.cluster import Cluster
from k4w.derive.images import Needed
from k4w.infra import image_pull
from k4w.infra.errors import K4wError
from k4w.infra.image_platform import Platform
from k4w.model import pins
from tests.fakes import local_http
from tests.helpers import image_archive, modern_config, write_config

OLD, NEW = "registry.k8s.io/pause:3.9", "registry.k8s.io/pause:3.10.2"
FILES = {"/cni-old.tgz": os.urandom(100 * 1024), "/cni-new.tgz": os.urandom(120 * 1024)}
DAY_AGO = time.time() - prune.GRACE - 60

# What the config needs; a test changes it the way an upgrade changes a profile.
WANTED: dict = {"images": [OLD, NEW], "components": ["/cni-old.tgz", "/cni-new.tgz"]}


def _item(path: str, site: str) -> cache.Item:
    version = "old" if "old" in path else "new"
    return cache.Item(("ubuntu-2404",), "cni", version, f"https://github.com/x{path}", f"{site}{path}",
                      pins.Checksum("sha256", hashlib.sha256(FILES[path]).hexdigest(), "test"), f"cni/{version}{path}")


@pytest.fixture
def filled(tmp_path, monkeypatch):
    """A cache holding two images and two components, fetched for real; the blobs dated a day back."""
    site_url: dict = {}

    def plan(cluster, boxes=None):
        return [_item(path, site_url["url"]) for path in WANTED["components"]]

    def wanted(pairs):
        return [Needed(name, Platform("linux", "amd64"), ("ubuntu-2404",)) for name in WANTED["images"]]

    monkeypatch.setattr(cache, "plan", plan)
    for module in (image_cache, images, prune):
        monkeypatch.setattr(module, "needed", wanted)
    with e2e_registry.serving("127.0.0.1", tmp_path / "registry", upstreams=("registry.k8s.io",)) as mirrors, \
            local_http.site(FILES) as site:
        site_url["url"] = site.url
        for n, name in enumerate((OLD, NEW)):
            mirrors.push(name, image_archive(tmp_path, name, 64 * 1024, stem=f"image{n}"))
        config = write_config(tmp_path / "cluster.yml", modern_config(**{
            "registry": mirrors.registry_block(), "downloads.cache": str(tmp_path / "cache")}))
        cluster = Cluster.load(config)
        commands.fetch_components(cluster)
        commands.fetch_components(cluster, images=True)
    root = tmp_path / "cache" / image_cache.FOLDER
    for blob in (root / "blobs" / "sha256").iterdir():
        os.utime(blob, (DAY_AGO, DAY_AGO))
    return cluster, tmp_path / "cache"


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _image_blobs(root: Path, name: str) -> set[str]:
    digest = image_cache.Record(root).read()[f"{name} linux/amd64"]["digest"]
    return prune._blobs_of(root, digest)


def test_an_upgrade_leaves_nothing_behind_and_the_rest_stays_cached(filled, capsys):
    cluster, cache_dir = filled
    root = cache_dir / image_cache.FOLDER
    old_blobs = _image_blobs(root, OLD)
    (cache_dir / "tools").mkdir()
    (cache_dir / "tools" / "packer").write_bytes(b"not k4w's cache")   # build tools share the folder
    WANTED.update(images=[NEW], components=["/cni-new.tgz"])
    try:
        before = _tree(cache_dir)
        dry = commands.prune_caches(cluster, dry_run=True)
        assert _tree(cache_dir) == before, "a dry run changed the cache"
        assert [key for key, _ in dry.components] == ["cni/old/cni-old.tgz"] and dry.images == [f"{OLD} linux/amd64"]
        assert "would remove component cni/old/cni-old.tgz" in capsys.readouterr().out

        done = commands.prune_caches(cluster)
        assert {digest for digest, _ in done.blobs} == old_blobs
        assert done.bytes == len(FILES["/cni-old.tgz"]) + sum(size for _, size in done.blobs) > 64 * 1024
        assert not (cache_dir / "cni" / "old").exists()
        assert (cache_dir / "tools" / "packer").read_bytes() == b"not k4w's cache"
        assert not any((root / "blobs" / "sha256" / d.split(":")[1]).exists() for d in old_blobs)
        assert [m["annotations"][image_pull.CONTAINERD_NAME] for m in json.loads((root / "index.json").read_text())["manifests"]] == [NEW]
        # What stays is still cached: the registry and the site are gone, and nothing needs them.
        commands.fetch_components(cluster)
        report = image_cache.fetch(cluster)
        assert [(row.item.name, row.status, row.fetched) for row in report.rows] == [(NEW, "cached", 0)]
        assert commands.prune_caches(cluster).bytes == 0   # a second prune finds nothing
    finally:
        WANTED.update(images=[OLD, NEW], components=["/cni-old.tgz", "/cni-new.tgz"])


def test_another_config_sharing_the_cache_keeps_what_it_needs(filled, tmp_path, monkeypatch):
    cluster, cache_dir = filled
    other = write_config(tmp_path / "other.yml", modern_config(**{"downloads.cache": str(cache_dir)}))
    needs = {str(cluster.config_file): [NEW], str(other): [OLD]}
    monkeypatch.setattr(prune, "keep_sets", lambda clusters: (
        {"cni/old/cni-old.tgz", "cni/new/cni-new.tgz"},
        {f"{name} linux/amd64" for c in clusters for name in needs[str(c.config_file)]}))
    done = commands.prune_caches(cluster, also=[str(other)])
    assert done.images == [] and done.blobs == [] and done.kept_images == 2
    alone = commands.prune_caches(cluster, dry_run=True)
    assert alone.images == [f"{OLD} linux/amd64"]


def test_an_also_config_with_another_cache_is_refused(filled, tmp_path):
    cluster, _ = filled
    other = write_config(tmp_path / "other.yml", modern_config(**{"downloads.cache": str(tmp_path / "elsewhere")}))
    with pytest.raises(K4wError, match="its cache is .*elsewhere.*it keeps nothing here"):
        commands.prune_caches(cluster, also=[str(other)])
    with pytest.raises(K4wError, match="no such file"):
        commands.prune_caches(cluster, also=[str(tmp_path / "missing.yml")])


def test_a_layer_a_kept_image_shares_stays_and_a_fresh_unrecorded_blob_waits(tmp_path):
    """Two images share a layer; only one is needed. Hand-made layout (no registry needed for the rule)."""
    root = tmp_path / image_cache.FOLDER
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def blob(data: bytes) -> dict:
        digest = image_pull.sha256(data)
        (blobs / digest.split(":")[1]).write_bytes(data)
        return {"digest": digest, "size": len(data)}

    shared, own = blob(b"shared layer"), blob(b"old image's own layer")
    keep = blob(json.dumps({"config": blob(b'{"a":1}'), "layers": [shared]}).encode())
    drop = blob(json.dumps({"config": blob(b'{"b":2}'), "layers": [shared, own]}).encode())
    for path in blobs.iterdir():
        os.utime(path, (DAY_AGO, DAY_AGO))
    fresh = blob(b"a layer a running fetch just wrote")
    (root / image_cache.RECORD).write_text(json.dumps({"version": 1, "images": {
        "new linux/amd64": {"digest": keep["digest"]}, "old linux/amd64": {"digest": drop["digest"]}}}))
    done = prune.Pruned()
    prune._prune_images(root, {"new linux/amd64"}, done, dry_run=False, now=time.time())
    removed = {digest for digest, _ in done.blobs}
    assert removed == {drop["digest"], image_pull.sha256(b'{"b":2}'), own["digest"]}
    assert (blobs / shared["digest"].split(":")[1]).is_file() and (blobs / fresh["digest"].split(":")[1]).is_file()
    assert done.young == 1
    assert image_cache.blobs_present(root, keep["digest"]) is not None


def test_an_unreadable_record_prunes_nothing(tmp_path):
    root = tmp_path / image_cache.FOLDER
    root.mkdir()
    (root / image_cache.RECORD).write_text("{not json")
    with pytest.raises(K4wError, match="unreadable.*nothing was pruned"):
        prune._prune_images(root, set(), prune.Pruned(), dry_run=False, now=time.time())


def test_a_cache_that_never_held_an_image_or_anything_is_pruned_quietly(tmp_path):
    cluster = Cluster.load(write_config(tmp_path / "cluster.yml", modern_config(**{"downloads.cache": str(tmp_path / "cache")})))
    assert prune.prune(cluster).bytes == 0
    assert not (tmp_path / "cache").exists(), "a prune created the cache folder"
