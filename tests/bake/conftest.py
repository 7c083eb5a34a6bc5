"""Fixtures for the build-runner tests: a scratch copy of a miniature repository, small
ISO files with known checksums, a config, and a fake `packer` first on PATH."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from k4w import config, iso, profiles, render
from k4w.cluster_model import Cluster
from tests.helpers import use_sources

FIXTURES = Path(__file__).parent / "fixtures"
FAKE_PACKER = Path(__file__).parent / "fake_packer.py"
PROXY_PASSWORD = "Pr0xyS3cret"
PROXY = f"http://builder:{PROXY_PASSWORD}@proxy.corp.example:3128"


@dataclass
class Repo:
    root: Path
    out: Path
    isos: dict[str, Path]

    def edit_profile(self, box: str, change) -> None:
        path = self.root / "boxes" / f"{box}.yml"
        data = yaml.safe_load(path.read_text())
        change(data)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        profiles._load.cache_clear()  # profiles are cached per (name, folder)

    def cluster(self, proxy: str | None = None) -> Cluster:
        text = f"""
proxy:
  http: {proxy or 'null'}
  https: {proxy or 'null'}
nodes:
  - {{name: master, role: master, box: ubuntu-1604, ip: 192.168.250.10, memory: 2048}}
  - {{name: worker-win, role: worker, box: windows-1803, ip: 192.168.250.21, memory: 4096}}
"""
        return Cluster.resolve(config.parse(text, "test-cluster.yml"))


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture()
def repo(tmp_path, monkeypatch) -> Repo:
    root = tmp_path / "repo"
    shutil.copytree(FIXTURES / "repo", root)
    use_sources(monkeypatch, root=root)
    profiles._load.cache_clear()
    # Small stand-in ISOs: the runner hashes them exactly like a 5 GB one.
    win = root / "iso" / "windows-server-1803.iso"
    win.write_bytes(b"windows iso " * 50_000)
    ubu = root / "iso" / "ubuntu-16.04.7-server-amd64.iso"
    ubu.write_bytes(b"ubuntu iso " * 50_000)
    # Windows: checksum recorded by iso-add in the catalogue. Ubuntu: pinned in its profile.
    catalogue = root / "iso" / "catalogue.yml"
    header = catalogue.read_text().splitlines()[0]
    entry = {"windows-server-1803.iso": {"sha256": _sha(win.read_bytes()), "box": "windows-1803", "source": "test", "size": win.stat().st_size}}
    catalogue.write_text(header + "\n" + yaml.safe_dump(entry))
    result = Repo(root, tmp_path / "out", {"windows-1803": win, "ubuntu-1604": ubu})
    result.edit_profile("ubuntu-1604", lambda d: d["iso"].update(sha256=_sha(ubu.read_bytes())))
    yield result
    profiles._load.cache_clear()


class FakePacker:
    def __init__(self, tmp_path: Path, monkeypatch, repo_root: Path):
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        self.calls_file = tmp_path / "packer-calls.jsonl"
        self.scenarios_file = tmp_path / "packer-scenarios.json"
        self.scenarios: dict = {}
        self._launcher("packer", f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_PACKER}" "$@"\n')
        # cd_files needs an ISO authoring tool on PATH; the fake build never runs it.
        self._launcher("xorriso", "#!/bin/sh\nexit 0\n")
        monkeypatch.setenv("PATH", f"{self.bin}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("FAKE_PACKER_CALLS", str(self.calls_file))
        monkeypatch.setenv("FAKE_PACKER_SCENARIOS", str(self.scenarios_file))
        monkeypatch.setenv("FAKE_PACKER_ROOT", str(repo_root))
        # A user's debug setting must not reach the build (the runner removes it).
        monkeypatch.setenv("PACKER_LOG", "1")

    def _launcher(self, name: str, text: str) -> None:
        path = self.bin / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)

    def scenario(self, box: str, transcript: str, exit: int = 0, write_box: bool = True, line_delay: float = 0.0,
                 wait_for_interrupt: bool = False) -> None:
        self.scenarios[box] = {"transcript": transcript, "exit": exit, "write_box": write_box, "line_delay": line_delay,
                               "wait_for_interrupt": wait_for_interrupt}
        self.scenarios_file.write_text(json.dumps(self.scenarios))

    def calls(self) -> list[dict]:
        if not self.calls_file.exists():
            return []
        return [json.loads(line) for line in self.calls_file.read_text().splitlines()]

    def builds(self) -> list[dict]:
        return [c for c in self.calls() if c["argv"][:1] == ["build"]]


@pytest.fixture()
def fake_packer(tmp_path, monkeypatch, repo) -> FakePacker:
    return FakePacker(tmp_path, monkeypatch, repo.root)


class CapturedConsole(Console):
    """A non-terminal rich console whose output the test can read (like CI logs)."""

    def __init__(self):
        self.buffer = io.StringIO()
        super().__init__(file=self.buffer, width=200, force_terminal=False, color_system=None)

    @property
    def text(self) -> str:
        return self.buffer.getvalue()


@pytest.fixture()
def console() -> CapturedConsole:
    return CapturedConsole()
