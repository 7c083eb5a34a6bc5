"""Where the pinned upstream tools of tools/lock.yml live once scripts/build-tools has built them.

One folder per tool and version, in a per-user cache (never in the repository, so a fresh clone on a
machine that built them before reuses them):

    <root>/<name>-<version>/bin/<binary>      the programs
    <root>/<name>-<version>/build.json        module, version, Go version, flags, sha256 of each binary
    <root>/packer-plugins/                    PACKER_PLUGIN_PATH: the plugins in Packer's installed layout

<root> is $K4W_TOOLS_DIR, else $XDG_CACHE_HOME/k4w/tools, else ~/.cache/k4w/tools.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from k4w.infra import sources

LOCK_FILE = sources.REPO_ROOT / "tools" / "lock.yml"


def root() -> Path:
    explicit = os.environ.get("K4W_TOOLS_DIR")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "k4w" / "tools"


def lock() -> dict[str, dict]:
    """tools/lock.yml's entries by name."""
    return yaml.safe_load(LOCK_FILE.read_text(encoding="utf-8"))["tools"]


def tool_dir(name: str) -> Path:
    entry = lock()[name]
    return root() / f"{name}-{entry['version']}"


def build_record(name: str) -> dict | None:
    """The build.json of a built tool, or None when it is not (completely) built."""
    path = tool_dir(name) / "build.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def binary(name: str, program: str | None = None) -> Path | None:
    """A built program of tool `name` (default: the tool's own name), or None when not built."""
    if build_record(name) is None:
        return None
    path = tool_dir(name) / "bin" / (program or name)
    return path if path.is_file() else None


def packer_plugin_path() -> Path:
    return root() / "packer-plugins"


# What builds the cache (tools/lock.yml group ci is built by scripts/setup.sh through it).
BUILD_COMMAND = "scripts/build-tools"


def require(name: str, program: str | None = None) -> Path:
    """A built program of tool `name`, or ToolMissing naming the command that builds it. Never a
    silent skip, never a program found elsewhere on PATH (it would not be the pinned version)."""
    from k4w.infra.errors import ToolMissing

    found = binary(name, program)
    if found is None:
        entry = lock().get(name) or {}
        raise ToolMissing(f"{program or name} ({name} {entry.get('version', '?')}, tools/lock.yml)",
                          f"{BUILD_COMMAND} (it builds into {tool_dir(name)}; K4W_TOOLS_DIR moves the cache)")
    return found


# The Packer plugins the templates require, by the local name of their required_plugins entry.
PACKER_PLUGINS = ("hyperv", "qemu", "vagrant")


def packer_pins() -> dict[str, str]:
    """The versions the rendered templates pin, without the "v": {"packer": "1.9.4", "hyperv": ...}.
    One source for the templates' required_version/required_plugins and for what validate runs."""
    table = lock()
    pins = {"packer": table["packer"]["version"].removeprefix("v")}
    pins.update({name: table[f"packer-plugin-{name}"]["version"].removeprefix("v") for name in PACKER_PLUGINS})
    return pins
