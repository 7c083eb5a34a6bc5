"""Deselection by profile `skip_checks` and by stage: every reason stated, no typo accepted."""

from __future__ import annotations

from pathlib import Path

import pytest

from k4w.infra.errors import K4wError
from k4w.verify.selection import Check, deselection_reasons, skip_checks
from k4w.model.profiles import Attr, Profile

CHECKS = [Check("swap"), Check("kubernetes_binaries"), Check("vagrant_insecure_key", "box"), Check("kubelet", "node")]


def _profile(skips) -> Profile:
    return Profile("ubuntu-ci", Path("packer/ubuntu-ci.yml"), Attr.wrap({"skip_checks": skips}))


def test_profile_skips_and_stage_give_reasons():
    reasons = deselection_reasons(CHECKS, {"kubernetes_binaries": "dl.k8s.io unreachable from CI"}, "box", "ubuntu-ci.yml skip_checks")
    assert reasons == [
        None,
        "ubuntu-ci.yml skip_checks: dl.k8s.io unreachable from CI",
        None,
        "stage box: only true once cluster-up has joined the node",
    ]
    node = deselection_reasons(CHECKS, {}, "node", "x")
    assert node[2] == "stage node: only true on a freshly built box, before cluster-up joins it" and node[3] is None


def test_unknown_check_or_stage_is_an_error():
    with pytest.raises(K4wError, match="names no check of this spec: kubernetes_binarys"):
        deselection_reasons(CHECKS, {"kubernetes_binarys": "typo"}, "box", "p")
    with pytest.raises(K4wError, match="unknown stage"):
        deselection_reasons(CHECKS, {}, "joined", "p")


def test_skip_checks_need_a_reason():
    assert skip_checks(_profile({"kubernetes_binaries": " CI "})) == {"kubernetes_binaries": "CI"}
    assert skip_checks(_profile(None)) == {}
    with pytest.raises(K4wError, match="needs a reason"):
        skip_checks(_profile({"kubernetes_binaries": ""}))
    with pytest.raises(K4wError, match="must map"):
        skip_checks(_profile(["kubernetes_binaries"]))
