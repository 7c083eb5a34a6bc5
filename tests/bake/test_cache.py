"""The component cache's rules that need no download: folders, the mirror layout, file names."""

from __future__ import annotations

import pytest

from k4w.bake import cache


def test_default_folder_follows_each_platform(monkeypatch, tmp_path):
    monkeypatch.setattr(cache.platform, "system", lambda: "Windows")
    monkeypatch.setenv("LOCALAPPDATA", r"C:\Users\ann\AppData\Local")
    assert str(cache.default_dir()).replace("\\", "/").endswith("C:/Users/ann/AppData/Local/k4w/cache")
    monkeypatch.setattr(cache.platform, "system", lambda: "Linux")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.default_dir() == tmp_path / "xdg" / "k4w"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/xdg")  # the XDG spec says: ignore a relative path
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.default_dir() == tmp_path / "home" / ".cache" / "k4w"


@pytest.mark.parametrize("url, mirror, expected", [
    ("https://dl.k8s.io/v1.11.10/kubernetes-node-linux-amd64.tar.gz", "https://art.corp/artifactory/k4w",
     "https://art.corp/artifactory/k4w/dl.k8s.io/v1.11.10/kubernetes-node-linux-amd64.tar.gz"),
    ("https://nssm.cc/release/nssm-2.24.zip", "http://nexus.corp:8081/repository/", "http://nexus.corp:8081/repository/nssm.cc/release/nssm-2.24.zip"),
    ("https://host:8443/a/b.zip?sig=1", "https://m.corp", "https://m.corp/host:8443/a/b.zip?sig=1"),
    ("https://dl.k8s.io/x.tgz", None, "https://dl.k8s.io/x.tgz"),
])
def test_mirror_layout_is_host_then_path(url, mirror, expected):
    assert cache.mirror_url(url, mirror) == expected


def test_file_names_from_urls_cannot_leave_their_folder():
    assert cache.file_name("https://h/a/kubernetes-node-linux-amd64.tar.gz") == "kubernetes-node-linux-amd64.tar.gz"
    assert cache.file_name("https://h/a/..%2F..%2Fetc%2Fpasswd") == ".._.._etc_passwd"
    assert cache.file_name("https://h/") == "download"
    assert cache._safe("..") == "_" and cache._safe("1.11/../x") == "1.11_.._x"
