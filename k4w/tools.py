"""External programs k4w relies on: where to find them and how to install them."""

from __future__ import annotations

import shutil

from .errors import ToolMissing

# The command a Debian/Ubuntu user runs to get each program (scripts/setup.sh runs those a Linux host needs).
INSTALL = {
    "packer": "apt-get install -y packer   (or https://developer.hashicorp.com/packer/install)",
    "vagrant": "apt-get install -y vagrant",
    "shellcheck": "apt-get install -y shellcheck",
    "debconf-set-selections": "apt-get install -y debconf-utils",
    "ruby": "apt-get install -y ruby",
    "qemu-system-x86_64": "apt-get install -y qemu-system-x86 qemu-utils",
    "debootstrap": "apt-get install -y debootstrap",
    "squid": "apt-get install -y squid",
    "kubectl": "choco install kubernetes-cli (Windows host) or see https://kubernetes.io/docs/tasks/tools/",
    "kubernetes-validate": "python3 -m pip install kubernetes-validate",
    "tree-sitter-powershell": "python3 -m pip install 'tree-sitter>=0.23,<0.27' 'tree-sitter-powershell>=0.25,<0.27'",
}


def require(tool: str) -> str:
    """Path of a program, or ToolMissing naming its install command. Never a silent skip."""
    path = shutil.which(tool)
    if not path:
        raise ToolMissing(tool, INSTALL.get(tool, f"install '{tool}'"))
    return path
