"""no_proxy means the same on the host (invoke fetch, invoke pin) as in the guests (Go's rules)."""

from __future__ import annotations

import pytest

from k4w.infra.noproxy import bypasses
from tests.bake.test_fetch import _config, _fetch, _profiles, _site_files
from tests.fakes import local_http


@pytest.mark.parametrize("host, port, entries, direct", [
    ("127.0.0.2", "80", ["127.0.0.0/8"], True),
    ("10.1.2.3", "443", ["10.0.0.0/8"], True),
    ("10.1.2.3", "443", ["10.1.2.0/28"], True),
    ("10.1.3.3", "443", ["10.1.2.0/24"], False),
    ("fd00::1", "80", ["fd00::/8"], True),
    ("mirror.corp.example", "80", ["10.0.0.0/8"], False),  # a name is not resolved for a CIDR
    ("127.0.0.2", "80", ["127.0.0.1"], False),
    ("10.0.0.1", "80", ["10.0.0.1"], True),
    ("::1", "80", ["[::1]:80"], True),
    ("a.corp.example", "80", ["corp.example"], True),  # a name matches its subdomains
    ("corp.example", "80", ["corp.example"], True),
    ("evilcorp.example", "80", ["corp.example"], False),
    ("corp.example", "80", [".corp.example"], False),  # a leading dot: subdomains only
    ("x.corp.example", "80", ["*.corp.example"], True),
    ("corp.example", "80", ["corp.example:8080"], False),  # a port matches that port only
    ("corp.example", "8080", ["corp.example:8080"], True),
    ("anything", "80", ["*"], True),
    ("Mirror.Corp.Example.", "80", ["corp.example"], True),
])
def test_no_proxy_entries_match_as_in_go(host, port, entries, direct):
    assert bypasses(host, port, entries) is direct


@pytest.mark.parametrize("no_proxy", [["127.0.0.0/8"], ["127.0.0.2"], ["127.0.0.0/30"]])
def test_fetch_goes_direct_to_a_host_no_proxy_lists_by_cidr(no_proxy, tmp_path):
    """The site is on 127.0.0.2, the proxy demands credentials: with no_proxy covering the site,
    the proxy sees no request (and so never the credentials) and the site serves both files."""
    cache = tmp_path / "cache"
    with local_http.site(_site_files(), host="127.0.0.2") as site, local_http.proxy("alice", "S3cret") as proxy:
        env = _profiles(tmp_path, site.url)
        config = _config(tmp_path, **{"proxy.http": proxy.url, "proxy.no_proxy": no_proxy})
        result = _fetch(config, cache, env, "--box", "ubuntu-1604")
    assert result.returncode == 0, result.stdout + result.stderr
    assert proxy.requests == []
    assert len(site.requests) == 2
