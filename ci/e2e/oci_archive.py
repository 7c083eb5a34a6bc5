"""A small OCI image archive, written with tarfile: what `ctr -n k8s.io images import` reads.

One image per archive, one uncompressed layer, for linux/amd64:

    oci-layout                      {"imageLayoutVersion": "1.0.0"}
    index.json                      one manifest descriptor, annotated with the image's name
    blobs/sha256/<config digest>    the image config (Entrypoint, Env, rootfs diff_ids)
    blobs/sha256/<manifest digest>  the image manifest
    blobs/sha256/<layer digest>     the layer: a gzipped tar of the image's files, owned by root
                                    (gzip: the guest's disk holds the import twice, blob and snapshot)

Layout and media types: opencontainers/image-spec v1.1.0 image-layout.md, manifest.md, config.md.
The name: containerd@v2.3.7 client/import.go imageName() takes the image's full name from
the `io.containerd.image.name` annotation, else `org.opencontainers.image.ref.name`, which the OCI
spec (annotations.md) means as the tag alone; both are written as containerd's own export does
(core/images/archive/reference.go ociReferenceName). Everything is deterministic (mtime 0, uid 0):
the same files give the same digests, so an unchanged image is imported as the same image.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

# opencontainers/image-spec v1.1.0 media-types.md.
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
# containerd's annotation for the full image name (containerd core/images/annotations.go AnnotationImageName).
CONTAINERD_NAME = "io.containerd.image.name"
# The OCI annotation for the reference (image-spec annotations.md AnnotationRefName).
OCI_REF_NAME = "org.opencontainers.image.ref.name"
# Docker's and the distroless images' default PATH, which kubeadm's static pods rely on to find
# `kube-apiserver` and `etcd` by name.
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Entry:
    """One file of the layer: copied from `source`, or a symlink to `link`."""

    path: str                 # absolute path inside the image, e.g. /usr/local/bin/etcd
    source: Path | None = None
    link: str | None = None
    mode: int = 0o755


@dataclass
class Image:
    name: str                             # e.g. registry.k8s.io/etcd:3.7.0-0
    entries: list[Entry]
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=lambda: [DEFAULT_PATH])
    user: str = ""                        # "" runs as root, as an image without USER does

    @property
    def tag(self) -> str:
        """The tag after the last colon that is not part of a registry's host:port."""
        tail = self.name.rsplit("/", 1)[-1]
        return tail.split(":", 1)[1] if ":" in tail else "latest"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _directories(paths: list[str]) -> list[str]:
    """Every parent folder of the entries, parents first, so the layer creates them with mode 0755."""
    found: set[str] = set()
    for path in paths:
        parts = path.strip("/").split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            found.add("/".join(parts[:depth]))
    return sorted(found, key=lambda d: (d.count("/"), d))


def _info(name: str, kind: bytes, mode: int, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size = kind, mode, size
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    return info


def layer_bytes(entries: list[Entry]) -> bytes:
    """The layer tar: folders, then the entries in path order (relative names, as image layers have)."""
    paths = [e.path for e in entries]
    if len(set(paths)) != len(paths):
        raise ValueError(f"an image lists a path twice: {sorted(p for p in paths if paths.count(p) > 1)}")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for folder in _directories(paths):
            tar.addfile(_info(folder, tarfile.DIRTYPE, 0o755))
        for entry in sorted(entries, key=lambda e: e.path):
            name = entry.path.lstrip("/")
            if entry.link is not None:
                info = _info(name, tarfile.SYMTYPE, 0o777)
                info.linkname = entry.link
                tar.addfile(info)
                continue
            data = Path(entry.source).read_bytes()
            tar.addfile(_info(name, tarfile.REGTYPE, entry.mode, len(data)), io.BytesIO(data))
    return buffer.getvalue()


def write(path: Path, image: Image) -> str:
    """Write the archive of `image` to path; return its manifest digest."""
    layer = layer_bytes(image.entries)
    # Level 1: these are stripped Go binaries, which higher levels shrink little, at several times the time.
    packed = gzip.compress(layer, compresslevel=1, mtime=0)
    config = json.dumps({
        "architecture": "amd64",
        "os": "linux",
        "config": {key: value for key, value in (("Entrypoint", image.entrypoint), ("Cmd", image.cmd),
                                                 ("Env", image.env), ("User", image.user), ("WorkingDir", "/")) if value},
        "rootfs": {"type": "layers", "diff_ids": [_digest(layer)]},
        "history": [{"created_by": "k4w ci/e2e (local image from the pinned tools)"}],
    }, sort_keys=True).encode()
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": CONFIG_TYPE, "digest": _digest(config), "size": len(config)},
        "layers": [{"mediaType": LAYER_TYPE, "digest": _digest(packed), "size": len(packed)}],
    }, sort_keys=True).encode()
    index = json.dumps({
        "schemaVersion": 2,
        "mediaType": INDEX_TYPE,
        "manifests": [{
            "mediaType": MANIFEST_TYPE, "digest": _digest(manifest), "size": len(manifest),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {CONTAINERD_NAME: image.name, OCI_REF_NAME: image.tag},
        }],
    }, sort_keys=True).encode()
    files = [("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode()), ("index.json", index)]
    files += [(f"blobs/sha256/{_digest(blob).split(':')[1]}", blob) for blob in (config, manifest, packed)]
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with tarfile.open(partial, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for folder in ("blobs", "blobs/sha256"):
            tar.addfile(_info(folder, tarfile.DIRTYPE, 0o755))
        for name, data in files:
            tar.addfile(_info(name, tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))
    partial.replace(path)
    return _digest(manifest)


def unpack(path: Path, dest: Path) -> None:
    """Extract the image's layers into dest, as a snapshotter would lay out its root filesystem."""
    with tarfile.open(path) as tar:
        index = json.loads(tar.extractfile("index.json").read())
        for descriptor in index["manifests"]:
            manifest = json.loads(tar.extractfile("blobs/sha256/" + descriptor["digest"].split(":", 1)[1]).read())
            for layer in manifest["layers"]:
                data = tar.extractfile("blobs/sha256/" + layer["digest"].split(":", 1)[1]).read()
                if layer["mediaType"].endswith("+gzip"):
                    data = gzip.decompress(data)
                with tarfile.open(fileobj=io.BytesIO(data)) as layer_tar:
                    # Extraction filters came in Python 3.11.4 (Debian 12 has 3.11.2): use "tar" where there
                    # is one; without, these are our own layers, and every member stays inside dest.
                    if hasattr(tarfile, "tar_filter"):
                        layer_tar.extractall(dest, filter="tar")
                    else:
                        _refuse_escaping_members(layer_tar)
                        layer_tar.extractall(dest)


def _refuse_escaping_members(layer_tar: tarfile.TarFile) -> None:
    for member in layer_tar.getmembers():
        name = Path(member.name)
        if name.is_absolute() or ".." in name.parts or (member.islnk() and ".." in Path(member.linkname).parts):
            raise ValueError(f"layer member {member.name} would land outside the root filesystem")


@dataclass
class Read:
    """What an archive holds, read back the way an importer reads it."""

    layout: dict
    names: list[str]
    refs: list[str]
    config: dict
    files: dict[str, tarfile.TarInfo]
    problems: list[str]


def read(path: Path) -> Read:
    """Parse an archive written by write() (or any one-image OCI archive) and check its digests."""
    problems: list[str] = []
    with tarfile.open(path) as tar:
        members = {m.name: m for m in tar.getmembers()}

        def blob(digest: str) -> bytes:
            name = "blobs/sha256/" + digest.split(":", 1)[1]
            if name not in members:
                problems.append(f"missing blob {digest}")
                return b"{}"
            data = tar.extractfile(members[name]).read()
            if _digest(data) != digest:
                problems.append(f"blob {digest} holds data of digest {_digest(data)}")
            return data

        layout = json.loads(tar.extractfile(members["oci-layout"]).read())
        index = json.loads(tar.extractfile(members["index.json"]).read())
        descriptors = index.get("manifests", [])
        names = [d.get("annotations", {}).get(CONTAINERD_NAME, "") for d in descriptors]
        refs = [d.get("annotations", {}).get(OCI_REF_NAME, "") for d in descriptors]
        config: dict = {}
        files: dict[str, tarfile.TarInfo] = {}
        for descriptor in descriptors:
            manifest = json.loads(blob(descriptor["digest"]))
            config = json.loads(blob(manifest["config"]["digest"]))
            for layer in manifest.get("layers", []):
                data = blob(layer["digest"])
                if layer.get("mediaType", "").endswith("+gzip"):
                    data = gzip.decompress(data)
                if _digest(data) not in config.get("rootfs", {}).get("diff_ids", []):
                    problems.append(f"layer {layer['digest']} is not among the config's diff_ids")
                with tarfile.open(fileobj=io.BytesIO(data)) as layer_tar:
                    files.update({"/" + m.name: m for m in layer_tar.getmembers()})
    return Read(layout=layout, names=names, refs=refs, config=config, files=files, problems=problems)
