"""packer_cli: what `invoke doctor` reports before a long build (packer_preflight), and the
version read from the real packer."""

from __future__ import annotations

import os

import pytest

from k4w.infra import pinned_tools
from k4w.infra import packer_cli
from k4w.bake import packer_preflight
from tests.helpers import system_tool

PINS = pinned_tools.packer_pins()
# As k4w.infra.packer_hcl.parse reads a rendered Windows template.
HYPERV_TEMPLATE = {
    "required_plugins": {
        "hyperv": {"source": "github.com/hashicorp/hyperv", "version": f"= {PINS['hyperv']}"},
        "vagrant": {"source": "github.com/hashicorp/vagrant", "version": f"= {PINS['vagrant']}"},
    },
    "builders": [{"type": "hyperv-iso", "cd_files": ["Autounattend.xml"]}],
    "post-processors": [{"type": "vagrant", "output": "x-{{.Provider}}.box"}],
}
# `packer plugins install` of other versions than the pinned ones.
OTHER_PLUGIN_PATHS = "\n".join([
    "/home/u/.config/packer/plugins/github.com/hashicorp/hyperv/packer-plugin-hyperv_v1.1.3_x5.0_linux_amd64",
    "/home/u/.config/packer/plugins/github.com/hashicorp/vagrant/packer-plugin-vagrant_v1.1.5_x5.0_linux_amd64",
])


def test_the_pinned_packer_with_its_plugins_and_an_iso_tool_is_ready(fake_packer):
    assert packer_preflight([HYPERV_TEMPLATE]) == []


def test_missing_packer_names_the_install_command(fake_packer, monkeypatch, tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    problems = packer_preflight([HYPERV_TEMPLATE])
    assert any("packer is not installed" in p and "choco install packer" in p for p in problems)


@pytest.mark.parametrize("old", ["1.6.6", "1.9.3"])
def test_packer_older_than_the_hcl2_templates_need_is_refused(fake_packer, monkeypatch, old):
    monkeypatch.setenv("FAKE_PACKER_VERSION", old)
    assert packer_preflight([HYPERV_TEMPLATE]) == [
        f"packer {old} is too old: the HCL2 templates need 1.9.4 or later (required_plugins, packer init). "
        "Upgrade with: choco install packer (Windows) or bash scripts/setup.sh (Debian/Ubuntu: builds the pinned Packer)"]


def test_the_plugins_the_template_pins_must_be_installed_at_those_versions(fake_packer, monkeypatch):
    monkeypatch.setenv("FAKE_PACKER_VERSION", "1.11.2")
    monkeypatch.setenv("FAKE_PACKER_PLUGINS", "")
    problems = packer_preflight([HYPERV_TEMPLATE])
    assert [p.split(" Install it with: ")[1].split(" (")[0] for p in problems] == [
        f"packer plugins install github.com/hashicorp/hyperv {PINS['hyperv']}",
        f"packer plugins install github.com/hashicorp/vagrant {PINS['vagrant']}",
    ]
    assert all("it is not installed" in p and "packer init" in p for p in problems)
    monkeypatch.setenv("FAKE_PACKER_PLUGINS", OTHER_PLUGIN_PATHS)
    problems = packer_preflight([HYPERV_TEMPLATE])
    assert len(problems) == 2 and "only 1.1.3 is installed" in problems[0], problems


def test_windows_plugin_paths_are_recognised(fake_packer, monkeypatch):
    from tests.fakes.packer import pinned_plugins_installed

    monkeypatch.setenv("FAKE_PACKER_PLUGINS", pinned_plugins_installed().replace("/", "\\"))
    assert packer_preflight([HYPERV_TEMPLATE]) == []


def test_cd_files_needs_an_iso_authoring_tool(fake_packer, monkeypatch):
    (fake_packer.bin / "xorriso").unlink()
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not any(
        os.path.exists(os.path.join(p, t)) for t in ("xorriso", "mkisofs", "hdiutil", "oscdimg")))
    monkeypatch.setenv("PATH", path)
    problems = packer_preflight([HYPERV_TEMPLATE])
    assert len(problems) == 1 and "oscdimg" in problems[0] and "apt-get install -y xorriso" in problems[0]
    assert packer_preflight([{"builders": [{"type": "hyperv-iso"}]}]) == []  # no CD, no tool needed


def test_a_qemu_source_whose_uefi_firmware_is_missing_is_refused_before_the_build(fake_packer, tmp_path):
    """Packer's qemu builder finds a missing efi_firmware_code only when it starts the VM, after the ISO's
    download; the preflight names the file and the package."""
    code, vars_ = tmp_path / "OVMF_CODE_4M.fd", tmp_path / "OVMF_VARS_4M.fd"
    qemu = {"builders": [{"type": "qemu", "name": "ubuntu-2604", "efi_firmware_code": str(code),
                          "efi_firmware_vars": str(vars_)}]}
    assert packer_preflight([qemu]) == [
        f"the UEFI firmware the qemu builds boot is not on this host (ubuntu-2604.efi_firmware_code = {code}; "
        f"ubuntu-2604.efi_firmware_vars = {vars_}). Install it with: apt-get install -y ovmf"]
    code.write_bytes(b"x")
    vars_.write_bytes(b"x")
    assert packer_preflight([qemu]) == []


def test_without_templates_doctor_gets_the_hyperv_box_needs(fake_packer, monkeypatch):
    monkeypatch.setenv("FAKE_PACKER_PLUGINS", "")
    problems = packer_preflight()
    assert [p.split("Packer plugin ")[1].split(" and ")[0] for p in problems] == [
        f"github.com/hashicorp/hyperv {PINS['hyperv']}", f"github.com/hashicorp/vagrant {PINS['vagrant']}"]


def test_the_pinned_packer_is_preferred_and_runs_with_the_plugin_cache(tmp_path, monkeypatch):
    """k4w.infra.tools.find: the cache's Packer (scripts/build-tools) before PATH's; with it, Packer
    gets the cache's plugins as PACKER_PLUGIN_PATH, so `packer init` needs no network."""
    monkeypatch.setenv("K4W_TOOLS_DIR", str(tmp_path / "tools"))
    folder = tmp_path / "tools" / f"packer-v{PINS['packer']}"
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "packer").write_text("#!/bin/sh\n")
    # Not built until its build.json is written (k4w.infra.pinned_tools.build_record): PATH's is used.
    assert packer_cli.packer_path() != str(folder / "bin" / "packer") and packer_cli.plugin_env() == {}
    (folder / "build.json").write_text("{}")
    assert packer_cli.packer_path() == str(folder / "bin" / "packer")
    assert packer_cli.plugin_env() == {"PACKER_PLUGIN_PATH": str(tmp_path / "tools" / "packer-plugins")}
    assert packer_cli.build_env(tmp_path, {}, base={})["PACKER_PLUGIN_PATH"] == str(tmp_path / "tools" / "packer-plugins")


@pytest.mark.tools
def test_real_packer_version_is_read(tmp_path):
    system_tool("packer")
    assert packer_cli.packer_version() >= packer_cli.MIN_VERSION
