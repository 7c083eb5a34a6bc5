"""The Docker era's image archive (image_cache.write_docker_archive): what `docker load` reads.

The real consumer is Docker in a guest: `invoke e2e --box debian-12-e2e --offline` loads these archives
with Debian's docker.io 20.10 and the box spec holds each loaded image to its pinned manifest (no Docker
engine runs on this machine). These tests hold the archive to the format moby v17.03.2-ce and v20.10.24
read (image/tarexport/load.go): manifest.json items {Config, RepoTags, Layers} naming members of the tar,
RepoTags name:tag, one layer per DiffID of the config, and the pinned manifest carried for the guest.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile

import pytest

from k4w.bake import image_cache
from k4w.infra.errors import K4wError


def _blob(root, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = image_cache.blob_path(root, digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return digest


def _layer(files: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


@pytest.fixture
def image(tmp_path):
    """A two-layer image in the cache as a registry serves it: gzip layers, a config with their DiffIDs."""
    root = tmp_path / "images"
    layers = [_layer({"a": b"first"}), _layer({"b": b"second"})]
    packed = [gzip.compress(layer, mtime=0) for layer in layers]
    config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {
        "type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest() for layer in layers]}}).encode()
    config_digest = _blob(root, config)
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest,
                                      "size": len(config)},
                           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": _blob(root, p),
                                       "size": len(p)} for p in packed]}, indent=3).encode()
    return root, _blob(root, manifest), config_digest, layers


def _members(path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


def test_the_archive_is_what_docker_load_reads_and_carries_the_pinned_manifest(image, tmp_path):
    root, digest, config_digest, layers = image
    archive = image_cache.write_docker_archive(root, "registry.k8s.io/pause:3.1", digest, tmp_path / "a.tar")
    members = _members(archive)
    [item] = json.loads(members["manifest.json"])
    assert item["RepoTags"] == ["registry.k8s.io/pause:3.1"]
    config = members[item["Config"]]
    assert "sha256:" + hashlib.sha256(config).hexdigest() == config_digest   # Docker's image ID
    # load decompresses each layer and checks it against the config's DiffIDs, in order.
    diff_ids = json.loads(config)["rootfs"]["diff_ids"]
    assert ["sha256:" + hashlib.sha256(gzip.decompress(members[m])).hexdigest() for m in item["Layers"]] == diff_ids
    # The guest hashes the manifest k4w pinned, then reads the config it names.
    manifest = members[f"blobs/sha256/{digest.split(':')[1]}"]
    assert "sha256:" + hashlib.sha256(manifest).hexdigest() == digest
    assert json.loads(manifest)["config"]["digest"] == config_digest


def test_an_untagged_name_is_loaded_as_latest_and_a_digest_name_is_refused(image, tmp_path):
    root, digest, _, _ = image
    archive = image_cache.write_docker_archive(root, "quay.io/coreos/flannel", digest, tmp_path / "b.tar")
    assert json.loads(_members(archive)["manifest.json"])[0]["RepoTags"] == ["quay.io/coreos/flannel:latest"]
    with pytest.raises(K4wError, match="name:tag only"):
        image_cache.write_docker_archive(root, f"registry.k8s.io/pause@{digest}", digest, tmp_path / "c.tar")
    assert not (tmp_path / "c.tar").exists()
