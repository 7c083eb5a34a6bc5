"""k4w's node marks (k4w/derive/node_marks.py): every rendered cluster passes k4w/validate/node_mark_rules.py, and
each of its rules fires on a planted defect: a Windows pod that does not tolerate the Windows taint, a k4w
DaemonSet that selects every Windows node, a join configuration without the label or the taint, a seed-era
kubelet.args without them. The test workloads of cluster-test's Windows pods tolerate the taint too."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from k4w.derive import node_marks
from k4w import render
from k4w.derive import join_config
from k4w.derive.cluster import Cluster
from k4w.model.config import parse
from k4w.validate import manifest_rules, node_mark_rules
from k4w.verify import workloads as wl
from tests.helpers import ROOT

DAEMONSETS = "manifests/windows-containerd/windows-node-daemonsets.yaml"
DEMO = "manifests/demo-win-webserver.yaml"
EXAMPLES = ["cluster.yml", "examples/cluster-modern.yml", "examples/cluster-existing.yml"]


def rendered(example: str, tmp_path: Path) -> tuple[Cluster, Path]:
    cluster = Cluster.resolve(parse((ROOT / example).read_text()))
    render.render(cluster, tmp_path)
    return cluster, tmp_path


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_rendered_cluster_carries_the_marks(example, tmp_path):
    cluster, out = rendered(example, tmp_path)
    assert node_mark_rules.check(out, cluster) == []
    assert manifest_rules.check_manifests(out, cluster) == []


def test_the_windows_join_registers_the_label_and_the_taint(tmp_path):
    cluster, _ = rendered("examples/cluster-modern.yml", tmp_path)
    text = join_config.for_worker("windows-2022", "192.0.2.1:6443", join_config.SAMPLE_TOKEN, join_config.SAMPLE_HASH,
                                  "worker-win", "a1b2c3d4e5f6", timeouts=None)
    registration = yaml.safe_load(text)["nodeRegistration"]
    assert registration["taints"] == [{"key": "os", "value": "windows", "effect": "NoSchedule"}]
    assert registration["kubeletExtraArgs"] == [{"name": "node-labels", "value": "k4w.io/node=true,k4w.io/installation=a1b2c3d4e5f6"}]
    linux = yaml.safe_load(join_config.for_worker("ubuntu-2404", "192.0.2.1:6443", join_config.SAMPLE_TOKEN,
                                                  join_config.SAMPLE_HASH, "worker-1", "a1b2c3d4e5f6", timeouts=None))["nodeRegistration"]
    assert "taints" not in linux and linux["kubeletExtraArgs"][0]["value"].startswith("k4w.io/node=true")


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


def test_a_windows_pod_without_the_toleration_is_refused(tmp_path):
    _, out = rendered("examples/cluster-modern.yml", tmp_path)
    demo = _docs(out / DEMO)
    demo[0]["spec"]["template"]["spec"].pop("tolerations")
    assert node_mark_rules.check_pod_specs(DEMO, demo) == [
        f"{DEMO}: Deployment win-webserver selects Windows nodes but does not tolerate k4w's Windows taint "
        "os=windows:NoSchedule (k4w/derive/node_marks.py WINDOWS_TOLERATION)"]
    # A toleration of another value or effect is no toleration of it either.
    demo[0]["spec"]["template"]["spec"]["tolerations"] = [{"key": "os", "operator": "Equal", "value": "linux", "effect": "NoSchedule"},
                                                           {"key": "os", "operator": "Exists", "effect": "NoExecute"}]
    assert len(node_mark_rules.check_pod_specs(DEMO, demo)) == 1


def test_a_k4w_daemonset_selecting_every_windows_node_is_refused(tmp_path):
    _, out = rendered("examples/cluster-modern.yml", tmp_path)
    docs = _docs(out / DAEMONSETS)
    for doc in docs:
        if doc["kind"] == "DaemonSet":
            del doc["spec"]["template"]["spec"]["nodeSelector"]["k4w.io/node"]
    said = node_mark_rules.check_pod_specs(DAEMONSETS, docs)
    assert said == [f"{DAEMONSETS}: DaemonSet {name} selects every Windows node: its nodeSelector must also hold "
                    "k4w.io/node: \"true\", so that it stays off Windows nodes k4w did not join"
                    for name in ("k4w-flannel-windows", "k4w-kube-proxy-windows")]


def test_a_join_configuration_without_the_marks_is_refused(tmp_path, monkeypatch):
    cluster, _ = rendered("examples/cluster-modern.yml", tmp_path)
    real = join_config.document

    def unmarked(*args, **kwargs):
        doc = real(*args, **kwargs)
        doc["nodeRegistration"].pop("taints", None)
        doc["nodeRegistration"].pop("kubeletExtraArgs", None)
        return doc

    monkeypatch.setattr(join_config, "document", unmarked)
    said = node_mark_rules.check_join_configs(cluster)
    assert "join configuration of worker-win (windows-2025): a Windows worker must register with the taint " \
           "os=windows:NoSchedule (nodeRegistration.taints)" in said
    assert any(line.startswith("join configuration of worker-linux (ubuntu-2604): the kubelet's --node-labels") for line in said)


def test_a_seed_era_kubelet_without_the_marks_is_refused(tmp_path):
    _, out = rendered("cluster.yml", tmp_path)
    args = out / "nodes" / "worker-win" / "kubelet.args"
    args.write_text("\n".join(line for line in args.read_text().splitlines()
                              if not line.startswith(("--node-labels", "--register-with-taints"))) + "\n")
    assert node_mark_rules.check_seed_kubelet_args(args.parent) == [
        "nodes/worker-win/kubelet.args: --node-labels must hold k4w.io/node=true, is None",
        "nodes/worker-win/kubelet.args: --register-with-taints must hold os=windows:NoSchedule, is None"]


def test_cluster_tests_windows_pods_tolerate_the_taint():
    demo = wl.Demo(Path("x"), "win-webserver", "default", {"app": "win-webserver"}, 80)
    pods = [o for o in wl.objects("kubernetes.io/os", "mcr.microsoft.com/windows/servercore:ltsc2022", demo) if o["kind"] == "Pod"]
    windows = [p for p in pods if p["spec"]["nodeSelector"] == {"kubernetes.io/os": "windows"}]
    assert windows and node_mark_rules.check_pod_specs("workloads", copy.deepcopy(pods)) == []
    assert all(node_marks.tolerates(p["spec"]) for p in windows)
