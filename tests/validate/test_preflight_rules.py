"""kubeadm 1.11's Windows SystemVerification, as vendored from v1.11.10, against the Windows boxes:
build 17134 passes (so cluster-join.ps1 needs no --ignore-preflight-errors), and a box it would
refuse is named by `invoke validate`."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import yaml

from k4w.model import profiles
from k4w.derive.cluster import Cluster
from k4w.validate import preflight_rules
from tests.helpers import ROOT, invoke

FACTS = yaml.safe_load(preflight_rules.facts_path("1.11.10").read_text(encoding="utf-8"))


def _box(**changes):
    prof = profiles.load("windows-1803")
    data = copy.deepcopy(dict(prof.data))
    for dotted, value in changes.items():
        section, key = dotted.split(".")
        data[section][key] = value
    return dataclasses.replace(prof, data=profiles.Attr.wrap(data))


def test_the_facts_name_their_source_at_the_tag():
    assert FACTS["source"]["tag"] == "v1.11.10" and len(FACTS["source"]["commit"]) == 40
    assert "test/e2e_node/system/types_windows.go (DefaultSysSpec, GetKernelReleaseVersion)" in FACTS["source"]["files"]


def test_build_17134_with_docker_17_09_passes_system_verification():
    assert preflight_rules.check_box(_box(), FACTS) == []
    checked, problems = preflight_rules.check(Cluster.load(ROOT / "cluster.yml"))
    assert checked == ["windows-1803.yml"] and problems == []


@pytest.mark.parametrize("build,passes", [(14393, True), (17134, True), (17763, True), (14300, False), (10586, False)])
def test_the_kernel_spec_accepts_server_2016_and_later_only(build, passes):
    assert (preflight_rules.check_box(_box(**{"guest.os_build": build}), FACTS) == []) is passes


@pytest.mark.parametrize("docker,passes", [("17.03.2-ee-7", True), ("18.09.1-ce", True), ("1.13.1", False)])
def test_an_old_docker_fails_and_a_newer_one_only_warns(docker, passes):
    box = _box()
    box.data["components"]["docker"]["version"] = docker
    assert (preflight_rules.check_box(box, FACTS) == []) is passes


def test_a_kubeadm_without_vendored_preflight_facts_is_refused(monkeypatch):
    monkeypatch.setattr(preflight_rules, "facts_path", lambda version: ROOT / "nonexistent.yml")
    _, problems = preflight_rules.check(Cluster.load(ROOT / "cluster.yml"))
    assert problems and "no facts for kubeadm 1.11.10's Windows preflight" in problems[0]


def test_validate_reports_the_preflight_check(tmp_path):
    result = invoke("validate", "--dry-run", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "kubeadm-<minor>-windows-preflight.yml" in result.stdout
