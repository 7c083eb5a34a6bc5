"""The functions the Invoke tasks call."""

from __future__ import annotations

import json

import pytest

from k4w.bake import commands
from k4w.infra.errors import K4wError


def test_build_windows_builds_only_the_windows_box(repo, fake_packer, console):
    fake_packer.scenario("windows-1803", "windows-success.txt")
    results = commands.build(repo.cluster(), repo.out, node_os="windows", console=console)
    assert [r.box for r in results] == ["windows-1803"]
    assert [c["argv"][-1].rsplit("/", 1)[1] for c in fake_packer.builds()] == ["windows-1803.pkr.hcl"]


def test_build_ubuntu_with_an_iso_elsewhere(repo, fake_packer, console, tmp_path):
    elsewhere = tmp_path / "my-ubuntu.iso"
    elsewhere.write_bytes(repo.isos["ubuntu-1604"].read_bytes())
    repo.isos["ubuntu-1604"].unlink()
    fake_packer.scenario("ubuntu-1604", "ubuntu-success.txt")
    results = commands.build(repo.cluster(), repo.out, node_os="linux", iso=str(elsewhere), console=console)
    assert results[0].status == "built" and str(elsewhere) in console.text
    # Packer installs from the file that was verified, not from iso/ nor the release's URL.
    assert [c["isos"] for c in fake_packer.builds()] == [[str(elsewhere)]]


def test_build_windows_with_an_iso_elsewhere(repo, fake_packer, console, tmp_path):
    elsewhere = tmp_path / "my-windows.iso"
    elsewhere.write_bytes(repo.isos["windows-1803"].read_bytes())
    repo.isos["windows-1803"].unlink()
    fake_packer.scenario("windows-1803", "windows-success.txt")
    results = commands.build(repo.cluster(), repo.out, node_os="windows", iso=str(elsewhere), console=console)
    assert results[0].status == "built", results[0].message
    assert [c["isos"] for c in fake_packer.builds()] == [[str(elsewhere)]]
    record = json.loads((repo.out / "boxes" / "windows-1803.record.json").read_text())
    assert record["iso"]["source"] == str(elsewhere)


def test_without_iso_packer_installs_from_iso_folder(repo, fake_packer, console):
    fake_packer.scenario("windows-1803", "windows-success.txt")
    commands.build(repo.cluster(), repo.out, node_os="windows", console=console)
    assert [c["isos"] for c in fake_packer.builds()] == [[str(repo.isos["windows-1803"])]]


def test_one_iso_for_several_boxes_is_refused(repo, fake_packer, console):
    with pytest.raises(K4wError, match="--iso names one ISO but 2 boxes"):
        commands.build(repo.cluster(), repo.out, iso="x.iso", console=console)
    assert fake_packer.calls() == []


def test_add_iso_reports_what_it_did(repo, console, tmp_path):
    source = tmp_path / "windows-server-1803.iso"
    source.write_bytes(b"win")
    repo.isos["windows-1803"].unlink()
    commands.add_iso(str(source), console=console)
    assert "recorded windows-server-1803.iso for box windows-1803" in console.text
    assert "hard-linked" in console.text
