"""Fixtures for the build-runner tests: a scratch copy of a miniature repository, small
ISO files with known checksums, a config, and the fake `packer` (tests/fakes/packer.py) first on PATH."""

from __future__ import annotations

import hashlib
import io
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from k4w.model import config, profiles
from k4w.infra import sources
from k4w.media import iso_images
from k4w import validate
from k4w.derive.cluster import Cluster
from k4w.infra.sources import REPO_ROOT
from tests.fakes import component_cache
from tests.fakes.packer import PackerOnPath
from tests.helpers import use_sources

FIXTURES = Path(__file__).parent / "fixtures"
# Image lists of Windows Server 1803 media (their README.md says where the values come from).
ISO_IMAGES = Path(__file__).resolve().parent.parent / "fixtures" / "iso-images"
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
    # The miniature repository has no manifests and minimal answer files, which the real
    # validators rightly reject; the build's validation gate is tested on the real repository
    # (test_build_gate.py), so builds of the miniature run without validators.
    monkeypatch.setattr(validate, "VALIDATORS", [])
    profiles._load.cache_clear()
    # No host here can mount an ISO: the image preflight reads volume-licence media's recorded list.
    monkeypatch.setenv(iso_images.FIXTURE_ENV, str(ISO_IMAGES / "windows-server-1803-vl.json"))
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
    # build-* fills the component cache first: placeholders the fake packer never opens.
    monkeypatch.setenv("K4W_CACHE", str(tmp_path / "component-cache"))
    component_cache.seed(tmp_path / "component-cache", result.cluster())
    yield result
    profiles._load.cache_clear()


@pytest.fixture()
def fake_packer(tmp_path, monkeypatch, repo) -> PackerOnPath:
    return PackerOnPath(tmp_path, monkeypatch, repo.root)


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


@pytest.fixture()
def repo_packer(tmp_path, monkeypatch) -> PackerOnPath:
    """The fake packer for builds of the repository's own boxes (real validators, real profiles);
    both boxes build successfully unless a test sets another scenario."""
    fake = PackerOnPath(tmp_path, monkeypatch, REPO_ROOT)
    # build-* fills the component cache first: placeholders the fake packer never opens.
    monkeypatch.setenv("K4W_CACHE", str(tmp_path / "component-cache"))
    component_cache.seed(tmp_path / "component-cache", Cluster.resolve(config.parse(
        "nodes:\n  - {name: m, role: master, box: ubuntu-1604, ip: 192.168.250.10}\n"
        "  - {name: w, role: worker, box: windows-1803, ip: 192.168.250.21}\n", "cache-seed.yml")))
    fake.scenario("ubuntu-1604", "ubuntu-success.txt")
    fake.scenario("windows-1803", "windows-success.txt")
    return fake


def edited_boxes(tmp_path: Path, box: str, old: str, new: str) -> dict[str, str]:
    """A copy of boxes/ with one text replacement in one profile (comments kept), as the
    K4W_BOX_DIRS environment of a real `invoke` run."""
    folder = tmp_path / "boxes"
    if not folder.exists():
        shutil.copytree(REPO_ROOT / "boxes", folder)
    path = folder / f"{box}.yml"
    text = path.read_text()
    assert old in text, f"{path} no longer holds {old!r}"
    path.write_text(text.replace(old, new, 1))
    return {sources.BOX_DIRS_ENV: str(folder)}
