"""What the Invoke tasks call: pick the boxes, build them, register an ISO. No logic in tasks.py."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from k4w.model import profiles
from k4w.media import iso as iso_mod
from k4w.media import iso_add as iso_add_mod
from k4w.derive.cluster import Cluster
from k4w.infra.errors import K4wError
from k4w.infra.redact import redact
from k4w.bake import bundle as bundle_mod, cache, fetch as fetch_mod, image_cache, prune as prune_mod
from k4w.infra import ui
from k4w.model import pins
from .progress import download_progress, hash_progress
from .runner import BoxResult, build_boxes

FAMILIES = ("windows", "linux")


def select_boxes(cluster: Cluster, node_os: str | None = None) -> list[str]:
    """Boxes used by the config's nodes; node_os 'windows' or 'linux' keeps only those."""
    if node_os not in (None, *FAMILIES):
        raise K4wError(f"unknown node OS {node_os!r}: use one of {', '.join(FAMILIES)}")
    boxes = [b for b, prof in cluster.profiles.items() if node_os is None or prof.data.node_os == node_os]
    if not boxes:
        raise K4wError(f"no node in the config uses a {node_os} box, so there is nothing to build")
    return boxes


def build(cluster: Cluster, out: Path, *, node_os: str | None = None, iso: str | None = None, force: bool = False,
          dry_run: bool = False, console: Console | None = None) -> list[BoxResult]:
    """invoke build-windows (node_os='windows'), build-ubuntu ('linux') and build (all, in parallel)."""
    boxes = select_boxes(cluster, node_os)
    isos = None
    if iso:
        if len(boxes) != 1:
            raise K4wError(f"--iso names one ISO but {len(boxes)} boxes would be built ({', '.join(boxes)}); "
                           f"use invoke build-windows or build-ubuntu")
        isos = {boxes[0]: Path(iso)}
    return build_boxes(cluster, boxes, Path(out), force, dry_run, isos=isos, console=console)


def add_iso(path: str, box: str | None = None, console: Console | None = None) -> iso_add_mod.IsoAdded:
    """invoke iso-add PATH [--box BOX]: hash with a progress bar, record, link, report."""
    console = console or Console()
    file = Path(path).expanduser()
    if not file.is_file():
        raise K4wError(f"iso-add: {file} is not a file")
    # Refuse a wrong --box or an unknown file name before minutes of hashing.
    iso_add_mod.profile_for(file.resolve(), box)
    with hash_progress(console, file.name, file.stat().st_size) as progress:
        added = iso_add_mod.iso_add(file, box, progress=progress)
    lines = [
        f"recorded {added.name} for box {added.box} in {iso_mod.catalogue_path()}",
        f"  sha256 {added.sha256} ({iso_mod.human_size(added.size)})",
        f"  {added.note}",
    ]
    for line in lines:
        console.print(redact(line), markup=False, highlight=False, soft_wrap=True)
    return added


def pin_component(config_file: str, box: str, component: str, replace: bool = False, dry_run: bool = False,
                  console: Console | None = None) -> pins.PinResult | None:
    """invoke pin BOX COMPONENT: download on this host through cluster.yml's proxy, show URL,
    size and sha256, and record them as the user's pin next to the config."""
    console = console or Console()
    cluster = Cluster.load(config_file)
    cfg, proxy = cluster.config, cluster.proxy
    profile = profiles.load(box)
    spec = (profile.data.get("components") or {}).get(component) or {}
    path = pins.pins_path(config_file)
    if dry_run:
        if not spec.get("url"):
            raise K4wError(f"box {box} has no downloaded component '{component}'")
        console.print(redact(f"would download {spec['url']} through {proxy.http or 'no proxy'}, "
                             f"show its size and sha256, record them in {path} and keep the file in the component cache "
                             f"{cache.cache_dir(cfg, config_file)}"), markup=False, highlight=False)
        return None
    root = cache.cache_dir(cfg, config_file)
    source = cache.mirror_url(str(spec.get("url", "")), cfg.downloads.mirror) if spec.get("url") else None
    kept: list[Path] = []

    def keep(got) -> None:
        # The profile as a build now sees it: with the pin just recorded, so the cache entry is
        # verified against the same checksum `invoke fetch` and the build use.
        item = next(i for i in cache.profile_items(pins.apply(profile, pins.load(config_file)), cfg.downloads.mirror)
                    if i.component == component)
        if item.checksum is not None:
            kept.append(cache.adopt(root, item, got))

    with download_progress(console, f"{box} {component}") as progress:
        result = pins.pin(profile, component, config_file, proxy, replace=replace, progress=progress,
                          source_url=source, keep=keep)
    for line in (f"url     {result.url}", f"size    {result.size} bytes ({iso_mod.human_size(result.size)})",
                 f"sha256  {result.sha256}", result.note, *(f"cached  {path} (invoke fetch will not download it again)" for path in kept)):
        console.print(redact(line), markup=False, highlight=False, soft_wrap=True)
    if result.recorded:
        console.print("Check this sha256 against a second source you trust before you build with it.", markup=False)
    return result


def fetch_components(cluster: Cluster, box: str | None = None, cache_option: str | None = None,
                     dry_run: bool = False, console: Console | None = None, images: bool = False) -> None:
    """invoke fetch [--box B] [--cache DIR] [--images]: fill the host's component cache, once (with
    --images, the image cache instead); fail naming each file or image that could not be fetched
    (after the others were)."""
    boxes = [cluster.profile(box).name] if box else None
    if images:
        if dry_run:
            ui.say(f"dry run: image cache {image_cache.cache_root(cluster, cache_option)} (nothing is pulled or written)")
            for line in image_cache.describe(cluster, boxes, cache_option):
                ui.say(f"  {line}")
            return
        image_cache.ensure(cluster, boxes, cache_option=cache_option, console=console)
        return
    if dry_run:
        refused = fetch_mod.dry_run(cluster, boxes, cache_option=cache_option)
        if refused:
            raise K4wError(f"{refused} component(s) have no checksum; a real run would refuse them (commands above)")
        return
    fetch_mod.ensure(cluster, boxes, cache_option=cache_option, console=console)


def pin_images(cluster: Cluster, box: str | None = None, replace: bool = False, dry_run: bool = False,
               console: Console | None = None) -> pins.ImagePinResult | None:
    """invoke pin-images [--box B]: resolve every image's tag again (through the mirrors and the proxy),
    pull it into the image cache, and record the manifest digest per platform in k4w-pins.yml; a digest
    that differs from the pinned one is refused (the tag moved) unless replace."""
    boxes = [cluster.profile(box).name] if box else None
    path = pins.pins_path(cluster.config_file or "cluster.yml")
    if dry_run:
        ui.say(f"dry run: would resolve each image's tag, pull it into {image_cache.cache_root(cluster)} and record its "
               f"digest in {path}; nothing is pulled or written")
        for line in image_cache.describe(cluster, boxes, by_tag=True):
            ui.say(f"  {line}")
        return None
    report = image_cache.fetch(cluster, boxes, console=console, by_tag=True)
    image_cache.show(report, console)
    resolved = {(row.item.name, str(row.item.platform)): row.digest for row in report.rows if row.status != "failed"}
    result = pins.record_images(cluster.config_file or "cluster.yml", resolved, replace=replace)
    for line in result.recorded:
        ui.say(f"pinned  {line}", to=console)
    ui.say(f"{len(result.recorded)} image digest(s) recorded in {path}, {result.unchanged} already pinned"
           + (f", {len(result.conflicts)} refused" if result.conflicts else ""), to=console)
    problems = [f"{row.item.label}: not pulled, so not pinned" for row in report.failed] + result.conflicts
    if problems:
        raise K4wError("\n".join(problems))
    return result


def make_bundle(cluster: Cluster, file: str | None = None, box: str | None = None, dry_run: bool = False,
                console: Console | None = None) -> dict | None:
    """invoke bundle [--file F] [--box B]: fill both caches, then write one archive for an air-gapped host."""
    boxes = [cluster.profile(box).name] if box else None
    dest = Path(file or bundle_mod.default_name(cluster))
    if dry_run:
        ui.say(f"dry run: would fill the component and image caches, then write {dest.resolve()} holding:")
        for line in fetch_mod.describe(cluster, boxes)[0] + image_cache.describe(cluster, boxes):
            ui.say(f"  {line}")
        ui.say(f"  {pins.PINS_FILE}; not included: {bundle_mod.NOT_INCLUDED}")
        return None
    return bundle_mod.make(cluster, dest, boxes, console=console)


def prune_caches(cluster: Cluster, also: list[str] | None = None, cache_option: str | None = None,
                 dry_run: bool = False, console: Console | None = None) -> prune_mod.Pruned:
    """invoke cache-prune [--also OTHER.yml ...]: remove from the caches what none of the configs needs."""
    others = []
    for file in also or []:
        if not Path(file).is_file():
            raise K4wError(f"--also {file}: no such file (name each other cluster.yml that shares this cache)")
        others.append(Cluster.load(file))
    done = prune_mod.prune(cluster, others, cache_option=cache_option, dry_run=dry_run)
    prune_mod.show(done, dry_run, console)
    return done


def import_bundle(config_file: str, file: str, dry_run: bool = False, console: Console | None = None):
    """invoke bundle-import FILE: fill this host's caches from the bundle, every file checked."""
    path = Path(file)
    if not path.is_file():
        raise K4wError(f"{path}: no such bundle file")
    if dry_run:
        ui.say(f"dry run: would check and import {path.resolve()} into the caches of {config_file} "
               f"({cache.cache_dir(Cluster.load(config_file).config, config_file)}), adding its image pins to "
               f"{pins.pins_path(config_file)}; nothing is written")
        return None
    return bundle_mod.import_bundle(config_file, path, console=console)
