"""k4w.infra.tools.INSTALL is the one table of install commands, and scripts/setup.sh installs what it names."""

from __future__ import annotations

import re

import pytest

from k4w.infra import proc, tools
from k4w.infra.errors import ToolMissing
from tests.helpers import ROOT

# The words after `apt-get install -y` up to the first that is no Debian package name ("(", "or").
_APT = re.compile(r"apt-get install -y((?:\s+[a-z0-9][a-z0-9.+-]+)+)")


def setup_sh_packages() -> set[str]:
    text = (ROOT / "scripts" / "setup.sh").read_text()
    block = re.search(r"^APT_PACKAGES=\((.*?)^\)", text, re.S | re.M)
    assert block, "scripts/setup.sh has no APT_PACKAGES=( ... ) list"
    return set(block.group(1).split())


def install_packages() -> dict[str, set[str]]:
    found = {}
    for tool, command in tools.INSTALL.items():
        match = _APT.search(command)
        if match:
            found[tool] = {word for word in match.group(1).split() if word != "or"}
    return found


def test_every_apt_package_named_in_install_is_in_setup_sh():
    missing = {tool: sorted(pkgs - setup_sh_packages()) for tool, pkgs in install_packages().items()}
    assert {tool: pkgs for tool, pkgs in missing.items() if pkgs} == {}


def test_the_apt_reading_finds_the_packages():
    # A parse that found nothing would make the check above pass vacuously.
    packages = install_packages()
    assert packages["qemu-system-x86_64"] == {"qemu-system-x86", "qemu-utils"}
    assert {"ruby", "squid", "debootstrap"} <= setup_sh_packages()


def test_a_missing_program_names_its_install_command(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolMissing, match=re.escape(f"'shellcheck' is not installed. Install it with: {tools.INSTALL['shellcheck']}")):
        tools.require("shellcheck")
    with pytest.raises(ToolMissing, match=re.escape(tools.INSTALL["squid"])):
        proc.run(["squid", "-v"])
    with pytest.raises(ToolMissing, match="Install it with: install 'no-such-k4w-tool'"):
        proc.stream(["no-such-k4w-tool"], print)


def test_packer_comes_from_the_pinned_build_not_from_debian():
    """Debian's packer is 1.6.6, too old for the HCL2 templates (required_plugins, packer init):
    setup.sh builds the pinned one (tools/lock.yml) and installs no apt package of that name."""
    assert "packer" not in install_packages() and "packer" not in setup_sh_packages()
    assert "bash scripts/setup.sh" in tools.INSTALL["packer"] and "choco install packer" in tools.INSTALL["packer"]
