"""The build media: how each verified download reaches its guest (k4w/media/build_media.py), and the
refusals that keep a guest from ever needing the internet or an unpinned digest."""

from __future__ import annotations

import copy
import dataclasses
import os

import pytest

from k4w.media import build_media
from k4w.model import config, profiles
from k4w.derive.cluster import Cluster
from k4w.derive.step_env import step_env
from tests.bake.conftest import edited_boxes
from tests.helpers import ROOT, invoke


def _cluster() -> Cluster:
    return Cluster.resolve(config.load(ROOT / "cluster.yml"))


def test_every_download_of_every_box_has_a_media_name_its_guest_is_told():
    cluster = _cluster()
    for box, profile in cluster.profiles.items():
        names = build_media.box_files(profile)
        env = step_env(profile, cluster).env
        assert names and all(env[f"K4W_{c.upper()}_FILE"] == name for c, name in names.items()), box
        assert not any(k.endswith("_URL") and k.startswith(("K4W_KUBERNETES", "K4W_CNI", "K4W_FLANNEL")) for k in env), box
        if profile.is_windows:
            assert build_media.cd_name_problems(profile) == []
            assert all(len(n) <= build_media.JOLIET_NAME_MAX for n in names.values())


@pytest.mark.parametrize("box", sorted(p.stem for p in (ROOT / "boxes").glob("windows-*.yml")))
def test_every_windows_profiles_media_names_fit_the_cd(box):
    # Every profile, not only cluster.yml's: windows-2022's Update Catalog file name has 70
    # characters, which its media_file shortens.
    assert build_media.cd_name_problems(profiles.load(box)) == []


def test_a_name_too_long_for_the_cd_is_refused_naming_the_component():
    profile = profiles.load("windows-1803")
    data = copy.deepcopy(dict(profile.data))
    data["components"]["nssm"]["url"] = "https://example.org/" + "x" * 60 + ".zip"
    edited = dataclasses.replace(profile, data=type(profile.data).wrap(data))
    [problem] = build_media.cd_name_problems(edited)
    assert "components.nssm" in problem and "64" in problem and "nssm-xxxx" in problem


def test_staging_keeps_exactly_the_boxs_files_and_never_writes_through_a_link(tmp_path):
    profile = profiles.load("ubuntu-1604")
    cached = {}
    for component, name in build_media.box_files(profile).items():
        cached[component] = tmp_path / "cache" / name
        cached[component].parent.mkdir(parents=True, exist_ok=True)
        cached[component].write_bytes(name.encode())
    out = tmp_path / "out"
    staged = build_media.stage(out, profile, cached)
    folder = build_media.folder(out, "ubuntu-1604")
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in staged) == sorted(build_media.box_files(profile).values())
    assert all(p.read_bytes() == p.name.encode() for p in staged)
    # Hard links where the volume allows: no second copy of hundreds of MB.
    assert all(os.stat(p).st_ino == os.stat(cached[c]).st_ino for c, p in zip(build_media.box_files(profile), staged))


def test_a_component_checked_only_against_a_published_file_is_refused_before_the_build(tmp_path):
    """The guest checks a digest known at render time; a sha256_url is only read by the host."""
    pinned = "    sha512: a656209b3d3fc154cd3be9810c140a73bf3abebbc8b0d9b5cf47dcbd804209b9c61eb89c6e1b8e0a65a4c393b72c45d77eacebaee0ccaae61d4712d1c7602fe0\n"
    env = edited_boxes(tmp_path, "ubuntu-1604", pinned,
                       "    sha256_url: https://dl.k8s.io/v1.11.10/kubernetes-node-linux-amd64.tar.gz.sha256\n")
    result = invoke("build-ubuntu", "--dry-run", "--out", str(tmp_path / "out"), env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 1 and "Traceback" not in output
    assert "components.kubernetes of ubuntu-1604 is checked only against https://dl.k8s.io/v1.11.10/" in output
    assert "invoke pin ubuntu-1604 kubernetes" in output


def test_packer_serves_the_answer_file_folder_only_to_an_installer_that_fetches_it(tmp_path):
    from k4w.media import build_media
    from k4w.model import profiles

    preseed, autoinstall = profiles.load("ubuntu-1604"), profiles.load("ubuntu-2404")
    # debian-installer fetches preseed.cfg from beside the build media.
    assert build_media.served_folder(tmp_path, preseed) == tmp_path / "http" / "ubuntu-1604"
    assert build_media.url_path(preseed) == "/components/"
    # autoinstall's seed (with the proxy's credentials) is on the cidata CD: only the media are served.
    assert build_media.served_folder(tmp_path, autoinstall) == tmp_path / "http" / "ubuntu-2404" / "components"
    assert build_media.url_path(autoinstall) == "/"


def test_the_build_cd_refuses_a_file_of_4_gib_and_a_name_longer_than_joliets(tmp_path):
    # Sparse files: the size is what counts, and what xorriso refused at 4 GiB (build_media.CD_FILE_MAX).
    fits, too_big = tmp_path / "fits.tar", tmp_path / "too-big.tar"
    for path, size in ((fits, 4 * 1024 ** 3 - 1), (too_big, 4 * 1024 ** 3)):
        with open(path, "wb") as sparse:
            sparse.truncate(size)
    long_name = tmp_path / ("x" * (build_media.JOLIET_NAME_MAX + 1))
    long_name.write_bytes(b"")
    problems = build_media.cd_file_problems([fits, too_big, long_name])
    assert problems == [f"too-big.tar: {4 * 1024 ** 3} bytes; a file on the build CD is below 4 GiB (4294967295 bytes at most)",
                        f"{long_name.name}: 65 characters; a CD's Joliet names hold 64"]


def test_every_image_archive_name_fits_the_build_cd(tmp_path):
    from k4w.bake import image_cache

    for digest in ("sha256:" + "0" * 64, "sha256:" + "f" * 64):
        archive = tmp_path / image_cache.archive_name(digest)
        archive.write_bytes(b"")
        assert build_media.cd_file_problems([archive]) == []
