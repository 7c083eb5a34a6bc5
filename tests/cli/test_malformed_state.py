"""A malformed k4w-pins.yml or cache index.json: one line naming the file and the entry, never a traceback."""

from __future__ import annotations

import json

import pytest

from tests.bake.test_fetch import _config, _fetch, _profiles, _site_files
from tests.fakes import local_http
from tests.helpers import ROOT, invoke

PIN = {"url": "https://github.com/coreos/flannel/releases/download/v0.10.0/flanneld.exe", "sha256": "0" * 64,
       "size": 1, "pinned": "2026-01-01T00:00:00+00:00"}


@pytest.mark.parametrize("pins, line, entry", [
    ("windows-1803: garbage\n", 1, "windows-1803"),
    ("windows-1803:\n  - flannel\n", 1, "windows-1803"),
    ("windows-1803:\n  flannel: [a, b]\n", 2, "windows-1803.flannel"),
    ("windows-1803:\n  flannel:\n    url: 5\n    sha256: abc\n", 3, "windows-1803.flannel.url"),
    ("- a list\n", None, "(top level)"),
])
@pytest.mark.parametrize("task", ["plan", "render", "doctor"])
def test_a_malformed_pins_file_is_named_with_its_entry(pins, line, entry, task, tmp_path):
    (tmp_path / "cluster.yml").write_text((ROOT / "cluster.yml").read_text())
    (tmp_path / "k4w-pins.yml").write_text(pins)
    result = invoke(task, "--config", str(tmp_path / "cluster.yml"), "--out", str(tmp_path / "out"))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    errors = [text for text in result.stderr.splitlines() if text.strip()]
    where = f"{tmp_path / 'k4w-pins.yml'}{f':{line}' if line else ''}: entry {entry}:"
    assert len(errors) == 1 and errors[0].startswith(f"error: {where}"), result.stderr


BAD_ENTRIES = {"a list": ["x"], "a string size": {"size": "big"}, "null": None}


@pytest.mark.parametrize("bad", BAD_ENTRIES)
def test_a_malformed_index_entry_is_ignored_and_its_file_hashed_again(bad, tmp_path):
    cache = tmp_path / "cache"
    with local_http.site(_site_files()) as site:
        env = _profiles(tmp_path, site.url)
        config = _config(tmp_path)
        assert _fetch(config, cache, env, "--box", "ubuntu-1604").returncode == 0
        served = len(site.requests)
        index = json.loads((cache / "index.json").read_text())
        key = sorted(index["files"])[0]
        good = index["files"][key]
        index["files"][key] = BAD_ENTRIES[bad] if bad != "a string size" else {**good, "size": "big"}
        (cache / "index.json").write_text(json.dumps(index))
        result = _fetch(config, cache, env, "--box", "ubuntu-1604")
        doctor = invoke("doctor", "--config", config, "--out", str(tmp_path / "out"), env={**env, "K4W_CACHE": str(cache)})
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stdout + result.stderr
    warnings = [text for text in result.stderr.splitlines() if "index.json" in text]
    assert len(warnings) == 1 and f"{cache / 'index.json'}: entry {key!r} is ignored" in warnings[0], result.stderr
    assert "(0 files downloaded, 2 already cached)" in result.stdout, result.stdout  # hashed, not downloaded
    assert len(site.requests) == served
    assert json.loads((cache / "index.json").read_text())["files"][key]["size"] == good["size"]  # recorded anew
    assert "Traceback" not in doctor.stdout + doctor.stderr
