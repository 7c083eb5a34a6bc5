"""Fixtures for the Windows box artifacts: render cluster.yml variants (proxy, Gen1) in memory
or into a temporary --out, with a known per-build secret."""

from __future__ import annotations

import shutil

import pytest
import yaml

from k4w.model import profiles
from k4w import render
from k4w.derive.cluster import Cluster
from k4w.infra.sources import REPO_ROOT as ROOT
from tests.helpers import use_sources

from windows_fixtures import BOX, BOX_USER_SECRET, SECRET, Rendered, cluster_config


@pytest.fixture
def profile_dir(tmp_path, monkeypatch):
    """A copy of boxes/ that profiles.load reads instead; edit it with the returned function."""
    copy = tmp_path / "boxes"
    shutil.copytree(ROOT / "boxes", copy)
    use_sources(monkeypatch, box_folders=(copy,))
    profiles._load.cache_clear()

    def edit(change) -> None:
        path = copy / f"{BOX}.yml"
        data = yaml.safe_load(path.read_text())
        change(data)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        profiles._load.cache_clear()

    yield edit
    profiles._load.cache_clear()


@pytest.fixture
def render_windows(tmp_path, profile_dir):
    """render_windows(generation=2, http=None, https=None, write=False) -> Rendered."""

    def _render(generation: int = 2, http: str | None = None, https: str | None = None,
                no_proxy: list[str] | None = None, write: bool = False, box: str = BOX) -> Rendered:
        if box == BOX:
            profile_dir(lambda data: data["build"].__setitem__("generation", generation))
        cfg = cluster_config(http, https, no_proxy, box=box)
        out = tmp_path / f"out-{box}-gen{generation}-{'proxy' if (http or https) else 'direct'}"
        files = render.render_files(Cluster.resolve(cfg), out, secrets_for=lambda box: {"admin_password": SECRET, "box_user_password": BOX_USER_SECRET})
        if write:
            render.write_atomically(files, out)
        return Rendered(cfg, files, out, generation, box)

    return _render


@pytest.fixture(params=[1, 2], ids=["gen1", "gen2"])
def generation(request) -> int:
    return request.param
