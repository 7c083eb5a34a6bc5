"""Every profile checksum names its source; a checksum file upstream never published is refused."""

from __future__ import annotations

import shutil

import pytest

import yaml

from k4w.model import profiles
from k4w.derive.cluster import Cluster
from k4w.infra.sources import REPO_ROOT as ROOT
from k4w.validate import checksum_rules
from tests.helpers import config_dict, use_sources, write_config


def _cluster_with(tmp_path, monkeypatch, box: str, change) -> Cluster:
    folder = tmp_path / "boxes"
    shutil.copytree(ROOT / "boxes", folder)
    data = yaml.safe_load((folder / f"{box}.yml").read_text())
    change(data)
    (folder / f"{box}.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    use_sources(monkeypatch, box_folders=(folder,))
    profiles._load.cache_clear()
    return Cluster.load(write_config(tmp_path / "cluster.yml", config_dict()))


def test_the_shipped_profiles_pass(tmp_path):
    checked, problems = checksum_rules.check(Cluster.load(write_config(tmp_path / "cluster.yml", config_dict())))
    assert problems == [] and checked == ["ubuntu-1604.yml", "windows-1803.yml"]


def test_a_dl_k8s_io_sha256_file_for_1_11_is_refused(tmp_path, monkeypatch):
    # The defect a review found: dl.k8s.io published no .sha256 beside 1.11 downloads.
    def old_defect(data):
        data["components"]["kubernetes"] = {
            "version": "1.11.10", "url": "https://dl.k8s.io/v1.11.10/kubernetes-node-windows-amd64.tar.gz",
            "sha256_url": "https://dl.k8s.io/v1.11.10/kubernetes-node-windows-amd64.tar.gz.sha256",
            "checksum_source": "assumed"}

    _, problems = checksum_rules.check(_cluster_with(tmp_path, monkeypatch, "windows-1803", old_defect))
    assert problems == ["windows-1803.yml: components.kubernetes.sha256_url https://dl.k8s.io/v1.11.10/kubernetes-node-windows-amd64.tar.gz.sha256 "
                        "is not a checksum file upstream is known to publish (k4w/validate/facts/published-checksums.yml); "
                        "pin the value with its source instead"]


def test_a_checksum_without_a_source_is_refused(tmp_path, monkeypatch):
    _, problems = checksum_rules.check(_cluster_with(tmp_path, monkeypatch, "ubuntu-1604",
                                                     lambda d: d["components"]["cni"].pop("checksum_source")))
    assert problems == ["ubuntu-1604.yml: components.cni has a checksum that names no source (add components.cni.checksum_source)"]


@pytest.mark.parametrize("box", ["windows-2025", "ubuntu-2604"])
def test_the_new_profiles_pass_and_an_iso_checksum_without_its_source_is_refused(tmp_path, monkeypatch, box):
    modern = ROOT / "examples" / "cluster-modern.yml"
    checked, problems = checksum_rules.check(Cluster.load(modern))
    assert problems == [] and f"{box}.yml" in checked
    folder = tmp_path / "boxes"
    shutil.copytree(ROOT / "boxes", folder)
    data = yaml.safe_load((folder / f"{box}.yml").read_text())
    del data["iso"]["sha256_source"]
    (folder / f"{box}.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    use_sources(monkeypatch, box_folders=(folder,))
    profiles._load.cache_clear()
    _, problems = checksum_rules.check(Cluster.load(modern))
    assert problems == [f"{box}.yml: iso.sha256 names no source (add iso.sha256_source)"]
