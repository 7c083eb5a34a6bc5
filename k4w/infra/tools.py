"""External programs k4w relies on: where to find them and how to install them."""

from __future__ import annotations

import shutil
from pathlib import Path

from k4w.infra import pinned_tools
from k4w.infra.errors import ToolMissing

# Programs k4w prefers from the pinned cache of tools/lock.yml (scripts/build-tools), by the lock's
# name: there the version is the one validate and the CI bakes are known to work with. Elsewhere
# (a Windows host, a machine without the cache) the one on PATH is used.
PINNED = {"packer": "packer"}

# The command that installs each program. The apt packages named here are the ones
# scripts/setup.sh installs (APT_PACKAGES), which sets up a whole Debian/Ubuntu machine at once;
# tests/infra/test_tools.py holds the two lists together.
INSTALL = {
    # Packer 1.9.4 or later with its hyperv/qemu/vagrant plugins (docs/packer.md). On Linux,
    # scripts/setup.sh builds the pinned 1.9.4 and the plugins into the cache (scripts/build-tools).
    "packer": "choco install packer (Windows) or bash scripts/setup.sh (Debian/Ubuntu: builds the pinned Packer)",
    "vagrant": "apt-get install -y vagrant",
    "virsh": "apt-get install -y libvirt-clients",
    "shellcheck": "apt-get install -y shellcheck",
    "debconf-set-selections": "apt-get install -y debconf-utils",
    # `cloud-init schema` checks the autoinstall boxes' user-data (Debian 12's 22.4 is enough).
    "cloud-init": "apt-get install -y cloud-init",
    "ruby": "apt-get install -y ruby",
    "git": "apt-get install -y git",
    "gpg": "apt-get install -y gnupg",
    "ssh": "apt-get install -y openssh-client",
    # tests/sshd.py: the real sshd the shared ssh connections (k4w.infra.ssh_mux) are tested against.
    "sshd": "apt-get install -y openssh-server",
    "tar": "apt-get install -y tar",
    "chroot": "apt-get install -y coreutils",
    "mkfs.ext4": "apt-get install -y e2fsprogs",
    "qemu-system-x86_64": "apt-get install -y qemu-system-x86 qemu-utils",
    "qemu-img": "apt-get install -y qemu-utils",
    "debootstrap": "apt-get install -y debootstrap",
    "squid": "apt-get install -y squid",
    "openssl": "apt-get install -y openssl",
    # The wget debian-installer fetches preseed.cfg with; a test pins its proxy behaviour.
    "busybox": "apt-get install -y busybox",
    # Writes a real WIM whose layout a test holds host/iso-images.ps1's NAME reader against.
    "wimlib-imagex": "apt-get install -y wimtools",
    "kubectl": "choco install kubernetes-cli (Windows host) or see https://kubernetes.io/docs/tasks/tools/",
    "powershell.exe": "part of Windows: add %SystemRoot%\\System32\\WindowsPowerShell\\v1.0 to PATH",
    "kubernetes-validate": "python3 -m pip install kubernetes-validate",
    "tree-sitter-powershell": "python3 -m pip install 'tree-sitter>=0.23,<0.27' 'tree-sitter-powershell>=0.25,<0.27'",
}


def missing(tool: str) -> ToolMissing:
    """The error for a program that is not installed, naming its install command."""
    return ToolMissing(tool, INSTALL.get(tool, f"install '{tool}'"))


def require(tool: str) -> str:
    """Path of a program, or ToolMissing naming its install command. Never a silent skip."""
    path = find(tool)
    if not path:
        raise missing(tool)
    return path


def find(tool: str) -> str | None:
    """The program k4w runs: the pinned cache's copy when built (PINNED), else the one on PATH."""
    if tool in PINNED:
        pinned = pinned_tools.binary(PINNED[tool], tool)
        if pinned is not None:
            return str(pinned)
    return shutil.which(tool)


def is_pinned(path: str | None, tool: str) -> bool:
    """Whether path is the pinned cache's copy of tool (then its plugins are the cache's too)."""
    pinned = pinned_tools.binary(PINNED[tool], tool) if tool in PINNED else None
    return bool(path) and pinned is not None and Path(path) == pinned
