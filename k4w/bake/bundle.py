"""`invoke bundle` / `invoke bundle-import`: one archive, made on a connected host, that fills both host caches
(components and images) on an air-gapped one, every file checked again there.

The archive is a tar (POSIX pax) whose first member is MANIFEST:

    {"format": 1, "created": "<UTC>", "config": "<cluster.yml name>", "config_sha256": "...", "boxes": [...],
     "components": [{"path": "<component>/<version>/<file>", "url", "sha256", "size"}],
     "images": [{"name", "platform", "digest", "size", "blobs": ["sha256:..."]}],
     "not_included": "..."}

then `k4w-pins.yml` (the pins it was made with), `components/<path>` and `images/blobs/sha256/<hex>`.
Nothing else is read from it: a member of another name, a link, or a path that leaves its folder is refused.
On import each component must match the checksum this host's profiles and pins give it (not only the one the
bundle says), each image blob must hash to its name, and each image's digest must be the one pinned here; the
bundle's pins (components and images) that this host's k4w-pins.yml lacks are added to it first (a pin that
differs from one already there is refused, never replaced).
The installation ISOs are not in it: they are licensed to whoever downloaded them.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
import tarfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import yaml
from rich.console import Console

from k4w.derive.cluster import Cluster
from k4w.derive.images import needed
from k4w.infra import download, files, ui
from k4w.infra.errors import K4wError
from k4w.media.iso import human_size
from k4w.model import pins
from . import cache, fetch, image_cache

FORMAT = 1
MANIFEST = "k4w-bundle.json"
NOT_INCLUDED = ("the installation ISOs: they are licensed to whoever downloaded them; put them on the air-gapped host "
                "yourself and register each with `invoke iso-add`")
_BLOB = re.compile(r"^images/blobs/sha256/([0-9a-f]{64})$")
_READ = 1024 * 1024


@dataclass
class Imported:
    components: int = 0
    images: int = 0
    blobs: int = 0
    bytes: int = 0
    pinned: list[str] = field(default_factory=list)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_READ), b""):
            digest.update(block)
    return digest.hexdigest()


def make(cluster: Cluster, dest: Path, boxes: list[str] | None = None, console: Console | None = None) -> dict:
    """Fill both caches for these boxes (every image pinned), then write the bundle to dest; its manifest."""
    missing = [item.label for item in needed((box, cluster.profile(box)) for box in boxes or list(cluster.profiles))
               if not item.pinned]
    if missing:
        raise K4wError(f"{len(missing)} image(s) have no pinned digest, which the air-gapped host checks them against: "
                       + ", ".join(missing) + "; run `invoke pin-images` first")
    unpinned = [item for item in cache.plan(cluster, boxes) if item.checksum is None or item.checksum.key not in pins.GUEST_KEYS]
    if unpinned:
        raise K4wError("the air-gapped host checks each component against a sha256 or sha512, which these have not (a "
                       "published checksum file cannot be read there): "
                       + "; ".join(f"{item.label}: {'; '.join(item.pin_commands(cluster.config_file))}" for item in unpinned))
    fetch.ensure(cluster, boxes, console=console)
    report = image_cache.ensure(cluster, boxes, console=console)
    root = cache.cache_dir(cluster.config, cluster.config_file)
    entries = cache.Manifest(root).files
    items = cache.plan(cluster, boxes)
    images_root = image_cache.cache_root(cluster)
    images = []
    for row in report.rows:
        images.append({"name": row.item.name, "platform": str(row.item.platform), "digest": row.digest, "size": row.size,
                       "blobs": image_cache.image_blobs(images_root, row.digest)})
    config_file = Path(cluster.config_file or "cluster.yml")
    manifest = {
        "format": FORMAT, "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "config": config_file.name, "config_sha256": _sha256_file(config_file) if config_file.is_file() else None,
        "boxes": boxes or list(cluster.profiles),
        "components": [{"path": item.relpath, "url": item.url, "sha256": entries[item.relpath]["sha256"],
                        "size": entries[item.relpath]["size"]} for item in items],
        "images": images, "not_included": NOT_INCLUDED}
    dest = Path(dest)
    pins_file = pins.pins_path(config_file)
    with files.replacing(dest) as part, tarfile.open(part, "w", format=tarfile.PAX_FORMAT) as tar:
        image_cache.add_member(tar, MANIFEST, data=json.dumps(manifest, indent=2).encode() + b"\n")
        image_cache.add_member(tar, pins.PINS_FILE, data=pins_file.read_bytes() if pins_file.is_file() else b"")
        for item in items:
            image_cache.add_member(tar, f"components/{item.relpath}", path=item.path(root))
        for blob in dict.fromkeys(b for image in images for b in image["blobs"]):
            image_cache.add_member(tar, f"images/blobs/sha256/{blob.split(':', 1)[1]}", path=image_cache.blob_path(images_root, blob))
    ui.say(f"bundle {dest}: {len(items)} component(s), {len(images)} image(s), {human_size(dest.stat().st_size)}; "
           f"not included: {NOT_INCLUDED}", to=console)
    return manifest


def _read_manifest(tar: tarfile.TarFile, archive: Path) -> dict:
    first = tar.next()
    if first is None or first.name != MANIFEST or not first.isfile():
        raise K4wError(f"{archive}: not a k4w bundle (its first member is not {MANIFEST})")
    try:
        manifest = json.loads(tar.extractfile(first).read(4 * 1024 * 1024))
    except ValueError as exc:
        raise K4wError(f"{archive}: {MANIFEST} is not JSON: {exc}") from None
    if manifest.get("format") != FORMAT:
        raise K4wError(f"{archive}: bundle format {manifest.get('format')!r}; this k4w reads format {FORMAT}")
    return manifest


def import_bundle(config_file: str | Path, archive: Path, console: Console | None = None) -> Imported:
    """Fill this host's caches from a bundle, checking every file; the pins it brings are added first."""
    archive = Path(archive)
    done = Imported()
    with tarfile.open(archive, "r:") as tar:
        manifest = _read_manifest(tar, archive)
        pinned = tar.next()
        if pinned is None or pinned.name != pins.PINS_FILE or not pinned.isfile():
            raise K4wError(f"{archive}: its second member is not {pins.PINS_FILE}")
        bundled = yaml_load(tar.extractfile(pinned).read())
        done.pinned = [f"component {name}" for name in pins.add_component_pins(config_file, bundled)]
        resolved = {(name, platform): digest for name, by in (bundled.get(pins.IMAGES) or {}).items() for platform, digest in by.items()}
        result = pins.record_images(config_file, resolved)
        if result.conflicts:
            raise K4wError("the bundle's image pins differ from this host's k4w-pins.yml:\n" + "\n".join(result.conflicts))
        done.pinned += result.recorded
        cluster = Cluster.load(config_file)   # with the pins just added
        root = cache.cache_dir(cluster.config, cluster.config_file)
        items = {item.relpath: item for item in cache.plan(cluster)}
        images_root = image_cache.cache_root(cluster)
        wanted_blobs = {b.split(":", 1)[1] for image in manifest.get("images", []) for b in image.get("blobs", [])}
        while (member := tar.next()) is not None:   # after the manifest and the pins, in the order written
            if not member.isfile():
                raise K4wError(f"{archive}: member {member.name!r} is not a regular file (a bundle holds no links or folders)")
            name = PurePosixPath(member.name)
            if name.is_absolute() or ".." in name.parts:
                raise K4wError(f"{archive}: member {member.name!r} leaves the bundle's folders")
            blob = _BLOB.match(member.name)
            if member.name.startswith("components/"):
                relpath = member.name.removeprefix("components/")
                item = items.get(relpath)
                if item is None:
                    continue   # a component of a box this config does not use: not taken
                done.bytes += _take_component(tar, member, item, root)
                done.components += 1
            elif blob and blob.group(1) in wanted_blobs:
                done.bytes += _take_blob(tar, member, blob.group(1), images_root)
                done.blobs += 1
            else:
                raise K4wError(f"{archive}: unexpected member {member.name!r}")
    record = image_cache.Record(images_root)
    here = {image_cache.key(item): item for item in needed(cluster.profiles.items())}
    for image in manifest.get("images", []):
        item = here.get(f"{image['name']} {image['platform']}")
        if item is None:
            continue
        if item.pinned != image["digest"]:
            raise K4wError(f"{image['name']} ({image['platform']}): the bundle holds {image['digest']}, but this host pins "
                           f"{item.pinned}")
        size = image_cache.blobs_present(images_root, image["digest"])
        if size is None:
            raise K4wError(f"{image['name']} ({image['platform']}): the bundle lacks a blob of {image['digest']}")
        record.save(item, image["digest"], size, f"bundle {archive.name}")
        done.images += 1
    ui.say(f"imported {done.components} component(s) and {done.images} image(s) ({done.blobs} blobs), "
           f"{human_size(done.bytes)}, every file checked; {len(done.pinned)} pin(s) added to "
           f"{pins.pins_path(config_file)}. Not in a bundle: {manifest.get('not_included', NOT_INCLUDED)}", to=console)
    return done


def yaml_load(data: bytes) -> dict:
    try:
        loaded = yaml.safe_load(data.decode("utf-8")) or {}
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise K4wError(f"the bundle's {pins.PINS_FILE} is not YAML: {exc}") from None
    return loaded if isinstance(loaded, dict) else {}


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path) -> None:
    with open(dest, "wb") as out, tar.extractfile(member) as src:
        for block in iter(lambda: src.read(_READ), b""):
            out.write(block)


def _take_component(tar: tarfile.TarFile, member: tarfile.TarInfo, item: cache.Item, root: Path) -> int:
    """The component, verified against this host's checksum for it, put whole into its cache place
    (a file that does not match is never there, not even for a moment)."""
    if item.checksum is None or item.checksum.key not in pins.GUEST_KEYS:
        raise K4wError(f"{item.relpath}: this host has no sha256 or sha512 for it to check the bundle's copy against "
                       "(pin it on the connected host with `invoke pin`, then bundle again)")
    with files.replacing(item.path(root)) as tmp:
        _extract(tar, member, tmp)
        sha256, sha512 = download.hash_file(tmp)
        if not download.matches(download.Expected(item.checksum.key, item.checksum.value), sha256, sha512):
            raise K4wError(f"{item.relpath} from the bundle does not match {item.checksum.key} {item.checksum.value} "
                           f"({item.checksum.source}): not taken")
        size = tmp.stat().st_size
    # Recorded as verified, so the next fetch or plan hashes nothing again.
    cache.Manifest(root).record(item, download.Downloaded(item.path(root), size, sha256, sha512, 0))
    return size


def _take_blob(tar: tarfile.TarFile, member: tarfile.TarInfo, hexdigest: str, images_root: Path) -> int:
    with files.replacing(image_cache.blob_path(images_root, f"sha256:{hexdigest}")) as tmp:
        _extract(tar, member, tmp)
        if _sha256_file(tmp) != hexdigest:
            raise K4wError(f"image blob sha256:{hexdigest} from the bundle does not hash to its name: not taken")
        return tmp.stat().st_size


def default_name(cluster: Cluster) -> str:
    stem = Path(cluster.config_file or "cluster.yml").stem
    return f"k4w-bundle-{stem}-{_dt.date.today().isoformat()}.tar"

