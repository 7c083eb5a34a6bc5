"""Each Windows node's cni.conf speaks a cniVersion its pinned plugins accept (facts read at the
tags): 1.0.0 on the containerd recipe, 0.2.0 on the seed recipe whose 2018 win-overlay and
win-bridge stop at 0.3.0; a version a plugin refuses is named by `invoke validate`."""

from __future__ import annotations

import json

import pytest

from k4w.derive.cluster import Cluster
from k4w.validate import cni_rules
from tests.helpers import MODERN_ENV, invoke, modern_config, write_config


def _render(tmp_path, modern: bool):
    cfg = write_config(tmp_path / "cluster.yml", modern_config()) if modern else None
    args = ["render", "--out", str(tmp_path / "out")] + (["--config", str(cfg)] if cfg else [])
    result = invoke(*args, env=MODERN_ENV if modern else None)
    assert result.returncode == 0, result.stdout + result.stderr
    return tmp_path / "out"


@pytest.mark.parametrize("modern,version", [(False, "0.2.0"), (True, "1.0.0")])
def test_rendered_windows_cni_config_uses_a_version_its_plugins_accept(tmp_path, monkeypatch, modern, version):
    out = _render(tmp_path, modern)
    if modern:
        monkeypatch.setenv("K4W_BOX_DIRS", MODERN_ENV["K4W_BOX_DIRS"])
    cluster = Cluster.load(tmp_path / "cluster.yml" if modern else "cluster.yml")
    checked, problems = cni_rules.check(cluster, out)
    assert checked == ["nodes/worker-win/cni.conf"] and problems == []
    assert json.loads((out / "nodes" / "worker-win" / "cni.conf").read_text())["cniVersion"] == version


SEED = {"cni": {"version": "0.8.7"}}
MODERN = {"cni": {"version": "1.9.1"}, "flannel_cni": {"version": "1.9.1-flannel1"}}


@pytest.mark.parametrize("components,delegate,version,refused_by", [
    (SEED, "win-overlay", "1.0.0", "win-overlay of containernetworking/plugins@v0.8.7"),
    (SEED, "win-bridge", "0.3.1", "win-bridge of containernetworking/plugins@v0.8.7"),
    (MODERN, "win-overlay", "1.2.0", "flannel of flannel-io/cni-plugin@v1.9.1-flannel1"),
])
def test_a_version_a_pinned_plugin_refuses_is_named(components, delegate, version, refused_by):
    conf = {"cniVersion": version, "type": "flannel", "delegate": {"type": delegate}}
    problems = cni_rules.check_conf(conf, components, "cni.conf")
    assert any(refused_by in p for p in problems), problems


def test_a_plugin_release_without_facts_is_refused():
    problems = cni_rules.check_conf({"cniVersion": "1.0.0", "type": "flannel", "delegate": {"type": "win-overlay"}},
                                    {"cni": {"version": "1.8.0"}}, "cni.conf")
    assert problems and all("no facts for CNI plugin" in p for p in problems)


def test_linux_and_windows_run_one_flannel_cni_plugin_release(tmp_path, monkeypatch):
    import dataclasses

    monkeypatch.setenv("K4W_BOX_DIRS", MODERN_ENV["K4W_BOX_DIRS"])
    cluster = Cluster.load(write_config(tmp_path / "cluster.yml", modern_config()))
    assert cluster.kube.flannel_cni_plugin_image.endswith(":v1.9.1-flannel1")
    assert cni_rules.flannel_plugin_releases(cluster) == []
    planted = dataclasses.replace(cluster.kube, flannel_cni_plugin_image="ghcr.io/flannel-io/flannel-cni-plugin:v1.9.1-flannel3")
    problems = cni_rules.flannel_plugin_releases(dataclasses.replace(cluster, kube=planted))
    assert len(problems) == 1 and "windows-2022.yml: components.flannel_cni is '1.9.1-flannel1'" in problems[0]
