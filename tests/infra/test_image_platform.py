"""Which manifest of an image index a box gets: the one its runtime would pick on the box's host.

containerd v2.3.7 picks with containerd/platforms v1.0.0-rc.5 (platform_windows_compat.go): a Windows
host before ltsc2022 runs only images of its own build; from ltsc2022 on, images from the previous LTSC
up to its own build; of those, the highest os.version wins. A cache that picked another variant would
hand the box an image its containerd never pulls, or one that does not start on its build.
"""

from __future__ import annotations

import json

import pytest

from k4w.infra import image_pull
from k4w.infra.image_platform import Platform, windows_runs
from k4w.infra.image_pull import Fetched, RegistryError, select


def index(*platforms: dict) -> Fetched:
    manifests = [{"mediaType": image_pull.OCI_MANIFEST, "digest": f"sha256:{n:064x}", "size": 1, "platform": p}
                 for n, p in enumerate(platforms, 1)]
    data = json.dumps({"schemaVersion": 2, "manifests": manifests}).encode()
    return Fetched(image_pull.OCI_INDEX, image_pull.sha256(data), data)


def win(version: str) -> dict:
    return {"os": "windows", "architecture": "amd64", "os.version": version}


# registry.k8s.io/pause:3.10.2's Windows variants (k4w/validate/facts/windows-images.yml: 17763, 20348, 26100).
PAUSE = index({"os": "linux", "architecture": "amd64"}, win("10.0.17763.6893"), win("10.0.20348.3207"), win("10.0.26100.3194"))


@pytest.mark.parametrize("host, picked", [(17763, 2), (20348, 3), (26100, 4)])
def test_each_windows_host_gets_the_variant_containerd_picks(host, picked):
    assert select(PAUSE, Platform("windows", "amd64", host), "pause") == f"sha256:{picked:064x}"


def test_linux_gets_the_linux_variant():
    assert select(PAUSE, Platform("linux", "amd64"), "pause") == f"sha256:{1:064x}"


def test_a_host_older_than_ltsc2022_runs_only_its_own_build():
    with pytest.raises(RegistryError, match=r"no manifest for windows/amd64 \(build 17134\) in its index \(it has: "
                                            r"linux/amd64, windows/amd64 10\.0\.17763\.6893, windows/amd64 10\.0\.20348"):
        select(PAUSE, Platform("windows", "amd64", 17134), "pause")


@pytest.mark.parametrize("host, version, runs", [
    (20348, "10.0.17763.1", False),   # ltsc2019 on ltsc2022: no stable ABI before 2022
    (20348, "10.0.20348.1", True),
    (20348, "10.0.26100.1", False),   # newer than the host
    (26100, "10.0.20348.9", True),    # the previous LTSC on ltsc2025
    (26100, "10.0.17763.1", False),
    (26200, "10.0.20348.1", True),    # a 2025-generation host past the newest LTSC: the floor stays 20348
    (17134, "10.0.17134.1", True),
    (17134, "10.0.17763.1", False),
    (20348, "6.3.9600", False),
])
def test_windows_build_compatibility_follows_containerd(host, version, runs):
    assert windows_runs(host, version) is runs


def test_an_image_with_no_os_version_runs_on_every_build():
    """Microsoft's HostProcess base image names no os.version."""
    hostprocess = index({"os": "windows", "architecture": "amd64"})
    for build in (17134, 20348, 26100):
        assert select(hostprocess, Platform("windows", "amd64", build), "hostprocess") == f"sha256:{1:064x}"
