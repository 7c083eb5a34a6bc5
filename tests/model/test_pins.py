"""invoke pin's machinery: measure on the host, record next to cluster.yml, never overwrite silently."""

from __future__ import annotations

import hashlib

import pytest
import yaml

from k4w.model import profiles
from k4w.infra import sources
from k4w.model import pins
from k4w.infra.errors import K4wError
from tests.fakes import local_http
from tests.helpers import use_sources

BODY = b"flanneld.exe stand-in " * 1000


@pytest.fixture
def box(tmp_path, monkeypatch):
    """A copy of the Windows profile whose flannel URL points at a local site."""
    folder = tmp_path / "boxes"
    folder.mkdir()
    data = yaml.safe_load((sources.REPO.boxes / "windows-1803.yml").read_text())

    def make(url: str) -> profiles.Profile:
        data["components"]["flannel"]["url"] = url
        data["components"]["flannel"].pop("sha256", None)
        (folder / "windows-1803.yml").write_text(yaml.safe_dump(data))
        use_sources(monkeypatch, box_folders=(folder,))
        profiles._load.cache_clear()  # the same folder, edited
        return profiles.load("windows-1803")

    return make


def test_pin_records_url_size_and_sha256_next_to_the_config(tmp_path, box):
    config = tmp_path / "cluster.yml"
    with local_http.site({"/flanneld.exe": BODY}) as site:
        profile = box(f"{site.url}/flanneld.exe")
        assert pins.unpinned(profile, {}) == ["flannel"]
        result = pins.pin(profile, "flannel", config, proxy=None)
    assert result.recorded and result.size == len(BODY) and result.sha256 == hashlib.sha256(BODY).hexdigest()
    recorded = yaml.safe_load((tmp_path / "k4w-pins.yml").read_text())["windows-1803"]["flannel"]
    assert recorded["sha256"] == result.sha256 and recorded["url"] == f"{site.url}/flanneld.exe"
    assert (tmp_path / "k4w-pins.yml").read_text().startswith("# k4w-pins.yml")
    loaded = pins.load(config)
    assert pins.unpinned(profile, loaded) == []
    assert pins.checksum_for(profile, "flannel", loaded).source.startswith("k4w-pins.yml windows-1803.flannel")


def test_a_changed_file_is_refused_until_replace_is_asked_for(tmp_path, box):
    config = tmp_path / "cluster.yml"
    with local_http.site({"/flanneld.exe": BODY}) as site:
        profile = box(f"{site.url}/flanneld.exe")
        first = pins.pin(profile, "flannel", config, proxy=None)
        again = pins.pin(profile, "flannel", config, proxy=None)
        site.files["/flanneld.exe"] = BODY + b"tampered"
        with pytest.raises(K4wError, match="--replace") as err:
            pins.pin(profile, "flannel", config, proxy=None)
        assert first.sha256 in str(err.value)
        assert yaml.safe_load((tmp_path / "k4w-pins.yml").read_text())["windows-1803"]["flannel"]["sha256"] == first.sha256
        replaced = pins.pin(profile, "flannel", config, proxy=None, replace=True)
    assert not again.recorded and "unchanged" in again.note
    assert replaced.recorded and first.sha256 in replaced.note


def test_a_pin_for_another_url_does_not_count(tmp_path, box):
    with local_http.site({"/flanneld.exe": BODY}) as site:
        profile = box(f"{site.url}/flanneld.exe")
        pins.pin(profile, "flannel", tmp_path / "cluster.yml", proxy=None)
        moved = box(f"{site.url}/v2/flanneld.exe")
    assert pins.unpinned(moved, pins.load(tmp_path / "cluster.yml")) == ["flannel"]


def test_a_profile_checksum_wins_and_nothing_is_recorded(tmp_path, box):
    with local_http.site({"/flanneld.exe": BODY}) as site:
        profile = box(f"{site.url}/flanneld.exe")
        path = profile.path
        data = yaml.safe_load(path.read_text())
        data["components"]["flannel"]["sha256"] = hashlib.sha256(BODY).hexdigest()
        path.write_text(yaml.safe_dump(data))
        profiles._load.cache_clear()
        result = pins.pin(profiles.load("windows-1803"), "flannel", tmp_path / "cluster.yml", proxy=None)
    assert not result.recorded and "verified" in result.note
    assert not (tmp_path / "k4w-pins.yml").exists()


def test_unpinned_messages_name_the_exact_command(box):
    profile = box("https://example.invalid/flanneld.exe")
    messages = pins.unpinned_messages(profile, {})
    assert any("invoke pin windows-1803 flannel" in m for m in messages)


def test_unknown_component_names_the_ones_that_exist(tmp_path, box):
    profile = box("https://example.invalid/flanneld.exe")
    with pytest.raises(K4wError, match="no downloaded component 'flanel'.*flannel"):
        pins.pin(profile, "flanel", tmp_path / "cluster.yml", proxy=None)
