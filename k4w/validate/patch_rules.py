"""A supported Windows box ships patched, or says why not, by name and date.

A box baked from its ISO alone is as old as the ISO: the 2025 evaluation media are months behind
the current cumulative update (LCU), and nothing but a reader of the profile would notice. So every
Windows box whose build Microsoft still services (facts/windows-servicing.yml) must either
- pin its LCU in components.windows_update with the KB (version), the UBR it brings the build to
  (ubr), its release date (released), a Catalog URL that names that KB, and install it (the step
  02-windows-update.ps1 in provision). Its sha256 may be null: then the build refuses until the user
  pins it on their host (`invoke pin <box> windows_update`, DESIGN "Every checksum names its
  source"), which is still a pinned patch level; or
- carry no_windows_update with a reason and the date someone last looked for an LCU and found none
  they could pin. That date expires after MAX_REASON_AGE_DAYS.

Why 62 days: Microsoft ships an LCU every Patch Tuesday (the second Tuesday of each month), so a
reason older than two 31-day months has outlived at least two LCUs it never looked at. The age runs
from the reason's date to the day validate runs, not to a date in the profile, so a stale excuse
fails on its own without anyone editing the file.

Either way the box's level (build.UBR and the release date of that UBR: the LCU's or, with none, the
ISO's iso.ubr / iso.released) must be known, because the plan prints it with its age
(k4w/model/patch_level.py).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Collection
from functools import lru_cache
from pathlib import Path

import yaml

from k4w.model import patch_level
from k4w.derive.cluster import Cluster
from k4w.model.profiles import Profile
from k4w.validate.result import Result
from k4w.validate.result import from_check

FACTS = Path(__file__).resolve().parent / "facts" / "windows-servicing.yml"
MAX_REASON_AGE_DAYS = 62
KB = re.compile(r"KB(\d{6,8})")


@lru_cache(maxsize=None)
def serviced() -> dict[int, dt.date]:
    data = yaml.safe_load(FACTS.read_text(encoding="utf-8"))
    return {int(build): patch_level.as_date(end) for build, end in data["serviced"].items()}


def _update_problems(where: str, update, provision: list) -> list[str]:
    problems = []
    version = str(update.get("version") or "")
    kb = KB.fullmatch(version)
    if not kb:
        problems.append(f"{where}: components.windows_update.version {version!r} is not a KB number (KB5122882)")
    ubr = update.get("ubr")
    if isinstance(ubr, bool) or not isinstance(ubr, int) or ubr <= 0:
        problems.append(f"{where}: components.windows_update.ubr {ubr!r} is not the UBR the update brings the build to")
    if patch_level.as_date(update.get("released")) is None:
        problems.append(f"{where}: components.windows_update.released is not a date (YYYY-MM-DD): the plan cannot say "
                        f"how old the box's patch level is")
    url = str(update.get("url") or "")
    if kb and f"kb{kb.group(1)}" not in url.lower():
        problems.append(f"{where}: components.windows_update.url {url or '(none)'} does not name {version}: "
                        f"the file the guest installs would not be the update the profile claims")
    if patch_level.UPDATE_STEP not in provision:
        problems.append(f"{where}: components.windows_update is pinned but provision has no {patch_level.UPDATE_STEP}: "
                        f"the box would ship at the ISO's level")
    return problems


def _reason_problems(where: str, none, today: dt.date) -> list[str]:
    if not isinstance(none, dict) or not str(none.get("reason") or "").strip():
        return [f"{where}: a supported Windows build with no components.windows_update and no no_windows_update.reason: "
                f"pin its cumulative update (KB, ubr, released, url; docs/modern-stack.md \"Patching\") or say why none is pinned"]
    when = patch_level.as_date(none.get("date"))
    if when is None:
        return [f"{where}: no_windows_update.date is not a date (YYYY-MM-DD): the day someone last looked for an update"]
    if when > today:
        return [f"{where}: no_windows_update.date {when} is in the future"]
    age = (today - when).days
    if age > MAX_REASON_AGE_DAYS:
        return [f"{where}: no_windows_update is dated {when}, {age} days ago (more than {MAX_REASON_AGE_DAYS}: at least two "
                f"Patch Tuesdays since): look for the current cumulative update again and pin it, or re-date the reason"]
    return []


def check_box(profile: Profile, today: dt.date) -> list[str]:
    where = profile.path.name
    data = profile.data
    build = int((data.get("guest") or {}).get("os_build") or 0)
    end = serviced().get(build)
    if end is None or end < today:
        return []  # Microsoft ships no update for it: nothing to pin
    update = (data.get("components") or {}).get("windows_update")
    none = data.get("no_windows_update")
    problems = []
    if update and none:
        problems.append(f"{where}: both components.windows_update and no_windows_update: keep the one that is true")
    if update:
        problems += _update_problems(where, update, list(data.get("provision") or []))
    else:
        problems += _reason_problems(where, none, today)
        level = patch_level.level(profile)
        if level.ubr is None or level.released is None:
            problems.append(f"{where}: with no update pinned the box is at its ISO's level: set iso.ubr and iso.released "
                            f"(the UBR of the media and the release date of the update that is that UBR)")
    return problems


def check(cluster: Cluster, today: dt.date | None = None) -> tuple[list[str], list[str]]:
    """(Windows box profiles checked, problems)."""
    today = today or dt.date.today()
    checked, problems = [], []
    for profile in cluster.profiles.values():
        if not profile.is_windows:
            continue
        checked.append(profile.path.name)
        problems += check_box(profile, today)
    return checked, problems


# ------------------------------------------------------------------ the validator (k4w.validate.VALIDATORS)


def run(cluster: Cluster, out: Path) -> Result:
    return from_check("Windows patch level", "a pinned cumulative update, or a dated reason, per serviced Windows build", check(cluster))


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return ["# in this process: each Windows box of a serviced build (k4w/validate/facts/windows-servicing.yml) pins "
            "its cumulative update or a no_windows_update reason dated within the last 62 days"]
