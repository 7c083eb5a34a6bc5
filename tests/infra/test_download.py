"""The host-side downloader: proxy with credentials, resume, verification, nothing unverified left."""

from __future__ import annotations

import hashlib

import pytest

from k4w.infra.download import DownloadError, Expected, download
from k4w.derive.values import Proxy
from tests.fakes import local_http

BODY = bytes(range(256)) * 8192  # 2 MiB: more than one read chunk
SHA256 = hashlib.sha256(BODY).hexdigest()


def _proxy(url: str | None, no_proxy=()) -> Proxy:
    return Proxy(enabled=bool(url), http=url, https=url, no_proxy=list(no_proxy))


def test_download_goes_through_the_proxy_with_its_credentials(tmp_path):
    with local_http.site({"/f.bin": BODY}) as site, local_http.proxy("alice", "S3cret") as proxy:
        got = download(f"{site.url}/f.bin", tmp_path / "f.bin", Expected("sha256", SHA256), _proxy(proxy.url))
    assert got.sha256 == SHA256 and got.size == len(BODY) and got.fetched_bytes == len(BODY)
    assert (tmp_path / "f.bin").read_bytes() == BODY
    assert proxy.requests and all(r["authorized"] for r in proxy.requests)


def test_no_proxy_entries_go_direct(tmp_path):
    with local_http.site({"/f.bin": BODY}) as site, local_http.proxy("alice", "S3cret") as proxy:
        download(f"{site.url}/f.bin", tmp_path / "f.bin", Expected("sha256", SHA256), _proxy(proxy.url, ["127.0.0.1"]))
    assert proxy.requests == [] and len(site.requests) == 1


def test_wrong_proxy_password_fails_naming_the_url_without_the_secret(tmp_path):
    with local_http.site({"/f.bin": BODY}) as site, local_http.proxy("alice", "S3cret") as proxy:
        bad = proxy.url.replace("S3cret", "wrong")
        with pytest.raises(DownloadError) as err:
            download(f"{site.url}/f.bin", tmp_path / "f.bin", Expected("sha256", SHA256), _proxy(bad))
    assert "407" in str(err.value) and "wrong" not in str(err.value)
    assert not (tmp_path / "f.bin").exists()


def test_a_mismatch_leaves_no_file_behind(tmp_path):
    with local_http.site({"/f.bin": BODY}) as site:
        with pytest.raises(DownloadError, match="sha256 mismatch.*deleted"):
            download(f"{site.url}/f.bin", tmp_path / "f.bin", Expected("sha256", "0" * 64))
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_download_resumes_with_a_range_request(tmp_path):
    with local_http.site({"/f.bin": BODY}) as site:
        site.fail_after = 700_000
        with pytest.raises(DownloadError, match="run again to resume"):
            download(f"{site.url}/f.bin", tmp_path / "f.bin", Expected("sha256", SHA256))
        assert (tmp_path / "f.bin.part").stat().st_size == 700_000 and not (tmp_path / "f.bin").exists()
        got = download(f"{site.url}/f.bin", tmp_path / "f.bin", Expected("sha256", SHA256))
    assert site.requests[-1]["range"] == "bytes=700000-"
    assert got.fetched_bytes == len(BODY) - 700_000 and got.sha256 == SHA256
    assert not (tmp_path / "f.bin.part").exists()


def test_a_server_that_ignores_range_restarts_cleanly(tmp_path):
    with local_http.site({"/f.bin": BODY}) as site:
        site.honour_range = False
        (tmp_path / "f.bin.part").write_bytes(BODY[:1000])
        got = download(f"{site.url}/f.bin", tmp_path / "f.bin", Expected("sha256", SHA256))
    assert got.sha256 == SHA256 and (tmp_path / "f.bin").read_bytes() == BODY


def test_a_verified_file_in_place_is_not_downloaded_again(tmp_path):
    (tmp_path / "f.bin").write_bytes(BODY)
    with local_http.site({"/f.bin": BODY}) as site:
        got = download(f"{site.url}/f.bin", tmp_path / "f.bin", Expected("sha256", SHA256))
    assert got.fetched_bytes == 0 and site.requests == []


def test_a_missing_file_is_a_clear_error(tmp_path):
    with local_http.site({}) as site:
        with pytest.raises(DownloadError, match="HTTP 404"):
            download(f"{site.url}/nope.bin", tmp_path / "nope.bin", Expected("sha256", SHA256))
