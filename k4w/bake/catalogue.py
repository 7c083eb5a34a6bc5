"""What a finished build leaves beside the box: the Vagrant catalogue and the build record.

OUT/boxes/<box>.json is a Vagrant box catalogue ("metadata" file), so
`vagrant box add OUT/boxes/<box>.json` adds `k4w/<box>` with its version and checks the
sha256. Vagrant refuses a box whose name differs from the one the Vagrantfile asks for,
so the Vagrantfile must use `k4w/<box>` (BOX_PREFIX).

OUT/boxes/<box>.record.json is the build record: versions, git revision, timings, the
ISO and box checksums, the up-to-date stamp, and a `test` slot `invoke test-box` fills.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from k4w.infra import documents
from k4w.outdir import state as out_state
from k4w.infra import files as outfiles
from k4w.infra import proc
from k4w.infra.errors import K4wError
from k4w.model.profiles import Profile

BOX_PREFIX = "k4w/"


def box_version(when: dt.datetime) -> str:
    """The build time in UTC as YYYYMMDD.HHMMSS.

    Vagrant parses versions with Gem::Version; two numeric segments compare as numbers, and
    the fixed widths make a later build always the higher version, even when a profile moves
    to an older component version.
    """
    return when.astimezone(dt.timezone.utc).strftime("%Y%m%d.%H%M%S")


def catalogue_path(out: Path, box: str) -> Path:
    return Path(out) / "boxes" / f"{box}.json"


def record_path(out: Path, box: str) -> Path:
    return Path(out) / "boxes" / f"{box}.record.json"


def guest_release_path(out: Path, box: str) -> Path:
    """Where a Windows build's fetch-release step (templates/packer/windows.pkr.hcl.j2) downloads the
    guest's own build record, C:\\k\\box-release.json, beside the box it is building."""
    return Path(out) / "boxes" / ".partial" / f"{box}.box-release.json"


def read_guest_release(out: Path, box: str) -> dict | None:
    """The guest's build record as the build downloaded it; None when the box has no fetch-release
    step (Ubuntu). A record that is there but unreadable stops the build: the box cannot say what
    it is."""
    path = guest_release_path(out, box)
    try:
        text = path.read_text(encoding="utf-8-sig")  # Windows PowerShell 5.1 writes a BOM
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise K4wError(f"{path}: the guest's build record is not JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict) or data.get("box") != box:
        raise K4wError(f"{path}: the guest's build record names box {data.get('box') if isinstance(data, dict) else data!r}, not {box}")
    return data


def write_json(path: Path, data: dict) -> None:
    """Write through a temp file and rename, so a reader never sees half a file."""
    outfiles.write_file(path, json.dumps(data, indent=2) + "\n")


def read_record(out: Path, box: str) -> dict | None:
    """The last build's record; None when there is none or it is not JSON (the box is then rebuilt).
    JSON of another shape is one line naming the field (k4w.outdir.state.BuildRecord)."""
    path = record_path(out, box)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError, RecursionError):
        return None
    documents.parse(out_state.BuildRecord, data, f"{path} (delete it to rebuild the box)")
    return data


def box_catalogue(box: str, profile: Profile, version: str, provider: str, box_file: Path, sha256: str) -> dict:
    kube = profile.data.get("kubernetes", {}).get("version")
    description = f"k4w {box}: {profile.data.get('os_family', '')} node" + (f" for Kubernetes {kube}" if kube else "")
    return {
        "name": BOX_PREFIX + box,
        "description": description,
        "versions": [
            {
                "version": version,
                "providers": [
                    {
                        "name": provider,
                        "url": Path(box_file).resolve().as_uri(),
                        "checksum_type": "sha256",
                        "checksum": sha256,
                    }
                ],
            }
        ],
    }


def components(profile: Profile) -> dict[str, str]:
    """{component: version} exactly as the profile's `components:` pins them."""
    return {name: str(spec.get("version")) for name, spec in (profile.data.get("components") or {}).items()}


def git_revision(root: Path) -> dict | None:
    """{"commit": sha, "dirty": bool} of the repository, or None outside a git checkout."""
    try:
        head = proc.run(["git", "rev-parse", "HEAD"], cwd=root, timeout=30)
        if head.returncode != 0:
            return None
        status = proc.run(["git", "status", "--porcelain"], cwd=root, timeout=60)
    except (OSError, K4wError):  # no git, or a hung one: the record says "unknown" rather than fail the build
        return None
    return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip())}


def build_record(
    *,
    box: str,
    profile: Profile,
    version: str,
    provider: str,
    box_file: Path,
    box_sha256: str,
    box_size: int,
    started: dt.datetime,
    finished: dt.datetime,
    packer_version: str | None,
    iso: dict,
    stamp: dict,
    git: dict | None,
    guest: dict | None = None,
) -> dict:
    return {
        "box": box,
        "name": BOX_PREFIX + box,
        "version": version,
        "provider": provider,
        "box_file": Path(box_file).name,
        "box_sha256": box_sha256,
        "box_size": box_size,  # checked, then box_sha256, before a build skips the box as up to date
        "profile": profile.path.name,
        "components": components(profile),
        "kubernetes": profile.data.get("kubernetes", {}).get("version"),
        # The patch level the guest reached ({"build": 20348, "ubr": 5622}), from its own record
        # (11-box-release.ps1); None for a box that reports none (Ubuntu).
        "os": (guest or {}).get("os"),
        "git": git,
        "build": {
            "started": started.isoformat(timespec="seconds"),
            "finished": finished.isoformat(timespec="seconds"),
            "duration_s": round((finished - started).total_seconds(), 1),
        },
        "packer": packer_version,
        "iso": iso,
        "stamp": stamp,
        "test": None,
    }
