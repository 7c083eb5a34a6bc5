"""A serviced Windows box ships at a pinned cumulative update, or carries a reason no older than 62 days
for shipping at its ISO's level (k4w/validate/patch_rules.py): the shipped profiles pass, and each way
a profile can fall short is planted in a copy of a real one."""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt

import pytest

from k4w.model import patch_level, profiles
from k4w.validate import patch_rules

TODAY = dt.date(2026, 12, 2)


def _edited(name: str, edit) -> profiles.Profile:
    prof = profiles.load(name)
    data = copy.deepcopy(dict(prof.data))
    edit(data)
    return dataclasses.replace(prof, data=profiles.Attr.wrap(data))


@pytest.mark.parametrize("box", ["windows-1803", "windows-2022", "windows-2025"])
def test_every_windows_profile_passes_as_shipped(box):
    assert patch_rules.check_box(profiles.load(box), TODAY) == []


def test_a_serviced_box_with_neither_an_update_nor_a_reason_is_refused():
    prof = _edited("windows-2025", lambda d: d.pop("no_windows_update"))
    [problem] = patch_rules.check_box(prof, TODAY)
    assert "windows-2025.yml: a supported Windows build with no components.windows_update and no no_windows_update.reason" in problem


def test_dropping_the_2022_update_without_a_reason_is_refused():
    prof = _edited("windows-2022", lambda d: d["components"].pop("windows_update"))
    problems = patch_rules.check_box(prof, TODAY)
    assert any("no no_windows_update.reason" in p for p in problems)
    # The 2022 ISO records no UBR of its own, so the level it would ship at is unknown too.
    assert any("set iso.ubr and iso.released" in p for p in problems)


def test_a_reason_older_than_62_days_is_refused_and_one_of_62_passes():
    prof = profiles.load("windows-2025")
    dated = patch_level.as_date(prof.data.no_windows_update.date)
    assert patch_rules.check_box(prof, dated + dt.timedelta(days=62)) == []
    [problem] = patch_rules.check_box(prof, dated + dt.timedelta(days=63))
    assert "no_windows_update is dated 2026-12-02, 63 days ago (more than 62" in problem


@pytest.mark.parametrize("edit, expected", [
    (lambda d: d["no_windows_update"].update(date="last month"), "no_windows_update.date is not a date"),
    (lambda d: d["no_windows_update"].update(date="2027-01-01"), "is in the future"),
    (lambda d: d["no_windows_update"].update(reason=" "), "no no_windows_update.reason"),
    (lambda d: d["iso"].pop("ubr"), "set iso.ubr and iso.released"),
])
def test_an_unusable_reason_or_an_unknown_iso_level_is_refused(edit, expected):
    problems = patch_rules.check_box(_edited("windows-2025", edit), TODAY)
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("edit, expected", [
    (lambda u: u.update(version="5122882"), "is not a KB number"),
    (lambda u: u.update(ubr=None), "is not the UBR"),
    (lambda u: u.pop("released"), "released is not a date"),
    (lambda u: u.update(url="https://catalog.s.download.windowsupdate.com/d/msdownload/update/software/secu/2026/09/"
                            "windows10.0-kb5099999-x64_4432fee39b6b3ea7136f5ca83544a997ad0a4b5e.msu"),
     "does not name KB5122882"),
])
def test_a_pinned_update_must_name_its_kb_ubr_date_and_file(edit, expected):
    problems = patch_rules.check_box(_edited("windows-2022", lambda d: edit(d["components"]["windows_update"])), TODAY)
    assert any(expected in p for p in problems), problems


def test_a_pinned_update_the_bake_never_installs_is_refused():
    prof = _edited("windows-2022", lambda d: d["provision"].remove(patch_level.UPDATE_STEP))
    [problem] = patch_rules.check_box(prof, TODAY)
    assert "provision has no 02-windows-update.ps1: the box would ship at the ISO's level" in problem


def test_a_pinned_update_whose_sha256_awaits_invoke_pin_counts_as_pinned():
    # windows-2022's sha256 is null (Microsoft publishes none; `invoke pin` measures it): its KB, UBR and
    # release date are named, which is what the rule asks.
    assert profiles.load("windows-2022").data.components.windows_update.sha256 is None
    assert patch_rules.check_box(profiles.load("windows-2022"), TODAY) == []


def test_both_an_update_and_a_reason_is_refused():
    prof = _edited("windows-2022", lambda d: d.update(no_windows_update={"reason": "x", "date": "2026-12-01"}))
    assert any("keep the one that is true" in p for p in patch_rules.check_box(prof, TODAY))


def test_a_build_microsoft_no_longer_services_needs_no_update():
    # 17134 (1803) is not in facts/windows-servicing.yml; a serviced build past its end date is treated alike.
    assert 17134 not in patch_rules.serviced()
    assert patch_rules.check_box(profiles.load("windows-2022"), dt.date(2031, 10, 15)) == []
    prof = _edited("windows-2025", lambda d: d.pop("no_windows_update"))
    assert patch_rules.check_box(prof, dt.date(2034, 11, 15)) == []


def test_the_patch_level_the_plan_prints():
    level = patch_level.level(profiles.load("windows-2025"))
    assert level.describe(dt.date(2026, 12, 2)) == "26100.32230 (ISO, 2026-01-13, 323 days old)"
    level = patch_level.level(profiles.load("windows-2022"))
    assert level.describe(dt.date(2026, 12, 2)) == "20348.5622 (KB5122882, 2026-09-08, 85 days old)"
    assert patch_level.level(profiles.load("ubuntu-2404")) is None
