"""boxes/ubuntu-1604.yml: one consistent version matrix, from sources that still exist."""

from __future__ import annotations

import re

import yaml

from k4w.model import profiles

from .conftest import PROFILE

DATA = yaml.safe_load(PROFILE.read_text())


def test_the_loader_accepts_the_profile():
    profile = profiles.load("ubuntu-1604")
    assert profile.os_family == "ubuntu" and not profile.is_windows


def test_kubernetes_binaries_are_the_cluster_version_from_the_node_tarball():
    version = DATA["kubernetes"]["version"]
    component = DATA["components"]["kubernetes"]
    assert component["version"] == version
    assert component["url"] == f"https://dl.k8s.io/v{version}/kubernetes-node-linux-amd64.tar.gz"
    # dl.k8s.io publishes no .sha256 for 1.11: the sha512 comes from CHANGELOG-1.11.md.
    assert re.fullmatch(r"[0-9a-f]{128}", component["sha512"]) and "sha256_url" not in component
    assert not {"kubeadm", "kubelet", "kubectl"} & set(DATA["components"])


def test_docker_is_validated_for_kubernetes_1_11_and_pinned_exactly():
    docker = DATA["components"]["docker"]
    assert DATA["kubernetes"]["version"].startswith("1.11.")
    assert docker["version"].startswith("17.03.")  # validated: 1.11.2-1.13.1 and 17.03.x
    assert docker["package_version"].startswith(docker["version"]) and docker["apt_suite"] == "xenial"
    assert docker["cgroup_driver"] in ("cgroupfs", "systemd")


def test_cni_is_the_version_kubeadm_1_11_expects():
    cni = DATA["components"]["cni"]
    assert cni["version"] == "0.6.0" and cni["url"].endswith(f"cni-plugins-amd64-v{cni['version']}.tgz")


def test_iso_is_the_final_xenial_server_release_with_its_published_checksum():
    iso = DATA["iso"]
    assert iso["name"] == "ubuntu-16.04.7-server-amd64.iso" and iso["url"].endswith("/" + iso["name"])
    assert re.fullmatch(r"[0-9a-f]{64}", iso["sha256"])


def test_images_come_from_registry_k8s_io():
    kube = DATA["kubernetes"]
    assert kube["image_repository"] == "registry.k8s.io"
    assert kube["pause_image"].startswith(kube["image_repository"] + "/")


def test_provision_list_is_numbered_in_order():
    steps = DATA["provision"]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    assert all(re.fullmatch(r"\d\d-[a-z0-9-]+\.sh", s) for s in steps)
