"""Every Windows box's container images are for the Windows build it installs.

Process isolation (the only isolation a box without nested virtualization has) runs a container
only on the build its image was made for: an ltsc2022 servercore on a 26100 host, or a pause image
whose manifest list has no 26100 entry, gives a node that joins and then never starts a pod. Only
a Windows host shows that, an hour into a bake; this rule shows it at `invoke validate`.

facts/windows-images.yml maps each build to its image tags and each published pause image to the
builds its manifest list serves, and each build to the NAME prefix of its media's WIM images (the
box's iso.image_name, which Setup selects), with their sources. The pause image is held against it where the
box pulls it (the containerd recipe's 04-prepull-images.ps1); the seed recipe builds its own FROM
images.nanoserver (04-container-images.ps1), so there the nanoserver tag decides.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Collection
from functools import lru_cache
from pathlib import Path

import yaml

from k4w.derive import registry
from k4w.derive.cluster import Cluster
from k4w.model.profiles import Profile
from k4w.validate.result import Result
from k4w.validate.result import from_check

FACTS = Path(__file__).resolve().parent / "facts" / "windows-images.yml"
# The guest step that pulls kubernetes.pause_image from its registry (the other era builds it).
PULLS_PAUSE = "04-prepull-images.ps1"


@lru_cache(maxsize=None)
def facts() -> dict:
    return yaml.safe_load(FACTS.read_text(encoding="utf-8"))


def _tag(reference: str) -> str:
    """The tag of an image reference (the part after the last ':' of its last path element)."""
    last = reference.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else "latest"


def check_box(profile: Profile, upstream: Callable[[str], str] = str) -> list[str]:
    """Problems of one Windows box profile (empty: every image is for its build). upstream maps an
    image the cluster's registry mirror renamed back to its upstream name (k4w.derive.registry.upstream_image):
    the facts record the upstream's manifest lists, which the mirror serves unchanged."""
    where = profile.path.name
    build = int(profile.data.guest.os_build)
    known = facts()
    tags = known["tags"].get(build)
    if tags is None:
        return [f"{where}: guest.os_build {build} is a Windows build k4w/validate/facts/windows-images.yml has no image tags "
                f"for (known: {', '.join(str(b) for b in known['tags'])}): add its tags with their source"]
    problems = []
    image_name = (profile.data.get("iso") or {}).get("image_name")
    prefix = known.get("wim_name_prefix", {}).get(build)
    if image_name and prefix and not str(image_name).startswith(prefix):
        problems.append(f"{where}: iso.image_name '{image_name}' is not an image of build {build}'s media, whose "
                        f"install.wim NAMEs begin '{prefix}': Setup would find no such image")
    for name, reference in sorted((profile.data.get("images") or {}).items()):
        if _tag(reference) not in tags:
            problems.append(f"{where}: images.{name} is {reference}, but guest.os_build {build} runs process-isolated "
                            f"images tagged {' or '.join(tags)} only: its pods would never start")
    if PULLS_PAUSE in (profile.data.get("provision") or []):
        pause = upstream(profile.data.kubernetes.pause_image)
        builds = known["pause"].get(pause)
        if builds is None:
            problems.append(f"{where}: kubernetes.pause_image {pause} is not a pause image whose Windows builds "
                            f"k4w/validate/facts/windows-images.yml records: add it with the source of its manifest list")
        elif build not in builds:
            problems.append(f"{where}: kubernetes.pause_image {pause} has no Windows {build} entry in its manifest list "
                            f"(it serves {', '.join(str(b) for b in builds)}): containerd on this box cannot pull a sandbox "
                            f"it can run; use a pause release that lists {build} ({_releases_for(build) or 'none recorded'})")
    return problems


def _releases_for(build: int) -> str:
    return ", ".join(image for image, builds in facts()["pause"].items() if build in builds)


def check(cluster: Cluster) -> tuple[list[str], list[str]]:
    """(Windows box profiles checked, problems)."""
    checked, problems = [], []
    for profile in cluster.profiles.values():
        if not profile.is_windows:
            continue
        checked.append(profile.path.name)
        problems += check_box(profile, lambda image: registry.upstream_image(image, cluster.config))
    return checked, problems


# ------------------------------------------------------------------ the validator (k4w.validate.VALIDATORS)


def run(cluster: Cluster, out: Path) -> Result:
    return from_check("Windows container images", "image tags, WIM NAMEs and pause manifest entries per Windows build", check(cluster))


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return ["# in this process: each Windows box's images, iso.image_name and pulled pause image against its "
            "guest.os_build (k4w/validate/facts/windows-images.yml)"]
