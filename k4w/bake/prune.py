"""`invoke cache-prune`: remove from the host caches what no box of the given configs needs any more.

The caches only grow otherwise: a Kubernetes upgrade leaves the old node tarball, a box moved from
Server 2022 to 2025 leaves about 5 GB of servercore layers. What is kept is what `invoke fetch`
(with --images) would fetch for cluster.yml and for every other config named with --also (the cache
folder is per user, so two projects may share it).

Only what k4w's own records name is ever removed: the component cache's index.json entries and their
files, the image cache's images.json entries, and blobs of the image layout that no kept image
references. Anything else in the cache folder (build tools, files a user put there, a download's
.part) is left alone. Both records are held under their locks while they are rewritten, so a fetch
running beside the prune records nothing meanwhile; an unrecorded blob younger than GRACE may belong
to an image such a fetch is still pulling (its record is written after its last layer), so it stays.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from k4w.derive.cluster import Cluster
from k4w.derive.images import needed
from k4w.infra import filelock, files, image_pull, ui
from k4w.infra.errors import K4wError
from k4w.media.iso import human_size
from . import cache, image_cache

# A servercore pull through a slow proxy has taken 17 minutes (sig-windows-dev-tools #98); a day is far
# longer than any fetch, and a blob kept one prune too long costs only disk.
GRACE = 24 * 3600


@dataclass
class Pruned:
    root: Path | None = None                                            # the component cache folder
    components: list[tuple[str, int]] = field(default_factory=list)   # (index key, bytes)
    images: list[str] = field(default_factory=list)                    # images.json keys
    blobs: list[tuple[str, int]] = field(default_factory=list)         # (digest, bytes)
    young: int = 0                                                      # unreferenced blobs left for GRACE
    kept_components: int = 0
    kept_images: int = 0

    @property
    def bytes(self) -> int:
        return sum(size for _, size in self.components) + sum(size for _, size in self.blobs)


def keep_sets(clusters: list[Cluster]) -> tuple[set[str], set[str]]:
    """The component index keys and images.json keys any of the configs needs (every box its nodes use)."""
    components = {item.relpath for cluster in clusters for item in cache.plan(cluster)}
    images = {image_cache.key(item) for cluster in clusters for item in needed(cluster.profiles.items())}
    return components, images


def prune(cluster: Cluster, also: list[Cluster] | None = None, *, cache_option: str | None = None,
          dry_run: bool = False, now: float | None = None) -> Pruned:
    root = cache.cache_dir(cluster.config, cluster.config_file, cache_option)
    for other in also or []:
        theirs = cache.cache_dir(other.config, other.config_file, cache_option)
        if theirs != root:
            raise K4wError(f"--also {other.config_file}: its cache is {theirs}, not {root}; it keeps nothing here "
                           f"(prune that cache with --config {other.config_file})")
    keep_components, keep_images = keep_sets([cluster, *(also or [])])
    done = Pruned(root=root)
    _prune_components(root, keep_components, done, dry_run)
    _prune_images(root / image_cache.FOLDER, keep_images, done, dry_run, time.time() if now is None else now)
    return done


def _prune_components(root: Path, keep: set[str], done: Pruned, dry_run: bool) -> None:
    index = root / cache.MANIFEST
    if not index.is_file():
        return
    with filelock.updating(index):
        data = _json(index)
        entries = data.get("files") if isinstance(data.get("files"), dict) else {}
        for key in sorted(set(entries) - keep):
            path = root / key
            if not _inside(path, root):
                continue   # a damaged entry naming a path outside the cache: never followed
            done.components.append((key, path.stat().st_size if path.is_file() else 0))
            if not dry_run:
                path.unlink(missing_ok=True)
                _remove_empty_parents(path.parent, root)
        done.kept_components = len(set(entries) & keep)
        if done.components and not dry_run:
            data["files"] = {key: entry for key, entry in entries.items() if key in keep or not _inside(root / key, root)}
            files.write_file(index, json.dumps(data, indent=2) + "\n")


def _prune_images(root: Path, keep: set[str], done: Pruned, dry_run: bool, now: float) -> None:
    record = root / image_cache.RECORD
    layout_index = root / "index.json"
    if not root.is_dir():
        return   # no image was ever fetched into this cache
    with filelock.updating(record), filelock.updating(layout_index):
        data = _json(record) if record.is_file() else {}
        images = data.get("images") if isinstance(data.get("images"), dict) else {}
        kept = {key: entry for key, entry in images.items() if key in keep}
        done.images = sorted(set(images) - set(kept))
        done.kept_images = len(kept)
        referenced = set()
        for entry in kept.values():
            referenced |= _blobs_of(root, str((entry or {}).get("digest", "")))
        blobs = root / "blobs" / "sha256"
        for path in sorted(blobs.iterdir()) if blobs.is_dir() else []:
            if not image_pull.DIGEST.match(f"sha256:{path.name}") or f"sha256:{path.name}" in referenced:
                continue   # a .part, a .lock, or a blob a kept image needs
            if now - path.stat().st_mtime < GRACE:
                done.young += 1
                continue
            done.blobs.append((f"sha256:{path.name}", path.stat().st_size))
            if not dry_run:
                path.unlink(missing_ok=True)
        if dry_run:
            return
        if done.images:
            data["images"] = kept
            files.write_file(record, json.dumps(data, indent=2) + "\n")
        if layout_index.is_file() and done.blobs:
            index = _json(layout_index)
            manifests = index.get("manifests") if isinstance(index.get("manifests"), list) else []
            left = [m for m in manifests if (blobs / str(m.get("digest", ":")).split(":", 1)[-1]).is_file()]
            if len(left) != len(manifests):
                files.write_file(layout_index, json.dumps({**index, "manifests": left}, indent=2) + "\n")


def _blobs_of(root: Path, digest: str) -> set[str]:
    """The manifest and every blob it names (config, layers); just the manifest when it cannot be read."""
    if not image_pull.DIGEST.match(digest):
        return set()
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        return set(image_cache.image_blobs(root, digest))
    return {digest}


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise K4wError(f"{path} is unreadable ({exc}); nothing was pruned. Move it away and run invoke fetch "
                       f"(which rebuilds it), then prune") from None
    if not isinstance(data, dict):
        raise K4wError(f"{path} is not a k4w record; nothing was pruned")
    return data


def _inside(path: Path, root: Path) -> bool:
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        return False   # an absolute key
    return ".." not in parts and not path.is_symlink()


def _remove_empty_parents(folder: Path, root: Path) -> None:
    while folder != root and folder.is_relative_to(root):
        try:
            folder.rmdir()   # only when empty
        except OSError:
            return
        folder = folder.parent


def show(done: Pruned, dry_run: bool, console: Console | None = None) -> None:
    verb = "would remove" if dry_run else "removed"
    for key, size in done.components:
        ui.say(f"{verb} component {key} ({human_size(size)})", to=console)
    for key in done.images:
        ui.say(f"{verb} image record {key}", to=console)
    ui.say(f"{done.root}: {verb} {len(done.components)} component(s), {len(done.images)} image record(s) and "
           f"{len(done.blobs)} image blob(s), {human_size(done.bytes)}; kept {done.kept_components} component(s) and "
           f"{done.kept_images} image(s) the config(s) need"
           + (f"; {done.young} unreferenced blob(s) younger than {GRACE // 3600} h left (a fetch may be pulling them)"
              if done.young else "")
           + ("; dry run: nothing was removed" if dry_run else ""), to=console)
