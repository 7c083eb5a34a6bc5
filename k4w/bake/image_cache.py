"""`invoke fetch --images`: every container image the boxes need, pulled once into the host image cache.

The images a box needs and the platform each is needed for come from k4w.derive.images; where each is
asked for (a registry mirror of cluster.yml first, then the upstream, the way the box's containerd
goes) from k4w.derive.registry.pull_sources. Each pull goes through k4w.infra.image_pull: the
cluster's proxy and NO_PROXY, a mirror's CA and credentials, every byte checked against its digest,
a cut blob resumed.

The cache is `<component cache>/images/`, an OCI image layout (opencontainers/image-spec v1.1.0
image-layout.md) whose blobs every image shares (a layer two images hold is stored once), and
`images.json`, k4w's record of which manifest each (image, platform) resolved to:

    {"version": 1, "images": {"<name> <platform>": {"digest", "size", "source", "fetched_at"}}}

An image whose record names a manifest whose blobs are all in the layout at the sizes the manifest
gives is cached: a rebuild asks no registry for it.
"""

from __future__ import annotations

import datetime as _dt
import io
import json
import tarfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from k4w.derive import registry
from k4w.derive.cluster import Cluster
from k4w.derive.images import Needed, needed
from k4w.infra import filelock, files, image_pull, ui
from k4w.infra.errors import K4wError
from k4w.infra.redact import redact
from k4w.media.iso import human_size
from . import cache
from .progress import FilesProgress

FOLDER = "images"
RECORD = "images.json"
RECORD_VERSION = 1


def cache_root(cluster: Cluster, cache_option: str | None = None) -> Path:
    return cache.cache_dir(cluster.config, cluster.config_file, cache_option) / FOLDER


def key(item: Needed) -> str:
    return f"{item.name} {item.platform}"


@dataclass
class ImageRow:
    item: Needed
    status: str                 # cached | downloaded | failed
    digest: str = ""
    size: int = 0               # the image's bytes: manifest, config and layers
    fetched: int = 0
    source: str = ""
    problem: str = ""


@dataclass
class ImageReport:
    root: Path
    rows: list[ImageRow] = field(default_factory=list)

    @property
    def fetched(self) -> int:
        return sum(r.fetched for r in self.rows)

    @property
    def failed(self) -> list[ImageRow]:
        return [r for r in self.rows if r.status == "failed"]

    def summary(self) -> str:
        count = {s: sum(r.status == s for r in self.rows) for s in ("downloaded", "cached", "failed")}
        return (f"images: fetched {self.fetched} bytes ({count['downloaded']} pulled, {count['cached']} already cached"
                + (f", {count['failed']} failed" if count["failed"] else "") + ")")


class Record:
    """images.json, read and written under its lock (two fetches may run at once)."""

    def __init__(self, root: Path):
        self.root = root
        self.path = root / RECORD
        self._lock = threading.Lock()

    def read(self) -> dict[str, dict]:
        if not self.path.is_file():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except ValueError:
            return {}  # a damaged record: every image is checked against the registry again
        return data.get("images", {}) if isinstance(data, dict) and data.get("version") == RECORD_VERSION else {}

    def entry(self, item: Needed) -> dict | None:
        """The record of item when the layout holds every blob of its manifest (the pinned one, when
        k4w-pins.yml pins it), else None."""
        found = self.read().get(key(item))
        if not isinstance(found, dict) or not image_pull.DIGEST.match(str(found.get("digest", ""))):
            return None
        if item.pinned and found["digest"] != item.pinned:
            return None
        return found if blobs_present(self.root, found["digest"]) is not None else None

    def save(self, item: Needed, digest: str, size: int, source: str) -> None:
        with self._lock, filelock.updating(self.path):
            images = self.read()
            images[key(item)] = {"digest": digest, "size": size, "source": redact(source),
                                 "fetched_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
            files.write_file(self.path, json.dumps({"version": RECORD_VERSION, "images": dict(sorted(images.items()))},
                                                   indent=2) + "\n")


def blob_path(root: Path, digest: str) -> Path:
    return root / "blobs" / "sha256" / digest.split(":", 1)[1]


def image_blobs(root: Path, digest: str) -> list[str]:
    """The blobs of the image whose manifest is `digest` in the layout at root: the manifest, its config,
    its layers, each once, in that order (what an archive or a bundle carries, and what a prune keeps)."""
    manifest = json.loads(blob_path(root, digest).read_bytes())
    return list(dict.fromkeys([digest, manifest["config"]["digest"], *(layer["digest"] for layer in manifest.get("layers", []))]))


def blobs_present(root: Path, digest: str) -> int | None:
    """The image's size when manifest `digest` and every blob it names are in the layout (the manifest
    hashed again, the others by the sizes it gives: each was verified when it was written), else None."""
    manifest = blob_path(root, digest)
    if not manifest.is_file():
        return None
    data = manifest.read_bytes()
    if image_pull.sha256(data) != digest:
        return None
    try:
        document = json.loads(data)
        described = [document["config"], *document.get("layers", [])]
        total = len(data)
        for blob in described:
            path = blob_path(root, blob["digest"])
            if not path.is_file() or path.stat().st_size != blob["size"]:
                return None
            total += blob["size"]
    except (ValueError, KeyError, TypeError, IndexError):
        return None
    return total


def _pull(item: Needed, cluster: Cluster, root: Path, update, by_tag: bool = False) -> ImageRow:
    """Pull item from its first source that has it (by its pinned digest unless by_tag); a source that
    fails is reported if none works."""
    cfg = cluster.config
    reference = item.pinned if item.pinned and not by_tag else registry.split_reference(item.name)[2]
    tried = []
    for source in registry.pull_sources(item.name, cfg):
        mirror = source.mirror
        ca = cfg.registry.mirrors[mirror.upstream].ca if mirror else None   # the path config validation resolved
        client = image_pull.Registry(
            source.endpoint, proxy=cluster.proxy, namespace=source.namespace, ca=Path(ca) if ca else None,
            credentials=image_pull.Credentials(mirror.user, mirror.password or "") if mirror and mirror.user is not None else None)
        try:
            # The bar follows the blob being fetched (a Windows image's largest layer is most of it).
            pulled = image_pull.pull(client, item.name, source.repository, reference, item.platform, root,
                                     progress=update)
        except K4wError as exc:
            tried.append(f"{source.label}: {exc}")
            continue
        size = blobs_present(root, pulled.digest) or 0
        return ImageRow(item, "downloaded" if pulled.bytes_fetched else "cached", pulled.digest, size,
                        pulled.bytes_fetched, source.label)
    return ImageRow(item, "failed", problem="; ".join(tried))


def fetch(cluster: Cluster, boxes: list[str] | None = None, *, cache_option: str | None = None,
          console: Console | None = None, by_tag: bool = False) -> ImageReport:
    """Fill the image cache for these boxes (default: every box the config uses), one image at a time
    (a Windows base image is gigabytes: one at a time keeps the proxy's load and the progress plain).
    A pinned image is pulled by its digest; by_tag (`invoke pin-images`) resolves every tag again.
    One image's failure never stops the others; the report says what happened to each."""
    root = cache_root(cluster, cache_option)
    root.mkdir(parents=True, exist_ok=True)
    chosen = boxes or list(cluster.profiles)
    record = Record(root)
    report = ImageReport(root)
    with FilesProgress(console or ui.console) as bars:
        for item in needed((box, cluster.profile(box)) for box in chosen):
            entry = None if by_tag else record.entry(item)
            if entry:
                report.rows.append(ImageRow(item, "cached", entry["digest"], entry["size"], 0, entry.get("source", "")))
                continue
            row = _pull(item, cluster, root, bars.callback(item.label), by_tag)
            if row.status == "failed":
                bars.finish(item.label, "failed")
            else:
                record.save(item, row.digest, row.size, row.source)
                bars.finish(item.label, f"pulled {human_size(row.fetched)}" if row.fetched else "cached")
            report.rows.append(row)
    return report


# Hex digits of the manifest digest in an archive's name: 6 + 48 + 4 = 58 characters fit a CD's Joliet names
# (build_media.JOLIET_NAME_MAX, 64; the whole digest would not), and 192 bits name one image among any number.
ARCHIVE_HEX = 48


def archive_name(digest: str) -> str:
    """The file a box's guest takes for the image whose manifest is `digest` (lib.sh k4w_import_images,
    guest/windows/bake/04-prepull-images.ps1); the guest then checks the image against the whole digest."""
    return f"image-{digest.split(':', 1)[1][:ARCHIVE_HEX]}.tar"


def write_archive(root: Path, name: str, digest: str, dest: Path) -> Path:
    """An OCI image layout holding one image (its manifest `digest`, from the cache at root) as the tar
    `ctr images import` reads (containerd v2.3.7 core/transfer/archive ImportIndex): oci-layout,
    index.json naming it (io.containerd.image.name, the tag as org.opencontainers.image.ref.name) and its
    blobs; with fixed owners and times, replaced whole (k4w.infra.files.replacing)."""
    manifest_path = blob_path(root, digest)
    manifest = json.loads(manifest_path.read_bytes())
    config = json.loads(blob_path(root, manifest["config"]["digest"]).read_bytes())
    platform = {k: config[k] for k in ("os", "architecture", "os.version") if config.get(k)}
    tag = registry.split_reference(name)[2]
    index = {"schemaVersion": 2, "mediaType": image_pull.OCI_INDEX, "manifests": [{
        "mediaType": manifest.get("mediaType", image_pull.OCI_MANIFEST), "digest": digest,
        "size": manifest_path.stat().st_size, "platform": platform,
        "annotations": {image_pull.CONTAINERD_NAME: registry.stored_name(name),
                        **({} if tag.startswith("sha256:") else {image_pull.OCI_REF_NAME: tag})}}]}
    with files.replacing(dest) as part, tarfile.open(part, "w", format=tarfile.PAX_FORMAT) as tar:
        add_member(tar, "oci-layout", data=json.dumps(image_pull.LAYOUT_VERSION).encode())
        add_member(tar, "index.json", data=json.dumps(index, indent=2).encode() + b"\n")
        for blob in image_blobs(root, digest):
            add_member(tar, f"blobs/sha256/{blob.split(':', 1)[1]}", path=blob_path(root, blob))
    return dest


def write_docker_archive(root: Path, name: str, digest: str, dest: Path) -> Path:
    """The image whose manifest is `digest`, as the archive `docker load` reads (moby v17.03.2-ce, the seed
    era's Docker, and v20.10.24, the CI box's: image/tarexport/load.go): manifest.json with one item
    {Config, RepoTags, Layers}, the config and the layers as the registry served them (load decompresses
    each, archive.DecompressStream, and checks its DiffID against the config). Docker's image ID is the
    config's sha256 (image/fs.go Set). The OCI manifest rides along under its own name, which load ignores:
    the guest hashes it against the pinned digest and then holds the loaded image's ID to the config it
    names (lib.sh k4w_load_images)."""
    if "@" in name:
        raise K4wError(f"{name}: docker load tags an image by name:tag only (moby image/tarexport/load.go "
                       f"reference.NamedTagged); name the image by its tag in the profile and pin its digest")
    # No tag means latest, as for a pull; load refuses an untagged RepoTags entry.
    tagged = name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"
    manifest = json.loads(blob_path(root, digest).read_bytes())
    member = lambda blob: f"blobs/sha256/{blob.split(':', 1)[1]}"   # noqa: E731
    items = [{"Config": member(manifest["config"]["digest"]), "RepoTags": [tagged],
              "Layers": [member(layer["digest"]) for layer in manifest.get("layers", [])]}]
    with files.replacing(dest) as part, tarfile.open(part, "w", format=tarfile.PAX_FORMAT) as tar:
        add_member(tar, "manifest.json", data=json.dumps(items, indent=2).encode() + b"\n")
        for blob in image_blobs(root, digest):
            add_member(tar, member(blob), path=blob_path(root, blob))
    return dest


def add_member(tar: tarfile.TarFile, name: str, *, data: bytes | None = None, path: Path | None = None) -> None:
    """One file of an image archive or a bundle: data, or the file at path streamed; owner-neutral mode 0644 and
    time 0, so the same content makes the same archive."""
    info = tarfile.TarInfo(name)
    info.size = len(data) if data is not None else path.stat().st_size
    info.mode, info.mtime = 0o644, 0
    if data is not None:
        tar.addfile(info, io.BytesIO(data))
    else:
        with open(path, "rb") as fh:
            tar.addfile(info, fh)


def stage(cluster: Cluster, box: str, folder: Path, cache_option: str | None = None) -> list[Path]:
    """Write the archive of each image the box imports (its K4W_IMAGE_IMPORTS) into the build media folder;
    every one must be in the image cache at its pinned digest (the build fetched them just before)."""
    root = cache_root(cluster, cache_option)
    record = Record(root)
    written = []
    profile = cluster.profile(box)
    for item in needed([(box, profile)]):
        entry = record.entry(item)
        # (the guest imports exactly these: step_env.image_imports lists the box's pinned images)
        if not item.pinned or not entry:
            raise K4wError(f"{box}: {item.label} is not in the image cache {root} at a pinned digest; run "
                           f"`invoke pin-images --box {box}`")
        writer = write_archive if profile.container_runtime == "containerd" else write_docker_archive
        written.append(writer(root, item.name, item.pinned, folder / archive_name(item.pinned)))
    return written


def describe(cluster: Cluster, boxes: list[str] | None = None, cache_option: str | None = None,
             by_tag: bool = False) -> list[str]:
    """Offline: one line per image, what a fetch would do with it (cached, or pulled from where, by which
    reference)."""
    root = cache_root(cluster, cache_option)
    record = Record(root)
    lines = []
    for item in needed((box, cluster.profile(box)) for box in boxes or list(cluster.profiles)):
        entry = record.entry(item) if root.is_dir() and not by_tag else None
        if entry:
            lines.append(f"{item.label}: cached, {entry['digest']} ({human_size(entry['size'])})")
            continue
        sources = " else ".join(redact(s.label) for s in registry.pull_sources(item.name, cluster.config))
        how = f"by its pinned digest {item.pinned}" if item.pinned and not by_tag else "by its tag"
        lines.append(f"{item.label}: would pull {how} from {sources} (for {', '.join(item.boxes)})")
    return lines


def box_summary(cluster: Cluster, box: str) -> str | None:
    """One offline line for a plan: how many of the images a box imports are cached at their pins (None for a
    box that pulls its own, downloads.images: registry)."""
    from k4w.derive.images import imported

    profile = cluster.profile(box)
    if not imported(cluster.config, profile):
        return None
    record = Record(cache_root(cluster))
    items = needed([(box, profile)])
    cached = sum(1 for item in items if item.pinned and record.entry(item))
    unpinned = sum(1 for item in items if not item.pinned)
    return (f"{len(items)} image(s) to import: {cached} cached at their pins, {len(items) - cached - unpinned} to pull"
            + (f", {unpinned} not pinned (invoke pin-images)" if unpinned else ""))


def ensure(cluster: Cluster, boxes: list[str] | None = None, *, cache_option: str | None = None,
           console: Console | None = None) -> ImageReport:
    """Fetch, show, and fail naming every image that could not be pulled (after the others were)."""
    report = fetch(cluster, boxes, cache_option=cache_option, console=console)
    show(report, console)
    if report.failed:
        raise K4wError(f"{len(report.failed)} image(s) could not be pulled into {report.root}: "
                       + "; ".join(row.item.label for row in report.failed) + " (the reasons are above)")
    return report


def show(report: ImageReport, console: Console | None = None) -> None:
    rows = [[", ".join(r.item.boxes), r.item.name, str(r.item.platform), r.digest[:19] if r.digest else "-",
             human_size(r.size) if r.size else "-", r.status, r.fetched] for r in report.rows]
    ui.table(f"Image cache {report.root}", ["box", "image", "platform", "digest", "size", "status", "bytes fetched"],
             rows, to=console)
    for row in report.failed:
        ui.say(f"{row.item.label}: {row.problem}", to=console)
    ui.say(report.summary(), to=console)
