"""Every Windows box's container images serve the Windows build it installs (k4w/validate/
windows_image_rules.py): the image tags and the pause image it pulls, held against guest.os_build
through the real `invoke validate`, with wrong values planted in copies of the real profiles."""

from __future__ import annotations

import copy
import dataclasses
import shutil

import pytest
import yaml

from k4w.model import profiles
from k4w.infra import sources
from k4w.validate import windows_image_rules
from tests.helpers import ROOT, invoke

WINDOWS_BOXES = sorted(p.stem for p in (ROOT / "boxes").glob("windows-*.yml"))
MODERN = ROOT / "examples" / "cluster-modern.yml"


def _edited(name: str, **changes) -> profiles.Profile:
    prof = profiles.load(name)
    data = copy.deepcopy(dict(prof.data))
    for dotted, value in changes.items():
        section, key = dotted.split(".")
        data[section][key] = value
    return dataclasses.replace(prof, data=profiles.Attr.wrap(data))


@pytest.mark.parametrize("box", WINDOWS_BOXES)
def test_every_windows_profile_passes_as_shipped(box):
    assert windows_image_rules.check_box(profiles.load(box)) == []


def test_the_2025_box_runs_ltsc2025_images_and_pulls_a_pause_release_that_lists_26100():
    prof = profiles.load("windows-2025")
    assert prof.data.guest.os_build == 26100
    assert {k: v.rsplit(":", 1)[1] for k, v in prof.data.images.items()} == {"servercore": "ltsc2025", "nanoserver": "ltsc2025"}
    assert 26100 in windows_image_rules.facts()["pause"][prof.data.kubernetes.pause_image]
    assert windows_image_rules.PULLS_PAUSE in prof.data.provision


def test_the_facts_name_their_sources():
    text = windows_image_rules.FACTS.read_text()
    for source in ("microsoft/hcsshim osversion/windowsbuilds.go at v0.14.1", "build/pause/Makefile",
                   "kubernetes/kubernetes#136960", "containerd/containerd 05d3b31586fb"):
        assert source in text
    assert windows_image_rules.facts()["tags"][26100] == ["ltsc2025"]


def test_the_seed_box_builds_its_pause_so_only_its_nanoserver_tag_decides():
    # windows-1803 builds kubeletwin/pause:1803 FROM images.nanoserver (04-container-images.ps1): no pull.
    assert windows_image_rules.check_box(_edited("windows-1803", **{"kubernetes.pause_image": "anything/local:1"})) == []
    problems = windows_image_rules.check_box(_edited("windows-1803", **{"images.nanoserver": "mcr.microsoft.com/windows/nanoserver:ltsc2022"}))
    assert problems == ["windows-1803.yml: images.nanoserver is mcr.microsoft.com/windows/nanoserver:ltsc2022, but guest.os_build "
                        "17134 runs process-isolated images tagged 1803 only: its pods would never start"]


def test_a_build_without_recorded_tags_is_refused_not_passed():
    problems = windows_image_rules.check_box(_edited("windows-2025", **{"guest.os_build": 26200}))
    assert len(problems) == 1 and "guest.os_build 26200 is a Windows build k4w/validate/facts/windows-images.yml has no image tags for" in problems[0]


def _boxes_with(tmp_path, box: str, edit) -> dict:
    """A copy of boxes/ with one profile edited; the env that makes invoke read it."""
    folder = tmp_path / "boxes"
    shutil.copytree(ROOT / "boxes", folder)
    path = folder / f"{box}.yml"
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return {sources.BOX_DIRS_ENV: str(folder)}


@pytest.mark.tools
@pytest.mark.parametrize("edit, message", [
    (lambda d: d["images"].update(servercore="mcr.microsoft.com/windows/servercore:ltsc2022"),
     "windows-2025.yml: images.servercore is mcr.microsoft.com/windows/servercore:ltsc2022, but guest.os_build 26100 runs "
     "process-isolated images tagged ltsc2025 only: its pods would never start"),
    (lambda d: d["kubernetes"].update(pause_image="registry.k8s.io/pause:3.10.1"),
     "windows-2025.yml: kubernetes.pause_image registry.k8s.io/pause:3.10.1 has no Windows 26100 entry in its manifest list "
     "(it serves 17763, 20348): containerd on this box cannot pull a sandbox it can run; use a pause release that lists 26100 "
     "(registry.k8s.io/pause:3.10.2)"),
    (lambda d: d["guest"].update(os_build=20348),
     "windows-2025.yml: images.nanoserver is mcr.microsoft.com/windows/nanoserver:ltsc2025, but guest.os_build 20348 runs "
     "process-isolated images tagged ltsc2022 only"),
    (lambda d: d["iso"].update(image_name="Windows Server 2022 SERVERDATACENTERCORE"),
     "windows-2025.yml: iso.image_name 'Windows Server 2022 SERVERDATACENTERCORE' is not an image of build 26100's media, "
     "whose install.wim NAMEs begin 'Windows Server 2025 ': Setup would find no such image"),
], ids=["ltsc2022-image", "pause-3.10.1", "os_build-2022", "wim-name-2022"])
def test_invoke_validate_refuses_an_image_of_another_build_on_the_2025_profile(tmp_path, edit, message):
    env = _boxes_with(tmp_path, "windows-2025", edit)
    result = invoke("validate", "--config", str(MODERN), "--out", str(tmp_path / "out"), env=env)
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 1 and "Traceback" not in output, output
    assert "✗ Windows container images" in output and message in output, output
