"""The host-side component cache: where each downloaded component of a box lives on this host.

`invoke fetch` (k4w.bake.fetch) fills it, `invoke pin` adds the file it pinned, `invoke doctor`
reports it offline. The layout is a contract that the guest delivery reads (docs/internals.md,
"The component cache"):

    <cache>/<component>/<version>/<file name from the URL>
    <cache>/index.json   {"version": 1, "files": {"<component>/<version>/<file>": entry}}

An entry records what was verified: url (the profile's URL), source (where it came from, a
mirror's credentials redacted), path (relative, as the key), size, mtime_ns, sha256, sha512,
checked_against (the checksum key and its source) and verified_at. A file whose size or mtime
differs from its entry is hashed again before it counts as cached.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import platform
import threading
import urllib.parse
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from k4w.infra import filelock, files, ui
from k4w.media.build_media import file_name, safe_segment as _safe
from k4w.derive.cluster import Cluster
from k4w.model.config import Config
from k4w.infra.errors import K4wError
from k4w.model.profiles import Profile
from k4w.infra.redact import redact
from k4w.model import pins
from k4w.infra.download import Downloaded
from k4w.model.profiles import CHECKSUM_KEYS

CACHE_ENV = "K4W_CACHE"
MANIFEST = "index.json"
MANIFEST_VERSION = 1


def default_dir() -> Path:
    """The platform's per-user cache folder: %LOCALAPPDATA%\\k4w\\cache on Windows (Windows'
    convention puts a product's caches in a subfolder of its own), $XDG_CACHE_HOME/k4w or
    ~/.cache/k4w elsewhere (XDG Base Directory spec; a relative XDG_CACHE_HOME is ignored, as it says)."""
    if platform.system() == "Windows":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "k4w" / "cache"
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache") / "k4w"


def cache_dir(cfg: Config, config_file: str | Path | None, option: str | None = None) -> Path:
    """--cache, else $K4W_CACHE, else downloads.cache of cluster.yml (relative to that file's
    folder), else the user cache folder. Only resolves: nothing is created here."""
    configured = cfg.downloads.cache
    if option:
        chosen = Path(option).expanduser()
    elif os.environ.get(CACHE_ENV):
        chosen = Path(os.environ[CACHE_ENV]).expanduser()
    elif configured:
        chosen = Path(configured).expanduser()
        if not chosen.is_absolute() and config_file is not None:
            chosen = Path(config_file).resolve().parent / chosen
    else:
        chosen = default_dir()
    return chosen.resolve()


def mirror_url(url: str, mirror: str | None) -> str:
    """<mirror>/<host>/<path of url>[?query]: one folder per original host, so a mirror holds
    files from several publishers without clashes (docs/downloads.md "Downloads")."""
    if not mirror:
        return url
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    tail = f"?{parts.query}" if parts.query else ""
    return f"{mirror.rstrip('/')}/{host}{parts.path or '/'}{tail}"


@dataclass(frozen=True)
class Item:
    """One file the cache should hold, and every box that needs it."""

    boxes: tuple[str, ...]
    component: str
    version: str
    url: str  # the profile's URL: what pins and the manifest record
    source: str  # where it is downloaded from: url, or its place on the mirror
    checksum: pins.Checksum | None
    relpath: str  # <component>/<version>/<file>, the manifest key

    @property
    def label(self) -> str:
        return f"{','.join(self.boxes)} {self.component}"

    def path(self, root: Path) -> Path:
        return root / PurePosixPath(self.relpath)

    def pin_commands(self, config_file) -> list[str]:
        return [pins.pin_command(box, self.component, config_file) for box in self.boxes]


def profile_items(profile: Profile, mirror: str | None) -> list[Item]:
    """The components of one box that are downloaded (those with a url); the profile should
    already carry the user's pins (Cluster.resolve applies them)."""
    items = []
    for name, spec in (profile.data.get("components") or {}).items():
        if not spec.get("url"):
            continue  # installed from a package repository (e.g. docker-ce through apt)
        url, version = str(spec["url"]), str(spec.get("version") or "unversioned")
        items.append(Item((profile.name,), name, version, url, mirror_url(url, mirror),
                          _checksum(profile, name, spec), f"{_safe(name)}/{_safe(version)}/{file_name(url)}"))
    return items


def _checksum(profile: Profile, name: str, spec) -> pins.Checksum | None:
    """The strongest checksum the profile gives (a user pin included, pins.apply put it there),
    with its source: the profile's checksum_source (the pins file for a pin), else the key."""
    key = next((k for k in CHECKSUM_KEYS if spec.get(k)), None)
    if key is None:
        return None
    return pins.Checksum(key, str(spec[key]), str(spec.get("checksum_source") or f"{profile.path.name} components.{name}.{key}"))


def plan(cluster: Cluster, boxes: list[str] | None = None) -> list[Item]:
    """Every file the given boxes (default: every box the config uses) download, once each."""
    mirror = cluster.config.downloads.mirror
    chosen = boxes or list(cluster.profiles)
    by_path: dict[str, Item] = {}
    for box in chosen:
        for item in profile_items(cluster.profile(box), mirror):
            seen = by_path.get(item.relpath)
            if seen is None:
                by_path[item.relpath] = item
            elif (seen.url, seen.checksum and seen.checksum.value) == (item.url, item.checksum and item.checksum.value):
                by_path[item.relpath] = dataclasses.replace(seen, boxes=(*seen.boxes, box))
            else:
                raise K4wError(f"boxes {', '.join(seen.boxes)} and {box} both name {item.relpath} in the cache "
                               f"({seen.url} vs {item.url}) with different files or checksums; give the component "
                               f"another version string or file name in one of the profiles")
    return list(by_path.values())


class Manifest:
    """index.json: what was verified, so a second run hashes nothing it need not hash. Thread-safe;
    saved atomically after every change, so an interrupted fetch keeps what it finished."""

    def __init__(self, root: Path):
        self.root = root
        self.file = root / MANIFEST
        self._lock = threading.Lock()
        self.files: dict[str, dict] = self._read()

    def _read(self) -> dict[str, dict]:
        try:
            data = json.loads(self.file.read_text(encoding="utf-8"))
            if isinstance(data, dict) and data.get("version") == MANIFEST_VERSION and isinstance(data.get("files"), dict):
                return {key: entry for key, entry in data["files"].items() if self._usable(key, entry)}
        except (OSError, ValueError):
            pass  # no or unreadable manifest: every cached file is simply hashed again
        return {}

    def _usable(self, key: str, entry) -> bool:
        """Whether an index entry has the shape record() writes. A bad one (edited by hand, written
        by another version) is ignored, so its file is hashed again, and named once on stderr."""
        problem = _entry_problem(entry)
        if problem and (self.file, key) not in _WARNED:
            _WARNED.add((self.file, key))
            ui.say(f"warning: {self.file}: entry {key!r} is ignored ({problem}); its file is hashed again", style="yellow",
                   to=ui.err_console)
        return problem is None

    def fresh(self, item: Item) -> dict | None:
        """The entry, when the file is still the one verified against this item's checksum."""
        entry = self.files.get(item.relpath)
        path = item.path(self.root)
        if not entry or item.checksum is None or not path.is_file():
            return None
        stat = path.stat()
        if (entry.get("size"), entry.get("mtime_ns"), entry.get("url")) != (stat.st_size, stat.st_mtime_ns, item.url):
            return None
        if item.checksum.key in ("sha256", "sha512"):
            return entry if entry.get(item.checksum.key) == item.checksum.value.lower() else None
        return entry if entry.get("checked_against") == _against(item.checksum) else None

    def status(self, item: Item) -> str:
        """Offline: 'verified', 'changed' (on disk, but not as verified for this checksum) or 'missing'."""
        if self.fresh(item):
            return "verified"
        return "changed" if item.path(self.root).is_file() else "missing"

    def record(self, item: Item, got: Downloaded) -> None:
        stat = got.path.stat()
        entry = {"url": item.url, "source": redact(item.source), "path": item.relpath, "size": stat.st_size,
                 "mtime_ns": stat.st_mtime_ns, "sha256": got.sha256, "sha512": got.sha512,
                 "checked_against": _against(item.checksum) if item.checksum else None,
                 "verified_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
        self.root.mkdir(parents=True, exist_ok=True)
        # Another process's fetch may have recorded files since this one read index.json: merge
        # under the cache's lock, so neither entry is lost.
        with self._lock, filelock.updating(self.file):
            self.files = {**self.files, **self._read(), item.relpath: entry}
            self._save()

    def _save(self) -> None:
        body = json.dumps({"version": MANIFEST_VERSION, "files": dict(sorted(self.files.items()))}, indent=2)
        files.write_file(self.file, body + "\n")


# The fields of an index entry (Manifest.record) and the types every reader relies on; a hash
# or the checksum it was checked against may be null (a file verified by the other hash).
_ENTRY_TYPES = {"url": (str,), "size": (int,), "mtime_ns": (int,), "verified_at": (str,),
                "sha256": (str, type(None)), "sha512": (str, type(None)), "checked_against": (str, type(None))}
_WARNED: set[tuple[Path, str]] = set()


def _entry_problem(entry) -> str | None:
    if not isinstance(entry, dict):
        return f"a {type(entry).__name__}, not a mapping"
    for name, kinds in _ENTRY_TYPES.items():
        value = entry.get(name)
        if not isinstance(value, kinds) or isinstance(value, bool):
            return f"{name} is {value!r}, not {' or '.join('null' if k is type(None) else f'a {k.__name__}' for k in kinds)}"
    return None


def _against(checksum: pins.Checksum) -> str:
    return f"{checksum.key} {checksum.value} ({checksum.source})"


def adopt(root: Path, item: Item, got: Downloaded) -> Path:
    """Move a file downloaded and verified elsewhere (by `invoke pin`) into its cache place.
    It is moved under a temporary name first, so the final name only ever holds a whole file."""
    dest = item.path(root)
    files.move_into(got.path, dest)
    Manifest(root).record(item, Downloaded(dest, got.size, got.sha256, got.sha512, 0))
    return dest
