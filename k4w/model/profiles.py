"""Box profiles: one YAML file per box in boxes/, pinning every version and source.

A profile is data. Templates and guest scripts read it; no version is typed anywhere else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from k4w.model import kubeadm_apis
from k4w.infra import sources
from k4w.infra.image_platform import Platform
from k4w.infra.errors import K4wError

# Keys every profile must carry, because config validation and rendering depend on them.
REQUIRED = ("name", "os_family", "node_os", "min_memory_mb", "supports_vxlan", "kubernetes")

# The container runtimes a profile may name under components:, in the order container_runtime looks for them.
RUNTIMES = ("containerd", "docker")
# Checksum keys a profile may carry for a component, strongest first: any one of them proves a download
# is the file we meant (docs/hyperv-host.md "Boxes": a download without one is refused). sha256_url is a checksum
# file published beside the download (only where a source shows it exists).
CHECKSUM_KEYS = ("sha256", "sha512", "sha256_url")


class Attr(dict):
    """A dict whose keys read as attributes, so templates can write box.docker.version."""

    def __getattr__(self, key: str) -> Any:
        try:
            value = self[key]
        except KeyError as exc:
            raise AttributeError(f"profile has no key '{key}'") from exc
        return value

    @classmethod
    def wrap(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return cls({k: cls.wrap(v) for k, v in value.items()})
        if isinstance(value, list):
            return [cls.wrap(v) for v in value]
        return value


@dataclass(frozen=True)
class Profile:
    name: str
    path: Path
    data: Attr

    @property
    def os_family(self) -> str:
        return self.data.os_family

    @property
    def is_windows(self) -> bool:
        return self.data.node_os == "windows"

    @property
    def kubernetes_version(self) -> str:
        """kubernetes.version as kubeadm's and the kubelet's own version numbers are compared: without
        a leading "v" (1.37.2). The one place that reads the key: kubeadm's kubernetesVersion is
        k4w.derive.cluster.Kube.version_tag, the minor k4w.derive.cluster.Kube.minor."""
        return str(self.data.kubernetes.version).removeprefix("v")

    @property
    def container_runtime(self) -> str:
        """The container runtime the box installs, by era: containerd when the profile pins it, else
        Docker (the 2018 stack, also for a profile that pins neither). The service that gets the
        build's proxy, the one the node services start after, the kubelet's cgroup driver's owner."""
        components = self.data.get("components") or {}
        return next((name for name in RUNTIMES if name in components), "docker")

    def imports_images(self, downloads_images: str) -> bool:
        """Whether the bake of this box takes its images from the build host's image cache (cluster.yml
        downloads.images: cache) rather than pulling them: the containerd-era boxes, Ubuntu and Windows
        (`ctr images import` of an OCI layout), and the Docker-era Ubuntu box (`docker load` of a
        docker-save archive). The Windows Server 1803 box still pulls: its Docker loads Windows layers,
        which no bake here can try."""
        return downloads_images == "cache" and (self.container_runtime == "containerd" or not self.is_windows)

    @property
    def image_platform(self) -> Platform:
        """The platform the box's runtime pulls images for: Windows with the box's build (guest.os_build,
        which picks the variant of a multi-build image); every box is amd64 (the profiles' downloads are)."""
        if self.is_windows:
            build = (self.data.get("guest") or {}).get("os_build")
            if not str(build or "").isdigit():
                raise K4wError(f"{self.path}: guest.os_build must be the Windows build number (e.g. 20348): it picks the "
                               "variant of each container image the box runs")
            return Platform("windows", "amd64", int(build))
        return Platform("linux", "amd64")

    @property
    def installer_kind(self) -> str | None:
        """installer.kind (e.g. preseed, autoinstall); None for a box with no installer (one that
        boots an installed image). An installer section without a usable kind is refused."""
        installer = self.data.get("installer")
        if installer is None:
            return None
        kind = installer.get("kind")
        if not isinstance(kind, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", kind):
            what = "is missing" if kind is None else f"is {kind!r}, not a folder name"
            raise K4wError(f"{self.path}: installer.kind {what}: name the installer its templates are for "
                           f"(a folder of templates/http/{self.os_family}/, e.g. preseed or autoinstall)")
        return kind

    @property
    def node_recipe(self) -> str | None:
        """The era's node recipe (profile key node_recipe), None for the family's seed recipe."""
        return self.data.get("node_recipe")

    @property
    def node_templates(self) -> str:
        """The folder under templates/nodes/ rendered for each node of this box: the family's
        (windows/) or, for a profile naming a node recipe, <family>-<recipe>/ (docs/architecture.md,
        "Node recipes")."""
        return f"{self.os_family}-{self.node_recipe}" if self.node_recipe else self.os_family


def available() -> list[str]:
    """Box names a user can pick: boxes/ only, never a test-only profile folder."""
    return sorted(p.stem for p in sources.REPO.boxes.glob("*.yml"))


def load(name: str) -> Profile:
    return _load(name, sources.REPO.box_dirs)


@lru_cache(maxsize=None)
def _load(name: str, box_dirs: tuple[Path, ...]) -> Profile:
    path = next((d / f"{name}.yml" for d in box_dirs if (d / f"{name}.yml").is_file()), None)
    if path is None:
        known = ", ".join(sorted({p.stem for d in box_dirs for p in d.glob("*.yml")})) or "none"
        raise K4wError(f"unknown box '{name}': no profile {box_dirs[0] / (name + '.yml')} (known boxes: {known})")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise K4wError(f"{path}: not valid YAML: {exc}") from exc
    missing = [k for k in REQUIRED if k not in (raw or {})]
    if missing:
        raise K4wError(f"{path}: missing keys {', '.join(missing)}")
    if raw["name"] != name:
        raise K4wError(f"{path}: 'name' is {raw['name']!r}, expected {name!r} (the file name)")
    if isinstance(raw["kubernetes"], dict):
        kubeadm_apis.check_profile(path, raw["kubernetes"])
    timeout = (raw.get("build") or {}).get("timeout_minutes")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise K4wError(f"{path}: build.timeout_minutes must be a positive number of minutes, not {timeout!r}")
    return Profile(name=name, path=path, data=Attr.wrap(raw))


# The whole `packer build` of one box, so a build that hangs (a VM that never answers WinRM or SSH)
# ends instead of blocking for ever. Used when a profile sets no build.timeout_minutes. Windows:
# the README estimates 1.5-3 h and winrm_timeout alone is 2 h. Ubuntu: ssh_timeout is 2 h, then
# the provisioning steps.
DEFAULT_BUILD_TIMEOUT_MINUTES = {"windows": 240, "linux": 180}


def build_timeout_minutes(profile: Profile) -> float:
    """The overall limit of one box build (build.timeout_minutes, else the default of its OS)."""
    value = (profile.data.get("build") or {}).get("timeout_minutes")
    return float(value) if value is not None else float(DEFAULT_BUILD_TIMEOUT_MINUTES[profile.data.node_os])
