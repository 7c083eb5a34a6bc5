"""Which folders of --out a render may replace: only those it made itself.

Each render leaves OUT/.k4w-render.json, the list of every file it wrote in each folder it owns
(MANAGED). Before a render replaces OUT/<folder>, that folder must be in the list, and hold only
listed files (plus what a build stages there, BUILD_WRITES). Anything else (the user's own packer/
folder, a file they dropped in, a symbolic link) is refused, naming it, and nothing is replaced.
The list sits beside the folders, not in them: readers glob OUT/nodes/** and OUT/packer/*.json.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath

from k4w.infra.errors import K4wError
from k4w.infra.files import LinkRefused

MANIFEST = ".k4w-render.json"
VERSION = 1
# What `invoke build` itself writes inside a rendered folder: the verified components it stages
# for Packer's HTTP server, OUT/http/<box>/components/ (k4w.media.build_media.FOLDER).
BUILD_WRITES = (("http", "*", "components"),)


class NotOurs(K4wError):
    """Something in a folder the render would replace was not written by k4w."""


def manifest_text(files: dict[str, str], managed: tuple[str, ...]) -> str:
    """OUT/.k4w-render.json for a render of files ({path relative to OUT: text})."""
    folders: dict[str, list[str]] = {}
    for rel in sorted(files):
        head, _, rest = rel.partition("/")
        if head in managed and rest:
            folders.setdefault(head, []).append(rest)
    return json.dumps({"version": VERSION, "folders": folders}, indent=1) + "\n"


def check(out: Path, managed: tuple[str, ...]) -> None:
    """Raise NotOurs (or LinkRefused) naming the first thing at a managed name of out that k4w did
    not write; return when every managed folder that exists is one a render made, unchanged."""
    out = Path(out)
    listed = _read(out)
    for name in managed:
        folder = out / name
        if folder.is_symlink():
            raise LinkRefused(folder)
        if not folder.exists():
            continue
        if not folder.is_dir():
            raise NotOurs(f"{folder} is a file k4w did not write; k4w renders a folder there. "
                          f"Move it away or choose another --out")
        # A render that wrote no file in a folder does not list it, yet a build may stage there
        # (BUILD_WRITES): such a folder holding only staged files is still ours.
        if listed is None or (name not in listed and _first_stranger(folder, name, set()) is not None):
            raise NotOurs(f"{folder} was not made by `invoke render` (it is not in {out / MANIFEST}); "
                          f"k4w replaces only folders it rendered. Move it away or choose another --out "
                          f"(a folder rendered by a k4w older than this check: delete it, a render makes it again)")
        stranger = _first_stranger(folder, name, set(listed.get(name, ())))
        if stranger is not None:
            if stranger.is_symlink():
                raise LinkRefused(stranger)
            raise NotOurs(f"{stranger} was not written by k4w, and a render replaces {folder} whole; "
                          f"move it out of {folder}, then run again")


def _read(out: Path) -> dict[str, list[str]] | None:
    path = out / MANIFEST
    if path.is_symlink():
        raise LinkRefused(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise NotOurs(f"{path} is unreadable ({getattr(exc, 'strerror', None) or type(exc).__name__}); "
                      f"it lists the folders a render made. Delete it and the folders it listed, then render again") from None
    folders = data.get("folders") if isinstance(data, dict) and data.get("version") == VERSION else None
    if not isinstance(folders, dict) or not all(isinstance(v, list) for v in folders.values()):
        raise NotOurs(f"{path} is not a k4w render manifest; delete it and the folders it listed, then render again")
    return folders


def _first_stranger(folder: Path, name: str, listed: set[str]) -> Path | None:
    """The first file, link or empty folder under folder that the manifest does not list."""
    for parent, dirs, files in os.walk(folder):
        here = Path(parent)
        rel_here = PurePosixPath(*here.relative_to(folder).parts)
        for d in sorted(dirs):
            if (here / d).is_symlink():
                return here / d  # os.walk does not descend into it: never walk the user's tree
        dirs[:] = sorted(d for d in dirs if not _build_writes(name, rel_here / d))
        for f in sorted(files):
            if str(rel_here / f) not in listed:
                return here / f
    return None


def _build_writes(name: str, rel: PurePosixPath) -> bool:
    return any(len(rel.parts) == len(pattern) - 1 and all(
        want in ("*", got) for want, got in zip(pattern[1:], rel.parts)) and pattern[0] == name
        for pattern in BUILD_WRITES)
