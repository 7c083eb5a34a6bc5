"""Shared test helpers: build config dicts and run the real `invoke` CLI."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import yaml

from k4w import sources

ROOT = Path(__file__).resolve().parent.parent

BASE = yaml.safe_load((ROOT / "cluster.yml").read_text())


def config_dict(**overrides) -> dict:
    """The default cluster.yml as a dict, with dotted-path overrides, e.g. {"network.backend": "vxlan"}."""
    data = copy.deepcopy(BASE)
    for dotted, value in overrides.items():
        target = data
        *parents, last = dotted.replace("__", ".").split(".")
        for part in parents:
            target = target[int(part)] if part.isdigit() else target.setdefault(part, {})
        if last.isdigit():
            target[int(last)] = value
        else:
            target[last] = value
    return data


def write_config(path: Path, data: dict | str) -> Path:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def invoke(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real CLI, exactly as a user types it."""
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=cwd, capture_output=True, text=True, env=full_env, check=False
    )


def tree_digest(folder: Path) -> dict[str, str]:
    """Every file under folder with its sha256 and mode: equal digests mean byte-for-byte unchanged."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            out[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest() + oct(path.stat().st_mode)
    return out


def use_sources(monkeypatch, **changes) -> sources.Sources:
    """Point the whole package at another source tree for one test: a fixture repository
    (root=...) or other box profile folders (box_folders=(...)). Undone after the test."""
    new = dataclasses.replace(sources.REPO, **changes)
    monkeypatch.setattr(sources, "REPO", new)
    return new


def venv_tool(name: str) -> str:
    """A console script installed into this interpreter's environment by scripts/setup.sh.

    Looked up beside sys.executable, never on PATH: the suite runs as `.venv/bin/python -m pytest`
    without the venv's bin/ on PATH, and a copy elsewhere on PATH must not stand in for it.
    """
    path = Path(sys.executable).parent / name
    if not os.access(path, os.X_OK):
        import pytest

        pytest.fail(f"{name} is not installed in {path.parent}: run bash scripts/setup.sh")
    return str(path)


def need(tool: str, extra_path: str | None = None) -> str:
    """The path of a program a test runs. A missing one fails the test (never a skip) naming its
    install command from k4w.tools.INSTALL. extra_path: folders searched too (sbin for squid)."""
    import shutil

    import pytest

    from k4w import tools

    found = shutil.which(tool) or (extra_path and shutil.which(tool, path=extra_path))
    if not found:
        pytest.fail(str(tools.missing(tool)), pytrace=False)
    return found
