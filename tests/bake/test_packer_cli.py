"""packer_cli: what `invoke doctor` reports before a long build (packer_preflight), and the
version read from the real packer."""

from __future__ import annotations

import os

import pytest

from k4w.bake import packer_cli, packer_preflight
from tests.helpers import system_tool

HYPERV_TEMPLATE = {
    "builders": [{"type": "hyperv-iso", "cd_files": ["Autounattend.xml"]}],
    "post-processors": [{"type": "vagrant", "output": "x-{{.Provider}}.box"}],
}
PLUGIN_PATHS = "\n".join([
    "/home/u/.config/packer/plugins/github.com/hashicorp/hyperv/packer-plugin-hyperv_v1.1.3_x5.0_linux_amd64",
    "/home/u/.config/packer/plugins/github.com/hashicorp/vagrant/packer-plugin-vagrant_v1.1.5_x5.0_linux_amd64",
])


def test_packer_166_with_an_iso_tool_is_ready(fake_packer):
    assert packer_preflight([HYPERV_TEMPLATE]) == []


def test_missing_packer_names_the_install_command(fake_packer, monkeypatch, tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    problems = packer_preflight([HYPERV_TEMPLATE])
    assert any("packer is not installed" in p and "choco install packer" in p for p in problems)


def test_too_old_packer(fake_packer, monkeypatch):
    monkeypatch.setenv("FAKE_PACKER_VERSION", "1.5.6")
    assert packer_preflight([HYPERV_TEMPLATE]) == ["packer 1.5.6 is too old: need 1.6.6 or later. Upgrade with: "
                                                   "choco install packer (Windows) or apt-get install -y packer (Debian/Ubuntu)"]


def test_modern_packer_needs_the_hyperv_and_vagrant_plugins(fake_packer, monkeypatch):
    monkeypatch.setenv("FAKE_PACKER_VERSION", "1.11.2")
    problems = packer_preflight([HYPERV_TEMPLATE])
    assert [p.rsplit(": ", 1)[1] for p in problems] == [
        "packer plugins install github.com/hashicorp/hyperv",
        "packer plugins install github.com/hashicorp/vagrant",
    ]
    monkeypatch.setenv("FAKE_PACKER_PLUGINS", PLUGIN_PATHS)
    assert packer_preflight([HYPERV_TEMPLATE]) == []


def test_windows_plugin_paths_are_recognised(fake_packer, monkeypatch):
    monkeypatch.setenv("FAKE_PACKER_VERSION", "1.10.0")
    monkeypatch.setenv("FAKE_PACKER_PLUGINS", PLUGIN_PATHS.replace("/", "\\"))
    assert packer_preflight([HYPERV_TEMPLATE]) == []


def test_cd_files_needs_an_iso_authoring_tool(fake_packer, monkeypatch):
    (fake_packer.bin / "xorriso").unlink()
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not any(
        os.path.exists(os.path.join(p, t)) for t in ("xorriso", "mkisofs", "hdiutil", "oscdimg")))
    monkeypatch.setenv("PATH", path)
    problems = packer_preflight([HYPERV_TEMPLATE])
    assert len(problems) == 1 and "oscdimg" in problems[0] and "apt-get install -y xorriso" in problems[0]
    assert packer_preflight([{"builders": [{"type": "hyperv-iso"}]}]) == []  # no CD, no tool needed


def test_without_templates_doctor_gets_the_hyperv_box_needs(fake_packer, monkeypatch):
    monkeypatch.setenv("FAKE_PACKER_VERSION", "1.10.0")
    problems = packer_preflight()
    assert [p.rsplit(" ", 1)[1] for p in problems] == ["github.com/hashicorp/hyperv", "github.com/hashicorp/vagrant"]


@pytest.mark.tools
def test_real_packer_version_is_read(tmp_path):
    system_tool("packer")
    assert packer_cli.packer_version() >= packer_cli.MIN_VERSION
