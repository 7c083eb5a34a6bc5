"""The patch level a Windows box is baked at: build.UBR, where that UBR comes from, and how old it is.

A box is at the level of its pinned cumulative update (components.windows_update, installed by
guest/windows/bake/02-windows-update.ps1) or, with none pinned, at its ISO's. Both the plan (which
prints it with its age) and `invoke validate` (k4w/validate/patch_rules.py, which refuses a supported
Windows box that is neither patched nor excused) read it from here, so the two never disagree.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from k4w.model.profiles import Profile

# The step that installs components.windows_update (guest/windows/bake/02-windows-update.ps1).
UPDATE_STEP = "02-windows-update.ps1"


def as_date(value) -> dt.date | None:
    """A profile's date (YAML may give a date or an ISO 'YYYY-MM-DD' string); None if absent or not a date."""
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            return None
    return None


@dataclass(frozen=True)
class PatchLevel:
    build: int | None
    ubr: int | None
    released: dt.date | None  # the release date of the update whose UBR this is
    origin: str               # "KB5122882" (the pinned update) or "ISO"

    def age_days(self, today: dt.date) -> int | None:
        return (today - self.released).days if self.released else None

    def describe(self, today: dt.date) -> str:
        """'20348.5622 (KB5122882, 2026-09-08, 85 days old)'; what is unknown is said so."""
        build = f"{self.build if self.build is not None else '?'}.{self.ubr if self.ubr is not None else '?'}"
        age = self.age_days(today)
        when = f"{self.released.isoformat()}, {age} days old" if age is not None else "release date unknown"
        return f"{build} ({self.origin}, {when})"


def level(profile: Profile) -> PatchLevel | None:
    """The level a Windows box is baked at; None for a box that is not Windows."""
    if not profile.is_windows:
        return None
    data = profile.data
    build = (data.get("guest") or {}).get("os_build")
    update = (data.get("components") or {}).get("windows_update")
    if update:
        return PatchLevel(build, update.get("ubr"), as_date(update.get("released")), str(update.get("version") or "update"))
    iso = data.get("iso") or {}
    return PatchLevel(build, iso.get("ubr"), as_date(iso.get("released")), "ISO")
