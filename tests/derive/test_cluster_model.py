"""The Cluster a command resolves once: what it holds, and that rendering takes every value from it."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from k4w.model import profiles
from k4w import render
from k4w.derive.cluster import Cluster
from k4w.infra.errors import K4wError
from tests.helpers import ROOT


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    return Cluster.load(ROOT / "cluster.yml")


def test_holds_the_profiles_of_the_boxes_in_use_in_first_use_order(cluster):
    assert list(cluster.profiles) == ["ubuntu-1604", "windows-1803"]
    assert cluster.profiles["windows-1803"] == profiles.load("windows-1803")


def test_kubernetes_era_is_the_masters_profile(cluster):
    pinned = profiles.load(cluster.config.master.box).data.kubernetes
    assert (cluster.kube.version, cluster.kube.kubeadm_api) == (pinned.version, pinned.kubeadm_api)


def test_is_read_only(cluster):
    with pytest.raises(dataclasses.FrozenInstanceError):
        cluster.network = None
    with pytest.raises(TypeError):
        cluster.profiles["ubuntu-1604"] = None


def test_a_box_no_node_uses_is_refused_naming_the_boxes_in_use(cluster):
    with pytest.raises(K4wError, match="box debian-12 is not used .* ubuntu-1604, windows-1803"):
        cluster.profile("debian-12")


def test_render_takes_derived_values_from_the_cluster_not_the_config(cluster, tmp_path):
    """Derived once: a render reads cluster.network, it does not derive it again from the config."""
    other = dataclasses.replace(cluster, network=dataclasses.replace(cluster.network, dns_ip="10.96.0.53"))
    files = render.render_files(other, tmp_path / "out")
    kubelet = files["nodes/worker-win/kubelet.args"].split()
    assert "--cluster-dns=10.96.0.53" in kubelet
    kubeadm = yaml.safe_load(files["kubeadm/kubeadm-config.yaml"])
    assert kubeadm["kubeletConfiguration"]["baseConfig"]["clusterDNS"] == ["10.96.0.53"]
