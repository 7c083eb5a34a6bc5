"""Which variant of a multi-platform image a box runs: its platform, and Windows' build compatibility.

Its own module, beside k4w.infra.image_pull, so the box profiles (k4w.model.profiles.Profile.image_platform)
can name a platform without importing the registry client.
"""

from __future__ import annotations

from dataclasses import dataclass


# Windows Server releases whose container ABI is stable: a host of one runs images from the one before it
# up to its own build (containerd/platforms v1.0.0-rc.5, the version containerd v2.3.7's go.mod pins:
# platform_windows_compat.go compatLTSCReleases, ltsc2022 = 20348, ltsc2025 = 26100).
LTSC_BUILDS = (20348, 26100)


def windows_runs(host_build: int, os_version: str) -> bool:
    """Whether a Windows host of host_build runs an image whose platform says os_version ("10.0.20348.2700"),
    as containerd decides it (platform_windows_compat.go checkWindowsHostAndContainerCompat): before
    ltsc2022 only the same build; from it on, any build from the previous LTSC up to the host's."""
    parts = os_version.split(".")
    if len(parts) < 3 or parts[:2] != ["10", "0"] or not parts[2].isdigit():
        return False
    build = int(parts[2])
    if host_build < LTSC_BUILDS[0]:
        return build == host_build
    newest = max(i for i, ltsc in enumerate(LTSC_BUILDS) if host_build >= ltsc)
    return LTSC_BUILDS[max(newest - 1, 0)] <= build <= host_build


@dataclass(frozen=True)
class Platform:
    os: str
    architecture: str
    windows_build: int | None = None   # the Windows host's build (20348): which image variants run on it

    def __str__(self) -> str:
        return f"{self.os}/{self.architecture}" + (f" (build {self.windows_build})" if self.windows_build else "")

    def matches(self, described: dict) -> bool:
        if described.get("os") != self.os or described.get("architecture") != self.architecture:
            return False
        version = described.get("os.version")
        # An image that names no os.version runs on every build (Microsoft's HostProcess base image).
        return self.windows_build is None or not version or windows_runs(self.windows_build, version)


def describe(platform: dict) -> str:
    """A platform as an index or an image config states it: os/architecture and os.version when given."""
    return f"{platform.get('os', '?')}/{platform.get('architecture', '?')}" + (
        f" {platform['os.version']}" if platform.get("os.version") else "")
