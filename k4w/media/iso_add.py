"""invoke iso-add: record an ISO's sha256 in iso/catalogue.yml and make it iso/<profile iso.name>.

Apart from k4w.media.iso (the catalogue and the ISO check every build makes) because it also asks
k4w.media.iso_images for the Windows images, and iso_images builds on iso: iso-add sits above both.
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from k4w.infra import filelock, files
from k4w.media import iso_images
from k4w.media.iso import (IsoError, Progress, _rel, catalogue, catalogue_path, iso_dir, label_warning, sha256_file)
from k4w.model import profiles
from k4w.model.profiles import Profile


@dataclass(frozen=True)
class IsoAdded:
    name: str
    box: str
    sha256: str
    size: int
    target: Path
    placed: str  # what happened to the file: "in place", "hard-linked", "already present", "copy needed"
    note: str


def iso_add(path: Path, box: str | None = None, *, progress: Progress | None = None, today: _dt.date | None = None) -> IsoAdded:
    """Record an ISO's sha256 in iso/catalogue.yml and make it available as iso/<profile iso.name>.

    The file is hard-linked into iso/ when it is on the same filesystem (instant, no extra
    space). Across filesystems it is NOT copied: a silent multi-GB copy doubles disk use and
    takes minutes, and storing a machine-specific path in the tracked catalogue would break
    for everyone else. The message says how to copy it, or to build with --iso PATH.
    """
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise IsoError(f"iso-add: {path} is not a file")
    drivers = virtio_win_profiles(path.name, box)
    if drivers:
        return _add_virtio_win(path, drivers, progress, today)
    profile = profile_for(path, box)
    name = profile.data.iso.name
    target = iso_dir() / name
    # A different size is a different image: say so before minutes of hashing. (A pinned profile
    # hashes first, so its more telling mismatch message wins.)
    if (not profile.data.iso.get("sha256") and target.exists() and not os.path.samefile(target, path)
            and target.stat().st_size != path.stat().st_size):
        raise IsoError(f"iso-add: {target} exists and is a different image; move it away first (nothing was changed)")
    # Before minutes of hashing, and before anything is written: media Setup cannot install from
    # unattended (wrong image, a key it needs) are refused here rather than two hours into a build.
    images_note = _images_note(profile, path)
    sha = sha256_file(path, progress)
    pinned = profile.data.iso.get("sha256")
    if pinned and str(pinned).lower() != sha:
        raise IsoError(
            f"iso-add: {path} has sha256 {sha}, but {_rel(profile.path)} pins {pinned} for {name}."
            f" This is not the image box {profile.name} is built from."
        )
    size = path.stat().st_size
    date = (today or _dt.date.today()).isoformat()
    origin = "" if path.name == name else f" from {path.name}"
    entry = {"sha256": sha, "box": profile.name, "source": f"added by iso-add on {date}{origin}", "size": size}
    placed, note = _place_and_record(path, target, name, entry)
    warning = label_warning(path, profile)
    if warning:
        note += f"\n  warning: {warning}"
    note += images_note
    return IsoAdded(name, profile.name, sha, size, target, placed, note)


def _place_and_record(path: Path, target: Path, name: str, entry: dict) -> tuple[str, str]:
    """All or nothing: place the file first (it refuses a different image already there), then record it in
    iso/catalogue.yml; if recording fails, take back the link this call made. Returns (how placed, note)."""
    previous = catalogue().get(name)
    placed, note = _place(path, target, entry["sha256"])
    try:
        _write_catalogue_entry(name, entry)
    except BaseException:
        if placed == "hard-linked":
            target.unlink(missing_ok=True)
        raise
    if previous and previous.get("sha256") != entry["sha256"]:
        note += f"\n  (replaced the previously recorded sha256 {previous.get('sha256')})"
    return placed, note


def virtio_win_profiles(name: str, box: str | None) -> list[Profile]:
    """The Windows profiles whose libvirt bake attaches the virtio-win ISO of this file name (virtio_win.name);
    with --box, that profile only."""
    found = [profiles.load(box)] if box else [profiles.load(n) for n in profiles.available()]
    return [p for p in found if (p.data.get("virtio_win") or {}).get("name") == name]


def _add_virtio_win(path: Path, users: list[Profile], progress: Progress | None, today: _dt.date | None) -> IsoAdded:
    """Record the virtio-win ISO like a box's ISO: its sha256 in iso/catalogue.yml under its file name, the file
    linked into iso/. One file serves every profile that names it; a profile that pins a sha256 must agree."""
    name = path.name
    target = iso_dir() / name
    sha = sha256_file(path, progress)
    for profile in users:
        pinned = profile.data.virtio_win.get("sha256")
        if pinned and str(pinned).lower() != sha:
            raise IsoError(f"iso-add: {path} has sha256 {sha}, but {_rel(profile.path)} pins {pinned} for {name} "
                           f"(virtio_win.sha256). This is not the virtio-win release box {profile.name} loads its drivers from.")
    boxes = ", ".join(p.name for p in users)
    version = users[0].data.virtio_win.get("version")
    date = (today or _dt.date.today()).isoformat()
    origin = "" if path.name == name else f" from {path.name}"
    entry = {"sha256": sha, "box": boxes, "source": f"added by iso-add on {date}{origin} (virtio-win {version}: the "
             f"drivers of a libvirt bake)", "size": path.stat().st_size}
    placed, note = _place_and_record(path, target, name, entry)
    note += (f"\n  virtio-win {version}: the virtio drivers the libvirt bakes of {boxes} load in Windows Setup. Its project "
             f"publishes no sha256, so this record is the pin: compare {sha} with a copy you trust.")
    return IsoAdded(name, boxes, sha, entry["size"], target, placed, note)


def _images_note(profile: Profile, path: Path) -> str:
    """iso-add's view of the ISO's images (k4w/media/iso_images.py): a line for the report, or a refusal."""
    if not profile.is_windows:
        return ""
    try:
        verdict = iso_images.verify(profile, path, file_name=path.name)
    except iso_images.ImagesUnavailable as exc:
        return f"\n  warning: the ISO's images were not checked here ({exc}); every build checks them before Packer starts"
    except iso_images.ImagesRefused as exc:
        raise IsoError(f"iso-add: {exc}\n  Nothing was recorded or linked.") from exc
    return f"\n  images: {verdict.summary()}\n  (image list from {verdict.origin})"


def profile_for(path: Path, box: str | None) -> Profile:
    if box:
        return profiles.load(box)
    matches = [p for p in (profiles.load(n) for n in profiles.available()) if p.data.get("iso", {}).get("name") == path.name]
    if len(matches) == 1:
        return matches[0]
    known = ", ".join(f"{n} ({profiles.load(n).data.iso.name})" for n in profiles.available())
    why = "several profiles use" if matches else "no box profile uses"
    raise IsoError(f"iso-add: {why} the file name {path.name}; say which box it is for with --box (boxes: {known})")


def _place(path: Path, target: Path, sha: str) -> tuple[str, str]:
    if target.exists() and target.resolve() == path:
        return "in place", f"{target} recorded"
    if target.exists():
        if os.path.samefile(target, path):
            return "already present", f"{target} is already this file"
        if sha256_file(target) == sha:
            return "already present", f"{target} already holds the same image"
        raise IsoError(f"iso-add: {target} exists and is a different image; move it away first (nothing was changed)")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(path, target)
    except OSError as exc:
        return "copy needed", (
            f"{path} is on another filesystem ({exc.strerror}), so it was not linked into {target.parent}.\n"
            f"  Copy it there:   copy \"{path}\" \"{target}\"   (or: cp \"{path}\" \"{target}\")\n"
            f"  or build with it where it is: --iso \"{path}\""
        )
    return "hard-linked", f"{target} hard-linked to {path} (no extra disk space)"


def _write_catalogue_entry(name: str, entry: dict) -> None:
    """Update one entry and keep the comment header at the top of the file. Under the catalogue's
    lock: two iso-add runs (a Windows ISO and virtio-win) each keep the other's entry."""
    path = catalogue_path()
    with filelock.updating(path):
        header = []
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                if not line.startswith("#"):
                    break
                header.append(line)
        data = catalogue()
        data[name] = entry
        body = yaml.safe_dump(data, sort_keys=True, default_flow_style=False)
        files.write_file(path, "\n".join(header + [body.rstrip("\n")]) + "\n")
