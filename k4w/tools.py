"""External programs k4w relies on: where to find them and how to install them."""

from __future__ import annotations

import shutil

from .errors import ToolMissing

# The command that installs each program. The apt packages named here are the ones
# scripts/setup.sh installs (APT_PACKAGES), which sets up a whole Debian/Ubuntu machine at once;
# tests/cli/test_tools.py holds the two lists together.
INSTALL = {
    "packer": "choco install packer (Windows) or apt-get install -y packer (Debian/Ubuntu)",
    "vagrant": "apt-get install -y vagrant",
    "shellcheck": "apt-get install -y shellcheck",
    "debconf-set-selections": "apt-get install -y debconf-utils",
    # `cloud-init schema` checks the autoinstall boxes' user-data (Debian 12's 22.4 is enough).
    "cloud-init": "apt-get install -y cloud-init",
    "ruby": "apt-get install -y ruby",
    "git": "apt-get install -y git",
    "gpg": "apt-get install -y gnupg",
    "ssh": "apt-get install -y openssh-client",
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
    path = shutil.which(tool)
    if not path:
        raise missing(tool)
    return path
