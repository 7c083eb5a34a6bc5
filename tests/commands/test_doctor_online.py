"""`invoke doctor --online` (issue 21.1): every URL a build downloads from still answers, asked the
way the build's downloads go: through the cluster's proxy with its credentials, NO_PROXY honoured.

The internet is a local site on 127.0.0.2 (not in NO_PROXY, so through the proxy) and one on
127.0.0.1 (in NO_PROXY: reached directly); the proxy is tests/fakes/local_http's, which demands
credentials. The box profiles are the real ones with their URLs pointed at those sites.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from k4w.commands import doctor
from k4w.infra import sources
from k4w.derive.cluster import Cluster
from k4w.model.config import load
from tests.fakes import local_http
from tests.helpers import config_dict, invoke, write_config

BOXES = ("ubuntu-1604", "windows-1803")  # the default cluster.yml's boxes


def point_profiles(folder: Path, proxied: str, direct: str, gone: set[str]) -> dict[str, dict]:
    """Copies of the real profiles whose ISO and component URLs name the local sites; returns
    {box: {"iso": [urls], component: url}}. The ISO's first URL is gone (a superseded point release),
    its superseded_url answers; components named in `gone` answer 404; cni comes from `direct`."""
    urls = {}
    for box in BOXES:
        data = yaml.safe_load((sources.REPO.root / "boxes" / f"{box}.yml").read_text())
        data["iso"]["url"] = f"{proxied}/releases/{box}.iso"
        data["iso"]["superseded_url"] = f"{proxied}/old-releases/{box}.iso"
        urls[box] = {"iso": [data["iso"]["url"], data["iso"]["superseded_url"]]}
        for name, spec in data["components"].items():
            if spec.get("url"):
                base = direct if name == "cni" else proxied
                spec["url"] = f"{base}/{'gone' if name in gone else 'files'}/{box}/{box}-{name}.bin"
                urls[box][name] = spec["url"]
        (folder / f"{box}.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    return urls


def site_files(urls: dict[str, dict]) -> dict[str, bytes]:
    files = {}
    for box, found in urls.items():
        files[f"/old-releases/{box}.iso"] = b"ISO"
        for name, url in found.items():
            if name != "iso" and "/files/" in url:
                files[re.sub(r"^http://[^/]+", "", url)] = b"x"
    return files


def row(output: str, check: str) -> str:
    """The doctor table's line for one check (piped, the table is aligned plain text)."""
    (line,) = [l for l in output.splitlines() if f" {check} " in f" {l} "]
    return line.strip()


@pytest.fixture
def sites():
    with local_http.site({}, host="127.0.0.2") as proxied, local_http.site({}) as direct, \
            local_http.proxy("alice", "S3cret") as proxy:
        yield proxied, direct, proxy


def test_doctor_online_asks_every_download_url_through_the_proxy_and_names_the_dead_ones(tmp_path, sites):
    proxied, direct, proxy = sites
    folder = tmp_path / "boxes"
    folder.mkdir()
    urls = point_profiles(folder, proxied.url, direct.url, gone={"nssm"})
    files = site_files(urls)
    proxied.files.update({k: v for k, v in files.items() if "/cni.bin" not in k})
    direct.files.update({k: v for k, v in files.items() if "/cni.bin" in k})
    cfg = write_config(tmp_path / "cluster.yml", config_dict(**{"proxy.http": proxy.url, "proxy.https": proxy.url}))

    result = invoke("doctor", "--online", "--config", str(cfg), "--out", str(tmp_path / "out"),
                    env={sources.BOX_DIRS_ENV: str(folder), doctor.FAKE_HYPERV_HOST_ENV: "1", "COLUMNS": "400"})
    output = result.stdout + result.stderr
    # The ISO: the release's URL is gone, old-releases answers, so Packer (iso_urls) gets it: ok.
    iso_row = row(output, "online: ISO URLs for ubuntu-1604")
    assert iso_row.split()[0] == "ok", iso_row
    assert "releases/ubuntu-1604.iso: HTTP 404" in iso_row and "old-releases/ubuntu-1604.iso: HTTP 200" in iso_row
    # A component that is gone fails the build stage, with what to do.
    dead = row(output, "online: windows-1803 nssm URL")
    assert dead.split()[0] == "FAIL" and "HTTP 404" in dead and "update components.nssm.url" in dead
    assert row(output, "online: ubuntu-1604 kubernetes URL").split()[0] == "ok"
    assert result.returncode == 1 and "required for 'build' failed" in output
    # Through the proxy, with its credentials, as HEAD requests; never the password in the output.
    asked = [r for r in proxy.requests if r.get("method") == "HEAD"]
    assert asked and all(r["authorized"] for r in asked)
    assert {r["url"] for r in asked} >= {urls["ubuntu-1604"]["kubernetes"], urls["windows-1803"]["iso"][1]}
    assert "S3cret" not in output
    # NO_PROXY: 127.0.0.1 (the cni downloads) is asked directly, never through the proxy.
    assert [r["path"] for r in direct.requests if r.get("method") == "HEAD"]
    assert not [r for r in proxy.requests if "127.0.0.1" in r["url"]]


def test_doctor_stays_offline_without_the_flag(tmp_path, sites):
    proxied, direct, proxy = sites
    folder = tmp_path / "boxes"
    folder.mkdir()
    point_profiles(folder, proxied.url, direct.url, gone=set())
    cfg = write_config(tmp_path / "cluster.yml", config_dict(**{"proxy.http": proxy.url}))
    result = invoke("doctor", "--config", str(cfg), "--out", str(tmp_path / "out"),
                    env={sources.BOX_DIRS_ENV: str(folder), doctor.FAKE_HYPERV_HOST_ENV: "1"})
    assert "online:" not in result.stdout
    assert proxied.requests == direct.requests == [] and [r for r in proxy.requests if r.get("method")] == []


def test_an_iso_whose_every_url_is_gone_fails_unless_a_local_copy_exists(tmp_path, sites, monkeypatch):
    proxied, direct, proxy = sites
    folder = tmp_path / "boxes"
    folder.mkdir()
    point_profiles(folder, proxied.url, direct.url, gone=set())
    monkeypatch.setattr(sources, "REPO", sources.Sources(box_folders=(folder,)))
    cfg = write_config(tmp_path / "cluster.yml", config_dict(**{"proxy.http": proxy.url}))
    cluster = Cluster.resolve(load(cfg))
    checks = {c.name: c for c in doctor.url_checks(cluster)}
    iso_check = checks["online: ISO URLs for ubuntu-1604"]
    assert not iso_check.ok and iso_check.required_for("build") and "superseded_url" in iso_check.fix
