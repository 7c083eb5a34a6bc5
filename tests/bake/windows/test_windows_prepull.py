"""Every image a rendered manifest runs on a Windows node is in that node's box already: the
box's image step pulls it at bake, so a new node's first Ready needs no registry (and no minutes of
download). The list is read from the step itself (the K4W_* variables it pulls, mapped to profile
keys by k4w/derive/step_env.py), so adding an image to a manifest and forgetting the box fails here."""

from __future__ import annotations

import re

import pytest
import yaml

from k4w.derive import step_env as derive_steps
from k4w import render
from k4w.derive.cluster import Cluster
from k4w.infra.sources import REPO_ROOT as ROOT
from tests.helpers import config_dict, modern_config, write_config

BAKE = ROOT / "guest" / "windows" / "bake"
# The image step of each recipe (boxes/windows-*.yml provision lists): the containerd recipe pulls
# through the CRI; the seed recipe pulls with docker and builds its pause image FROM nanoserver.
IMAGE_STEPS = ("04-prepull-images.ps1", "04-container-images.ps1")
_READ = re.compile(r"Get-K4wEnv -Name '(K4W_[A-Z_]+)'")
# The variables that name an image (derive_steps.PROFILE_VARIABLES keys images.*, *.pause_image, hostprocess.image).
IMAGE_KEYS = re.compile(r"^(images\.\w+|kubernetes\.pause_image|hostprocess\.image)$")


def _pulled_keys(step_text: str) -> set[str]:
    """Profile keys of the images a step pulls or builds: the image variables it reads."""
    keys = set()
    for name in _READ.findall(step_text):
        variable = derive_steps.PROFILE_VARIABLES.get(name)
        if variable is not None and IMAGE_KEYS.match(variable.key):
            keys.add(variable.key)
    return keys


def _value(profile, dotted: str):
    data = profile.data
    for part in dotted.split("."):
        data = (data or {}).get(part)
    return data


def prepulled(profile, steps: dict[str, str]) -> set[str]:
    """The images a box has once baked: what its image step reads, from its profile."""
    ran = [name for name in profile.data["provision"] if name in steps]
    assert len(ran) == 1, f"{profile.name}: runs {ran} of the image steps {sorted(steps)}"
    return {str(_value(profile, key)) for key in _pulled_keys(steps[ran[0]]) if _value(profile, key)}


def _windows_images(out) -> set[str]:
    """Images of every pod (or pod template) in the rendered manifests that selects Windows nodes."""
    found = set()
    for path in sorted((out / "manifests").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            spec = doc.get("spec") or {}
            pod = spec if doc.get("kind") == "Pod" else ((spec.get("template") or {}).get("spec"))
            if not pod or "windows" not in (pod.get("nodeSelector") or {}).values():
                continue
            found |= {c["image"] for c in (pod.get("containers") or []) + (pod.get("initContainers") or [])}
    return found


def missing(cluster: Cluster, out, steps: dict[str, str]) -> list[str]:
    wanted = _windows_images(out)
    problems = []
    for box, profile in sorted(cluster.profiles.items()):
        if profile.is_windows:
            absent = sorted(wanted - prepulled(profile, steps))
            problems += [f"{box} does not pre-pull {image}" for image in absent]
    return problems


STEPS = {name: (BAKE / name).read_text() for name in IMAGE_STEPS}
CLUSTERS = {
    "seed (windows-1803)": config_dict(),
    "windows-2022": modern_config(),
    "windows-2025": modern_config(**{"nodes.2.box": "windows-2025"}),
}


@pytest.fixture(scope="module", params=sorted(CLUSTERS))
def rendered(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prepull")
    cluster = Cluster.load(write_config(tmp / "cluster.yml", CLUSTERS[request.param]))
    out = tmp / "out"
    render.render(cluster, out)
    return cluster, out


def test_every_windows_image_of_the_manifests_is_in_the_box(rendered):
    cluster, out = rendered
    images = _windows_images(out)
    assert images, "no Windows pod found in the rendered manifests"
    assert missing(cluster, out, STEPS) == []


def test_the_containerd_boxes_pre_pull_the_hostprocess_base_image(rendered):
    cluster, out = rendered
    for profile in cluster.profiles.values():
        if profile.is_windows and profile.data.get("hostprocess"):
            assert profile.data["hostprocess"]["image"] in prepulled(profile, STEPS)


def test_a_manifest_image_the_box_does_not_pull_is_found(rendered):
    # The image step as it was: without the HostProcess image, a containerd node's first Flannel pod
    # (and so its first Ready) needed the registry. The seed era's manifests have no HostProcess pod.
    cluster, out = rendered
    old = "    (Get-K4wEnv -Name 'K4W_PAUSE_IMAGE'),\n    (Get-K4wEnv -Name 'K4W_IMAGE_HOSTPROCESS')\n"
    assert old in STEPS["04-prepull-images.ps1"]
    planted = {**STEPS, "04-prepull-images.ps1": STEPS["04-prepull-images.ps1"].replace(old, "    (Get-K4wEnv -Name 'K4W_PAUSE_IMAGE')\n")}
    problems = missing(cluster, out, planted)
    hostprocess = [p for p in cluster.profiles.values() if p.is_windows and p.data.get("hostprocess")]
    if hostprocess:
        assert problems == [f"{p.name} does not pre-pull {p.data['hostprocess']['image']}" for p in hostprocess]
    else:
        assert problems == []
        # A nanoserver pod on a seed node: its image step builds pause FROM nanoserver and pulls it.
        assert cluster.windows_nanoserver_image in _windows_images(out)


def test_the_import_takes_the_archive_the_build_staged_on_the_cd():
    # The step finds image-<first hex digits of the pinned digest>.tar on the build CD; the build writes
    # image_cache.archive_name(digest). Both must name the same file, or the import stops the bake.
    from k4w.bake import image_cache

    text = (BAKE / "04-prepull-images.ps1").read_text()
    start, length = map(int, re.search(r'"image-\$\(\$digest\.Substring\((\d+), (\d+)\)\)\.tar"', text).groups())
    for digest in ("sha256:" + "0123456789abcdef" * 4, "sha256:" + "f" * 64):
        assert f"image-{digest[start:start + length]}.tar" == image_cache.archive_name(digest)
