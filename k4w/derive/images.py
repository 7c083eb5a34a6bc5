"""Every container image a box needs, and the platform it is needed for: derived once, here.

A box pulls (and its nodes run) kubeadm's images on Linux (what `kubeadm config images list` names for
the profile's version and imageRepository: facts/kubeadm-images.yml, held against the real kubeadm by
tests/derive/test_registry_mirrors.py), the pause image, Flannel's images, the Windows base images and
the HostProcess base image. The names are the ones the box uses after k4w.derive.registry.apply (a
Docker box names its docker.io mirror); which registry serves each name is k4w.derive.registry's.

Read by the bake's pre-pull environment, `invoke fetch --images` (the host image cache) and
`invoke validate` (every name must be one its upstream publishes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from k4w.infra.image_platform import Platform
from k4w.model.config import Config
from k4w.model.profiles import Profile

KUBEADM_IMAGES = Path(__file__).parent / "facts" / "kubeadm-images.yml"


@dataclass(frozen=True)
class Needed:
    name: str                  # as the box pulls it: registry/repository:tag or @digest
    platform: Platform         # the variant the box's runtime picks from an index
    boxes: tuple[str, ...]     # the boxes that need it, in config order
    pinned: str | None = None  # the manifest digest k4w-pins.yml records for it (`invoke pin-images`)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.platform})"


@lru_cache(maxsize=None)
def _kubeadm_facts() -> dict:
    return yaml.safe_load(KUBEADM_IMAGES.read_text(encoding="utf-8"))["kubeadm"]


def kubeadm_images(version: str, repository: str) -> list[str]:
    """What `kubeadm config images list` names for a Kubernetes version and an imageRepository."""
    minor = ".".join(str(version).split(".")[:2])
    spec = _kubeadm_facts().get(minor)
    if spec is None:
        raise KeyError(f"kubeadm {minor} is not in {KUBEADM_IMAGES.name}: add how it names its images, with the source")
    subpath = spec["dns_subpath_under_default"]
    dns = f"{subpath}/" if subpath and repository == spec["default_repository"] else ""
    return [f"{repository}/{template.format(version=version, dns=dns)}" for template in spec["images"]]


def box_images(profile: Profile) -> list[str]:
    """Every image a box pulls or names for its pods: kubeadm's list (Linux boxes run kubeadm init or
    join and pre-pull it), the pause image, Flannel's images, the Windows base and HostProcess images."""
    data = profile.data
    kube = data.get("kubernetes") or {}
    names = []
    if not profile.is_windows and kube.get("version"):
        names += kubeadm_images(profile.kubernetes_version, str(kube.get("image_repository") or "registry.k8s.io"))
    names += [str(kube[key]) for key in ("pause_image", "flannel_image", "flannel_cni_plugin_image") if kube.get(key)]
    names += [str(image) for image in (data.get("images") or {}).values() if image]
    hostprocess = (data.get("hostprocess") or {}).get("image")
    return list(dict.fromkeys(names + ([str(hostprocess)] if hostprocess else [])))


def imported(cfg: Config, profile: Profile) -> bool:
    """Whether the bake of this box imports its images from the build host (Profile.imports_images)."""
    return profile.imports_images(cfg.downloads.images)


def needed(profiles: Iterable[tuple[str, Profile]]) -> list[Needed]:
    """One entry per (image, platform) over the given (box, profile) pairs, naming every box that needs it."""
    found: dict[tuple[str, Platform], list[str]] = {}
    pinned: dict[tuple[str, Platform], str] = {}
    for box, profile in profiles:
        wanted = profile.image_platform
        digests = profile.data.get("image_digests") or {}
        for name in box_images(profile):
            found.setdefault((name, wanted), []).append(box)
            if digests.get(name):
                pinned[(name, wanted)] = str(digests[name])
    return [Needed(name, where, tuple(boxes), pinned.get((name, where))) for (name, where), boxes in found.items()]
