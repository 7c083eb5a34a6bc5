"""`invoke fetch` through the real CLI, against the local stand-ins of tests/fakes/local_http.py (a
file site with Range support and a proxy that demands credentials); never the real internet.

The box profiles are copies of boxes/ whose component URLs point at the stand-in site (through
K4W_BOX_DIRS), and every run names its own cache folder, so no test touches ~/.cache.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil

import yaml

from k4w.infra import sources
from k4w.infra.sources import REPO_ROOT as ROOT
from tests.fakes import local_http
from tests.helpers import config_dict, invoke, start_invoke, write_config

# Distinct bodies a little over one read chunk (1 MiB), so a file takes several reads and progress.
BODIES = {
    ("ubuntu-1604", "kubernetes"): b"linux node tarball " * 70_000,
    ("ubuntu-1604", "cni"): b"cni linux plugins " * 60_000,
    ("windows-1803", "kubernetes"): b"windows node tarball " * 65_000,
    ("windows-1803", "docker"): b"docker static zip " * 62_000,
    ("windows-1803", "cni"): b"cni windows plugins " * 58_000,
    ("windows-1803", "flannel"): b"MZ flanneld.exe stand-in " * 50_000,
    ("windows-1803", "nssm"): b"nssm zip " * 120_000,
}
SHA256 = {key: hashlib.sha256(body).hexdigest() for key, body in BODIES.items()}
FILES = len(BODIES)
TOTAL = sum(len(b) for b in BODIES.values())


def _path(box: str, component: str) -> str:
    """Where the stand-in site serves a component: one folder per box, like two upstream hosts."""
    return f"/{box}/{component}/{component}-{box}.bin"


def _site_files() -> dict[str, bytes]:
    return {_path(box, comp): body for (box, comp), body in BODIES.items()}


def _profiles(tmp_path, base: str, *, flannel_pinned: bool = True, wrong: tuple[str, str] | None = None):
    """boxes/ copied with every component URL under base; checksums of the stand-in bodies
    replace the real ones (flannel keeps none unless flannel_pinned); wrong gets a bad sha256."""
    folder = tmp_path / "boxes"
    shutil.copytree(ROOT / "boxes", folder)
    for box in ("ubuntu-1604", "windows-1803"):
        data = yaml.safe_load((folder / f"{box}.yml").read_text())
        for comp, spec in data["components"].items():
            if not spec.get("url"):
                continue
            spec.pop("sha512", None)
            spec["url"] = base + _path(box, comp)
            spec["sha256"] = SHA256[(box, comp)] if (comp != "flannel" or flannel_pinned) else None
            if (box, comp) == wrong:
                spec["sha256"] = "0" * 64
        (folder / f"{box}.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    return {sources.BOX_DIRS_ENV: str(folder)}


def _config(tmp_path, **overrides):
    return str(write_config(tmp_path / "cluster.yml", config_dict(**overrides)))


def _fetch(config, cache, env, *more):
    return invoke("fetch", "--config", config, "--cache", str(cache), *more, env=env)


def _cached_files(cache):
    return sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*") if p.is_file())


def test_first_run_downloads_everything_and_a_second_run_downloads_nothing(tmp_path):
    cache = tmp_path / "cache"
    with local_http.site(_site_files()) as site:
        env = _profiles(tmp_path, site.url)
        config = _config(tmp_path)
        first = _fetch(config, cache, env)
        served = len(site.requests)
        second = _fetch(config, cache, env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert f"fetched {TOTAL} bytes ({FILES} files downloaded, 0 already cached)" in first.stdout
    assert served == FILES
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"fetched 0 bytes (0 files downloaded, {FILES} already cached)" in second.stdout
    assert len(site.requests) == served  # not one request more
    assert re.search(r"windows-1803\s+nssm\s+nssm-windows-1803\.bin\s+1\.1 MB\s+cached\s+0", second.stdout), second.stdout
    # The layout docs/internals.md promises: <component>/<version>/<file name from the URL>.
    assert (cache / "nssm" / "2.24" / "nssm-windows-1803.bin").read_bytes() == BODIES[("windows-1803", "nssm")]
    index = json.loads((cache / "index.json").read_text())
    entry = index["files"]["nssm/2.24/nssm-windows-1803.bin"]
    assert entry["sha256"] == SHA256[("windows-1803", "nssm")] and entry["size"] == len(BODIES[("windows-1803", "nssm")])
    assert entry["url"] == site.url + _path("windows-1803", "nssm") and entry["verified_at"]
    assert len(index["files"]) == FILES and not [f for f in _cached_files(cache) if f.endswith(".part")]


def test_fetch_goes_through_the_configured_proxy_with_its_credentials(tmp_path):
    cache = tmp_path / "cache"
    # The site is on 127.0.0.2: k4w's NO_PROXY holds 127.0.0.1 (and the cluster's ranges), not it.
    with local_http.site(_site_files(), host="127.0.0.2") as site, local_http.proxy("alice", "S3cret") as proxy:
        env = _profiles(tmp_path, site.url)
        result = _fetch(_config(tmp_path, **{"proxy.http": proxy.url}), cache, env, "--box", "ubuntu-1604")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fetched" in result.stdout and "(2 files downloaded, 0 already cached)" in result.stdout
    assert len(proxy.requests) == 2 and all(r["authorized"] for r in proxy.requests)
    assert "S3cret" not in result.stdout + result.stderr


def test_a_changed_cached_file_is_hashed_again_and_a_corrupt_one_fetched_again(tmp_path):
    cache = tmp_path / "cache"
    with local_http.site(_site_files()) as site:
        env = _profiles(tmp_path, site.url)
        config = _config(tmp_path)
        assert _fetch(config, cache, env).returncode == 0
        corrupt = cache / "docker" / "17.09.0-ce" / "docker-windows-1803.bin"
        corrupt.write_bytes(b"X" * corrupt.stat().st_size)  # same size, new mtime: the manifest no longer vouches
        touched = cache / "nssm" / "2.24" / "nssm-windows-1803.bin"
        os.utime(touched, ns=(touched.stat().st_atime_ns, touched.stat().st_mtime_ns + 10**9))
        before = len(site.requests)
        again = _fetch(config, cache, env)
    assert again.returncode == 0, again.stdout + again.stderr
    docker = BODIES[("windows-1803", "docker")]
    assert f"fetched {len(docker)} bytes (1 files downloaded, {FILES - 1} already cached)" in again.stdout
    assert [r["path"] for r in site.requests[before:]] == [_path("windows-1803", "docker")]
    assert corrupt.read_bytes() == docker
    # The touched file was hashed again, matched, and is recorded with its new mtime.
    entry = json.loads((cache / "index.json").read_text())["files"]["nssm/2.24/nssm-windows-1803.bin"]
    assert entry["mtime_ns"] == touched.stat().st_mtime_ns


def test_a_cut_download_resumes_with_a_range_request(tmp_path):
    cache = tmp_path / "cache"
    with local_http.site(_site_files()) as site:
        env = _profiles(tmp_path, site.url)
        config = _config(tmp_path)
        site.fail_after = 300_000  # the first response served is cut after 300 kB
        cut = _fetch(config, cache, env, "--box", "ubuntu-1604")
        parts = {p: p.stat().st_size for p in cache.rglob("*.part")}
        final_after_cut = [p.with_suffix("").exists() for p in parts]
        resumed = _fetch(config, cache, env, "--box", "ubuntu-1604")
    assert cut.returncode == 1
    assert "run again to resume" in cut.stderr and "1 of 2 component(s) are not in the cache" in cut.stderr
    assert list(parts.values()) == [300_000] and final_after_cut == [False]
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    parts = list(parts)
    name = parts[0].name.removesuffix(".part")
    ranged = [r for r in site.requests if r["range"]]
    assert len(ranged) == 1 and ranged[0]["range"] == "bytes=300000-" and ranged[0]["path"].endswith("/" + name)
    body = next(b for (box, comp), b in BODIES.items() if _path(box, comp).endswith("/" + name))
    assert f"fetched {len(body) - 300_000} bytes (1 files downloaded, 1 already cached)" in resumed.stdout
    assert not list(cache.rglob("*.part"))


def test_a_wrong_checksum_leaves_nothing_names_url_and_both_checksums_and_the_rest_downloads(tmp_path):
    cache = tmp_path / "cache"
    with local_http.site(_site_files()) as site:
        env = _profiles(tmp_path, "https://downloads.example", wrong=("windows-1803", "cni"))
        # A mirror with credentials: the message must name the URL without them.
        mirror = site.url.replace("http://", "http://mirroruser:M1rrorPass@") + "/mirror"
        site.files = {f"/mirror/downloads.example{path}": body for path, body in _site_files().items()}
        result = _fetch(_config(tmp_path, **{"downloads.mirror": mirror}), cache, env)
    assert result.returncode == 1
    output = " ".join((result.stdout + result.stderr).split())
    url = f"http://***@127.0.0.1:{site.url.rsplit(':', 1)[1]}/mirror/downloads.example{_path('windows-1803', 'cni')}"
    assert f"{url}: sha256 mismatch: expected {'0' * 64}, got {SHA256[('windows-1803', 'cni')]}; the file was deleted" in output
    assert "M1rrorPass" not in output
    credentials = "Basic " + base64.b64encode(b"mirroruser:M1rrorPass").decode()
    assert site.requests and all(r["authorization"] == credentials for r in site.requests)
    assert not (cache / "cni" / "0.8.7").exists() or not list((cache / "cni" / "0.8.7").iterdir())
    assert f"({FILES - 1} files downloaded, 0 already cached)" in result.stdout
    assert "cni/0.8.7/cni-windows-1803.bin" not in json.loads((cache / "index.json").read_text())["files"]


def test_a_component_without_checksum_is_refused_with_the_pin_command_and_the_others_download(tmp_path):
    cache = tmp_path / "cache"
    with local_http.site(_site_files()) as site:
        env = _profiles(tmp_path, site.url, flannel_pinned=False)
        config = _config(tmp_path)
        result = _fetch(config, cache, env)
    assert result.returncode == 1
    assert f"run: invoke pin windows-1803 flannel --config {config}" in " ".join(result.stderr.split())
    assert f"({FILES - 1} files downloaded, 0 already cached)" in result.stdout
    assert not any("flannel" in r["path"] for r in site.requests) and not (cache / "flannel").exists()


def test_the_mirror_gets_host_and_path_of_each_url_and_the_cache_keeps_the_original_url(tmp_path):
    cache = tmp_path / "cache"
    with local_http.site({}) as site:
        env = _profiles(tmp_path, "https://dl.example.org:8443")
        site.files = {f"/artifactory/k4w/dl.example.org:8443{path}": body for path, body in _site_files().items()}
        result = _fetch(_config(tmp_path, **{"downloads.mirror": site.url + "/artifactory/k4w/"}), cache, env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(r["path"] for r in site.requests) == sorted(f"/artifactory/k4w/dl.example.org:8443{p}" for p in _site_files())
    entry = json.loads((cache / "index.json").read_text())["files"]["cni/0.6.0/cni-ubuntu-1604.bin"]
    assert entry["url"] == "https://dl.example.org:8443" + _path("ubuntu-1604", "cni")
    assert entry["source"] == f"{site.url}/artifactory/k4w/dl.example.org:8443{_path('ubuntu-1604', 'cni')}"


def test_dry_run_downloads_nothing_and_writes_nothing(tmp_path):
    cache = tmp_path / "cache"
    with local_http.site(_site_files()) as site:
        env = _profiles(tmp_path, site.url)
        result = _fetch(_config(tmp_path), cache, env, "--dry-run")
    assert result.returncode == 0, result.stdout + result.stderr
    assert site.requests == [] and not cache.exists()
    assert f"would download {site.url}{_path('windows-1803', 'nssm')} -> {cache}/nssm/2.24/nssm-windows-1803.bin" in result.stdout


def test_downloads_run_in_parallel(tmp_path):
    cache = tmp_path / "cache"
    with local_http.site(_site_files()) as site:
        site.delay = 0.3  # each response waits, so downloads that run together overlap on the site
        env = _profiles(tmp_path, site.url)
        result = _fetch(_config(tmp_path), cache, env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert 1 < site.max_concurrent <= 4, site.max_concurrent  # k4w.bake.fetch.WORKERS


def test_pin_places_the_file_in_the_cache_so_fetch_does_not_download_it_again(tmp_path):
    cache = tmp_path / "cache"
    with local_http.site(_site_files()) as site:
        env = {**_profiles(tmp_path, site.url, flannel_pinned=False), "K4W_CACHE": str(cache)}
        config = _config(tmp_path)
        pinned = invoke("pin", "windows-1803", "flannel", "--config", config, env=env)
        before = len(site.requests)
        fetched = invoke("fetch", "--config", config, env=env)
    assert pinned.returncode == 0, pinned.stdout + pinned.stderr
    flannel = cache / "flannel" / "0.11.0" / "flannel-windows-1803.bin"
    assert f"cached  {flannel}" in pinned.stdout and flannel.read_bytes() == BODIES[("windows-1803", "flannel")]
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr
    assert f"({FILES - 1} files downloaded, 1 already cached)" in fetched.stdout
    assert not any("flannel" in r["path"] for r in site.requests[before:])


def test_doctor_reports_each_component_of_the_cache_as_warnings(tmp_path):
    cache = tmp_path / "cache"
    with local_http.site(_site_files()) as site:
        env = {**_profiles(tmp_path, site.url, flannel_pinned=False), "K4W_CACHE": str(cache)}
        config = _config(tmp_path)
        assert invoke("pin", "windows-1803", "flannel", "--config", config, env=env).returncode == 0
        assert _fetch(config, cache, env, "--box", "ubuntu-1604").returncode == 0
        (cache / "cni" / "0.6.0" / "cni-ubuntu-1604.bin").write_bytes(b"changed")
        served = len(site.requests)
        doctor = invoke("doctor", "--config", config, "--out", str(tmp_path / "out"), env=env)
    lines = {m[1]: m[0] + " " + m[2] for m in re.findall(r"^\s+(\w+)\s+cache: (\S+ \w+)\s+(.*)$", doctor.stdout, re.M)}
    assert lines["ubuntu-1604 kubernetes"].startswith("ok cached and verified"), lines
    assert lines["ubuntu-1604 cni"].startswith("warn cached but changed since it was verified"), lines
    assert lines["windows-1803 docker"].startswith("warn missing"), lines
    assert lines["windows-1803 flannel"].startswith("ok cached and verified"), lines
    assert "5 of 7 cached and verified" not in doctor.stdout and "2 of 7 cached and verified" in doctor.stdout
    assert "still to download: 5 files of unknown size" in doctor.stdout
    assert "FAIL  cache" not in doctor.stdout and "FAIL  component cache" not in doctor.stdout
    assert len(site.requests) == served  # doctor stays offline


def test_the_cache_folder_is_the_option_else_k4w_cache_else_downloads_cache_relative_to_the_config(tmp_path):
    config = _config(tmp_path, **{"downloads.cache": "relcache"})

    def root(*more, env=None):
        result = invoke("fetch", "--config", config, "--box", "ubuntu-1604", "--dry-run", *more, env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        return re.search(r"component cache (\S+)", result.stdout)[1]

    assert root() == str(tmp_path / "relcache")
    assert root(env={"K4W_CACHE": str(tmp_path / "env")}) == str(tmp_path / "env")
    assert root("--cache", str(tmp_path / "opt"), env={"K4W_CACHE": str(tmp_path / "env")}) == str(tmp_path / "opt")
    assert not any((tmp_path / name).exists() for name in ("relcache", "env", "opt"))


def test_a_bad_downloads_key_is_refused_naming_field_and_line(tmp_path):
    for key, value, says in (("downloads.mirror", "ftp://mirror.corp/k4w", "must be an http:// or https:// base URL"),
                             ("downloads.mirror", "https://art.corp/k4w?x=1", "no query or fragment"),
                             ("downloads.mirror", "https://u:p#1@art.corp/k4w", "percent-encode"),
                             ("downloads.cache", "a\nb", "must be a folder path on one line")):
        config = _config(tmp_path, **{key: value})
        result = invoke("fetch", "--config", config, "--dry-run")
        output = " ".join(result.stderr.split())
        assert result.returncode == 1 and re.search(rf"line \d+: {re.escape(key)}: .*{re.escape(says)}", output), (key, value, output)


def test_a_checksum_file_beside_the_download_is_read_and_checked(tmp_path):
    cache = tmp_path / "cache"
    cni = _path("ubuntu-1604", "cni")
    files = {**_site_files(), cni + ".sha256": f"{SHA256[('ubuntu-1604', 'cni')]}  cni-ubuntu-1604.bin\n".encode()}
    with local_http.site(files) as site:
        env = _profiles(tmp_path, site.url)
        profile = tmp_path / "boxes" / "ubuntu-1604.yml"
        data = yaml.safe_load(profile.read_text())
        data["components"]["cni"].update(sha256=None, sha256_url=site.url + cni + ".sha256")
        profile.write_text(yaml.safe_dump(data, sort_keys=False))
        config = _config(tmp_path)
        first = _fetch(config, cache, env, "--box", "ubuntu-1604")
        site.files[cni + ".sha256"] = b"0" * 64 + b"  cni-ubuntu-1604.bin\n"  # a changed checksum file is not read again...
        second = _fetch(config, cache, env, "--box", "ubuntu-1604")
    assert first.returncode == 0, first.stdout + first.stderr
    assert [r["path"] for r in site.requests].count(cni + ".sha256") == 1
    # ...because the manifest records the file verified against that checksum URL and the file is unchanged.
    assert second.returncode == 0 and "(0 files downloaded, 2 already cached)" in second.stdout
    entry = json.loads((cache / "index.json").read_text())["files"]["cni/0.6.0/cni-ubuntu-1604.bin"]
    assert entry["checked_against"].startswith(f"sha256_url {site.url}{cni}.sha256")


def test_two_fetches_resuming_the_same_partial_file_take_turns_and_the_file_is_whole(tmp_path):
    cache = tmp_path / "cache"
    with local_http.site(_site_files()) as site:
        env = _profiles(tmp_path, site.url)
        config = _config(tmp_path)
        # Learn where the file lives, then leave a partial download of it, as a Ctrl-C would.
        assert _fetch(config, cache, env, "--box", "ubuntu-1604").returncode == 0
        final = next(p for p in cache.rglob("*") if p.is_file() and p.name == "kubernetes-ubuntu-1604.bin")
        body = BODIES[("ubuntu-1604", "kubernetes")]
        final.unlink()
        (cache / "index.json").unlink()
        final.with_name(final.name + ".part").write_bytes(body[:500_000])
        site.delay = 3.0  # both requests are in flight together unless one waits for the other
        argv = ["fetch", "--config", config, "--cache", str(cache), "--box", "ubuntu-1604"]
        first, second = start_invoke(*argv, env=env), start_invoke(*argv, env=env)
        outputs = [p.communicate(timeout=240)[0] for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outputs
    assert final.read_bytes() == body  # not two appended tails
    assert any("another k4w process is downloading" in out for out in outputs), outputs
    assert not list(cache.rglob("*.part")) and not list(cache.rglob("*.lock"))


def test_a_partial_file_that_is_already_whole_is_hashed_and_used(tmp_path):
    cache = tmp_path / "cache"
    with local_http.site(_site_files()) as site:
        env = _profiles(tmp_path, site.url)
        config = _config(tmp_path)
        assert _fetch(config, cache, env, "--box", "ubuntu-1604").returncode == 0
        final = next(p for p in cache.rglob("*") if p.is_file() and p.name == "kubernetes-ubuntu-1604.bin")
        final.rename(final.with_name(final.name + ".part"))  # Ctrl-C after the last block, before the rename
        before = len(site.requests)
        result = _fetch(config, cache, env, "--box", "ubuntu-1604")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [r["range"] for r in site.requests[before:]] == [f"bytes={len(BODIES[('ubuntu-1604', 'kubernetes')])}-"]
    assert final.read_bytes() == BODIES[("ubuntu-1604", "kubernetes")]
    assert not list(cache.rglob("*.part"))
