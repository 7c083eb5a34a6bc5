"""Where each box's installation ISO lives. The checksum catalogue is iso/catalogue.yml."""

from __future__ import annotations

from pathlib import Path

from . import ROOT
from .profiles import Profile

ISO_DIR = ROOT / "iso"


def iso_path(profile: Profile) -> Path:
    return ISO_DIR / profile.data.iso.name
