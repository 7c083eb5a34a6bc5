"""The Docker era's image load (downloads.images: cache): lib.sh's k4w_load_images, run by bash.

The host side is k4w's, real: `invoke pin-images` pulls two images from the pinned distribution registry
v3.1.2 on 127.0.0.1 into the image cache, and `image_cache.stage` writes the docker-save archives for the
Docker-era Ubuntu box (served by tests/fakes/local_http.py, a stand-in for Packer's HTTP server).

`docker` here is a STAND-IN (no Docker engine runs on this machine): a script that loads an archive the
way moby's image/tarexport/load.go records it (the image ID is the sha256 of the Config member, the
RepoTags name it), and answers `docker image inspect --format {{.Id}}` and `docker image rm`. It checks the
script's logic only; the real `docker load` of these archives runs in the CI box's guest
(`invoke e2e --box debian-12-e2e --offline`, Debian's docker.io 20.10).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ci.e2e import registry as e2e_registry
from k4w.bake import commands, image_cache
from k4w.derive.cluster import Cluster
from k4w.derive.images import Needed
from k4w.infra.image_platform import Platform
from k4w.model import pins
from tests.fakes import local_http
from tests.helpers import config_dict, image_archive, write_config

from .conftest import ROOT

LIB = ROOT / "guest" / "ubuntu" / "lib.sh"
NAMES = ("registry.k8s.io/pause:3.1", "quay.io/coreos/flannel:v0.11.0-amd64")

STAND_IN = textwrap.dedent('''\
    #!{python}
    # STAND-IN for docker (tests/bake/ubuntu/test_docker_load_images.py): load, image inspect, image rm.
    import hashlib, json, os, sys, tarfile
    state = os.environ["STAND_IN_STATE"]
    images = json.load(open(state)) if os.path.exists(state) else {{}}
    args = sys.argv[1:]
    if args[:2] == ["load", "--input"]:
        with tarfile.open(args[2]) as tar:
            [item] = json.loads(tar.extractfile("manifest.json").read())
            config = tar.extractfile(item["Config"]).read()
        image_id = "sha256:" + hashlib.sha256(config).hexdigest()
        if os.environ.get("STAND_IN_OTHER_ID"):
            image_id = os.environ["STAND_IN_OTHER_ID"]
        images.update({{name: image_id for name in item["RepoTags"]}})
    elif args[:2] == ["image", "inspect"] and args[-1] in images:
        print(images[args[-1]])
    elif args[:2] == ["image", "rm"]:
        images.pop(args[-1], None)
    else:
        sys.exit(1)
    json.dump(images, open(state, "w"))
''')


@pytest.fixture
def staged(tmp_path, monkeypatch):
    """The two images pinned and cached by k4w, staged as docker-save archives for ubuntu-1604."""
    with e2e_registry.serving("127.0.0.1", tmp_path / "registry", upstreams=("registry.k8s.io", "quay.io")) as mirrors:
        for n, name in enumerate(NAMES):
            mirrors.push(name, image_archive(tmp_path, name, 32 * 1024, stem=f"image{n}"))
        data = config_dict(**{"registry": mirrors.registry_block(), "downloads.cache": str(tmp_path / "cache"),
                              "downloads.images": "cache"})
        # windows-1803 pulls its own images, so Docker there could not use these mirrors (config_rules).
        data["nodes"] = [node for node in data["nodes"] if node["box"] != "windows-1803"]
        config = write_config(tmp_path / "cluster.yml", data)
        monkeypatch.setattr(image_cache, "needed", lambda pairs: [
            Needed(name, Platform("linux", "amd64"), ("ubuntu-1604",),
                   pins.image_digests(pins.load(config), "linux/amd64").get(name)) for name in NAMES])
        commands.pin_images(Cluster.load(config))
    cluster = Cluster.load(config)
    archives = image_cache.stage(cluster, "ubuntu-1604", tmp_path / "media")
    return cluster, {path.name: path.read_bytes() for path in archives}, dict(mirrors.pushed)


@pytest.fixture
def docker(tmp_path):
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "docker"
    script.write_text(STAND_IN.format(python=sys.executable))
    script.chmod(0o755)
    return folder, tmp_path / "docker-images.json"


def load(docker, site, imports: str, root: Path, **extra) -> subprocess.CompletedProcess:
    folder, state = docker
    script = f'source "{LIB}"; K4W_STEP=04-kubernetes; k4w_load_images'
    env = {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}", "HOME": "/tmp", "K4W_IMAGE_IMPORTS": imports,
           "K4W_MEDIA_URL_PATH": "/", "PACKER_HTTP_ADDR": site.url.removeprefix("http://"), "K4W_ROOT": str(root),
           "STAND_IN_STATE": str(state), **extra}
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=300)


def test_each_image_is_loaded_once_and_recorded(staged, docker, tmp_path):
    cluster, archives, pushed = staged
    root = tmp_path / "guest"
    imports = " ".join(f"{name}@{pushed[name]}" for name in NAMES)
    with local_http.site({f"/{name}": data for name, data in archives.items()}) as site:
        res = load(docker, site, imports, root)
        assert res.returncode == 0, res.stdout + res.stderr
        assert res.stdout.count("loaded from the build host: manifest") == 2
        again = load(docker, site, imports, root)
        assert again.returncode == 0 and again.stdout.count("already loaded") == 2, again.stdout + again.stderr
        assert len(site.requests) == 2   # nothing copied the second time
    records = sorted(p.name for p in (root / "var" / "lib" / "k4w").iterdir())
    assert records == sorted(f"image-{pushed[n].split(':')[1]}.id" for n in NAMES)


def test_an_archive_without_the_pinned_manifest_is_not_loaded(staged, docker, tmp_path):
    cluster, archives, pushed = staged
    # The file served for flannel is the pause image's archive: a valid archive, not the pinned manifest.
    served = {f"/{image_cache.archive_name(pushed[NAMES[1]])}": archives[image_cache.archive_name(pushed[NAMES[0]])]}
    with local_http.site(served) as site:
        res = load(docker, site, f"{NAMES[1]}@{pushed[NAMES[1]]}", tmp_path / "guest")
    assert res.returncode != 0
    assert f"the archive of {NAMES[1]} from the build host does not hold the pinned manifest {pushed[NAMES[1]]}: not loaded" in res.stderr
    assert not docker[1].exists(), "docker load ran"


def test_an_image_whose_id_is_not_the_pinned_config_is_removed(staged, docker, tmp_path):
    cluster, archives, pushed = staged
    other = "sha256:" + "0" * 64
    with local_http.site({f"/{name}": data for name, data in archives.items()}) as site:
        res = load(docker, site, f"{NAMES[0]}@{pushed[NAMES[0]]}", tmp_path / "guest", STAND_IN_OTHER_ID=other)
    assert res.returncode != 0
    assert f"image {NAMES[0]} from the build host is {other} after docker load, not the config" in res.stderr
    assert NAMES[0] not in docker[1].read_text()
    assert not (tmp_path / "guest" / "var" / "lib" / "k4w").exists()
