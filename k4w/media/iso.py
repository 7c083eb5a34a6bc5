"""Where each box's installation ISO lives, its expected checksum, and checking it.

The expected sha256 of an ISO is the box profile's published one (`iso.sha256`), else the
one recorded in iso/catalogue.yml by `invoke iso-add`. A build refuses an ISO that is
missing, has no known checksum, or does not match.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

from k4w.infra import files as outfiles
from k4w.infra import sources
from k4w.infra.errors import K4wError
from k4w.model.profiles import Profile


def iso_dir() -> Path:
    return sources.REPO.iso


def catalogue_path() -> Path:
    return sources.REPO.iso / "catalogue.yml"


SHA256 = re.compile(r"^[0-9a-f]{64}$")
# 8 MiB reads keep a multi-GB hash fast without holding much memory.
CHUNK = 8 * 1024 * 1024
ISO_ADD_HINT = "invoke iso-add PATH"

Progress = Callable[[int, int], None]  # (bytes done, total bytes)


class IsoError(K4wError):
    """The ISO for a box is missing, unknown or does not match its checksum."""


def catalogue(path: Path | None = None) -> dict:
    """{iso file name: {sha256, box, source, size}}; empty when the file does not exist yet."""
    path = path or catalogue_path()
    if not path.is_file():
        return {}
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def iso_path(profile: Profile) -> Path:
    return iso_dir() / profile.data.iso.name


def _expected_sha256(section) -> str | None:
    """A profile's ISO section (iso, virtio_win): its pinned sha256, else the one `invoke iso-add` recorded
    in iso/catalogue.yml under its file name."""
    pinned = section.get("sha256")
    if pinned:
        return pinned
    entry = catalogue().get(section.name)
    return entry.get("sha256") if entry else None


def iso_sha256(profile: Profile) -> str | None:
    """The expected sha256 of a box's ISO: the profile's published one, else the catalogue's."""
    return _expected_sha256(profile.data.iso)


def virtio_win_path(profile: Profile) -> Path:
    """The virtio-win ISO a Windows box's libvirt bake loads its drivers from: iso/<virtio_win.name>."""
    return iso_dir() / profile.data.virtio_win.name


def virtio_win_sha256(profile: Profile) -> str | None:
    """Its expected sha256: the profile's pin, else the one `invoke iso-add` recorded in iso/catalogue.yml."""
    return _expected_sha256(profile.data.virtio_win)


def expected_source(profile: Profile) -> str:
    """Where the expected checksum comes from, for messages."""
    if profile.data.iso.get("sha256"):
        return f"pinned in {_rel(profile.path)} iso.sha256"
    return f"recorded in {_rel(catalogue_path())}"


# ------------------------------------------------------------------ hashing and its cache


def human_size(size: int) -> str:
    for unit, factor in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= factor:
            return f"{size / factor:.1f} {unit}"
    return f"{size} B"


def sha256_file(path: Path, progress: Progress | None = None) -> str:
    """Stream the file through sha256; progress(done, total) after every chunk."""
    total = path.stat().st_size
    digest = hashlib.sha256()
    done = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
            done += len(chunk)
            if progress:
                progress(done, total)
    return digest.hexdigest()


class HashCache:
    """sha256 of big files keyed by (absolute path, size, mtime, ctime, inode), kept in
    OUT/cache/iso-hashes.json.

    A 5 GB ISO takes about a minute to hash; it is hashed again only when it changes. On POSIX
    any write or `touch -d` moves ctime, so a rewritten file cannot pass as the cached one; on
    Windows ctime is the creation time, so Packer checks the ISO again against iso_checksum too.
    """

    _lock = threading.Lock()

    def __init__(self, out: Path):
        self.path = Path(out) / "cache" / "iso-hashes.json"

    @staticmethod
    def _key(path: Path) -> tuple[str, dict]:
        st = path.stat()
        return str(path.resolve()), {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns,
                                     "inode": st.st_ino}

    def _load(self) -> dict:
        try:
            return json.loads(self.path.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def lookup(self, path: Path) -> str | None:
        key, ident = self._key(path)
        with self._lock:
            entry = self._load().get(key)
        if entry and all(entry.get(name) == value for name, value in ident.items()):
            return entry.get("sha256")
        return None

    def store(self, path: Path, sha256: str) -> None:
        key, ident = self._key(path)
        with self._lock:
            data = self._load()
            data[key] = {**ident, "sha256": sha256}
            outfiles.write_file(self.path, json.dumps(data, indent=2, sort_keys=True) + "\n")

    def sha256(self, path: Path, progress: Progress | None = None) -> str:
        cached = self.lookup(path)
        if cached:
            return cached
        value = sha256_file(path, progress)
        self.store(path, value)
        return value


# ------------------------------------------------------------------ the check before a build


@dataclass(frozen=True)
class IsoCheck:
    """What was (or, in a dry run, would be) verified for one box's ISO."""

    box: str
    name: str
    path: Path
    expected: str | None
    source: str  # where `expected` comes from
    mode: str  # "local": verified file; "remote": Packer downloads from url and verifies
    url: str | None = None
    actual: str | None = None
    cached: bool = False
    size: int | None = None

    def describe(self) -> str:
        if self.mode == "remote":
            return (
                f"{self.path} is absent; Packer downloads {self.url} and verifies it against "
                f"sha256 {self.expected} ({self.source})"
            )
        size = f" ({human_size(self.size)})" if self.size is not None else ""
        how = "cached hash" if self.cached else "sha256"
        return f"{self.path}{size}: {how} matches {self.expected} ({self.source})"


def _remote_fallback(profile: Profile) -> str | None:
    """The profile's download URL when Packer may fetch the ISO itself (published url + pinned sha256)."""
    iso = profile.data.iso
    url = iso.get("url")
    pinned = iso.get("sha256")
    if url and isinstance(url, str) and url.startswith(("http://", "https://")) and pinned and SHA256.match(str(pinned).lower()):
        return url
    return None


def check_iso(
    profile: Profile,
    out: Path,
    iso: Path | None = None,
    *,
    progress: Progress | None = None,
    hash_it: bool = True,
    expected_sha256: str | None = None,
    write_cache: bool = True,
) -> IsoCheck:
    """Verify a box's ISO before Packer starts; raise IsoError with what to do.

    hash_it=False checks everything but the hash itself (a cached mismatch still fails).
    write_cache=False (a dry run) hashes without recording the result under OUT.
    expected_sha256 overrides the profile's and the catalogue's value.
    """
    box = profile.name
    name = profile.data.iso.name
    path = Path(iso).expanduser().resolve() if iso else iso_path(profile)
    # A caller that made the image itself (the CI end-to-end base disk) knows its checksum.
    expected = expected_sha256 or iso_sha256(profile)
    source = "given by the caller that made the image" if expected_sha256 else expected_source(profile)
    if expected is not None:
        shown, expected = expected, str(expected).strip().lower()
        if not SHA256.match(expected):
            raise IsoError(
                f"box {box}: the expected sha256 of {name} ({source}) is {shown!r}, not a sha256 "
                f"(64 hex digits). Fix it, or record the ISO you have with: {ISO_ADD_HINT} --box {box}"
            )

    if not path.is_file():
        url = _remote_fallback(profile)
        if url and not iso:
            return IsoCheck(box, name, path, expected, source, "remote", url=url)
        if iso and path.exists():
            raise IsoError(f"box {box}: --iso {path} is not a file (a folder or a device): name the ISO file itself")
        if iso:
            raise IsoError(f"box {box}: --iso {path} does not exist")
        raise IsoError(
            f"box {box}: ISO not found: {path}\n"
            f"  Put {name} in {path.parent}/ (k4w never downloads Windows ISOs: the licence forbids"
            f" redistribution), or register a copy you have elsewhere with: {ISO_ADD_HINT} --box {box}\n"
            f"  A build can also use it in place: --iso PATH"
        )
    if expected is None:
        raise IsoError(
            f"box {box}: no known sha256 for {name}: neither {_rel(profile.path)} (iso.sha256) nor "
            f"{_rel(catalogue_path())} lists it. Record the ISO you have with: {ISO_ADD_HINT.replace('PATH', str(path))}"
        )

    cache = HashCache(out)
    size = path.stat().st_size
    cached = cache.lookup(path)
    if not hash_it:
        if cached and cached != expected:
            raise IsoError(_mismatch(box, path, expected, source, cached))
        return IsoCheck(box, name, path, expected, source, "local", actual=cached, cached=bool(cached), size=size)
    actual = cached or (cache.sha256(path, progress) if write_cache else sha256_file(path, progress))
    if actual != expected:
        raise IsoError(_mismatch(box, path, expected, source, actual))
    return IsoCheck(box, name, path, expected, source, "local", actual=actual, cached=bool(cached), size=size)


def check_virtio_win(profile: Profile, out: Path, *, hash_it: bool = True, write_cache: bool = True) -> Path:
    """Verify the virtio-win ISO a Windows box's libvirt bake attaches (profile virtio_win): present in iso/,
    its sha256 pinned or recorded by iso-add, and matching. Raise IsoError naming `invoke iso-add`."""
    spec = profile.data.virtio_win
    path = virtio_win_path(profile)
    add = ISO_ADD_HINT.replace("PATH", str(path) if path.is_file() else f"PATH/{spec.name}")
    if not path.is_file():
        raise IsoError(
            f"box {profile.name}: a libvirt bake loads the virtio drivers (viostor for the disk, NetKVM for the NIC) "
            f"from {spec.name}, which is not in {path.parent}/: download virtio-win {spec.version} ({spec.url}) and "
            f"record it with: {add}")
    expected = virtio_win_sha256(profile)
    if not expected:
        raise IsoError(
            f"box {profile.name}: no known sha256 for {spec.name}: the virtio-win project publishes none, so "
            f"{_rel(profile.path)} pins none (virtio_win.sha256) and {_rel(catalogue_path())} has no record of it. "
            f"Record the file you downloaded with: {add}")
    expected = str(expected).strip().lower()
    source = (f"pinned in {_rel(profile.path)} virtio_win.sha256" if spec.get("sha256")
              else f"recorded in {_rel(catalogue_path())}")
    cache = HashCache(out)
    cached = cache.lookup(path)
    if not hash_it and not cached:
        return path
    actual = cached or (cache.sha256(path) if write_cache else sha256_file(path))
    if actual != expected:
        raise IsoError(_mismatch(profile.name, path, expected, source, actual))
    return path


def _mismatch(box: str, path: Path, expected: str, source: str, actual: str) -> str:
    return (
        f"box {box}: ISO checksum mismatch for {path}\n"
        f"  expected sha256 {expected} ({source})\n"
        f"  actual   sha256 {actual}\n"
        f"  The file is incomplete, corrupt, or a different image. Download it again, or if this is"
        f" the image you mean to use, record it with: {ISO_ADD_HINT} --box {box}"
    )


# ISO 9660 primary volume descriptor: sector 16 (2048-byte sectors), type 1, "CD001"; the volume
# identifier is 32 bytes at offset 40 (ECMA-119 section 8.4). UDF-only media still carry it.
PVD_OFFSET = 16 * 2048
# What each family's install media call themselves: Microsoft's images are labelled like
# CCSA_X64FRE_EN-US_DV5 (X64FRE = x64 free build); Canonical's like "Ubuntu-Server 16.04.7 LTS amd64".
LABEL_HINTS = {"windows": re.compile(r"X64FRE", re.I), "ubuntu": re.compile(r"ubuntu", re.I)}


def volume_label(path: Path) -> str | None:
    with open(path, "rb") as fh:
        fh.seek(PVD_OFFSET)
        pvd = fh.read(72)
    if len(pvd) < 72 or pvd[0] != 1 or pvd[1:6] != b"CD001":
        return None
    return pvd[40:72].decode("ascii", "replace").strip()


def label_warning(path: Path, profile: Profile) -> str | None:
    """A hint, not a verdict: the checksum decides. It catches the wrong file early."""
    label = volume_label(path)
    hint = LABEL_HINTS.get(profile.os_family)
    if label is None:
        return f"{path.name} has no ISO 9660 volume descriptor; is it an ISO image?"
    if hint and not hint.search(label):
        return f"its volume label is '{label}', which does not look like {profile.os_family} install media for {profile.name}"
    return None


def _rel(path: Path) -> str:
    try:
        return str(Path(path).relative_to(sources.REPO.root))
    except ValueError:
        return str(path)
