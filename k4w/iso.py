"""Where each box's installation ISO lives, and the checksum catalogue iso/catalogue.yml."""

from __future__ import annotations

from pathlib import Path

import yaml

from . import ROOT
from .profiles import Profile

ISO_DIR = ROOT / "iso"
CATALOGUE = ISO_DIR / "catalogue.yml"


def catalogue(path: Path = CATALOGUE) -> dict:
    """{iso file name: {sha256, box, source}}; empty when the file does not exist yet."""
    if not path.is_file():
        return {}
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def iso_path(profile: Profile) -> Path:
    return ISO_DIR / profile.data.iso.name


def iso_sha256(profile: Profile) -> str | None:
    """The expected sha256 of a box's ISO: the profile's published one, else the catalogue's."""
    pinned = profile.data.iso.get("sha256")
    if pinned:
        return pinned
    entry = catalogue().get(profile.data.iso.name)
    return entry.get("sha256") if entry else None
