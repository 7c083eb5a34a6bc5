"""kube-proxy's mode is explicit on the containerd era, and one kube-proxy 1.37 accepts on each OS."""

from __future__ import annotations

import shutil

import pytest
import yaml

from k4w.infra import sources
from k4w.derive.cluster import Cluster
from k4w.render import render_files, write_atomically
from k4w.infra.sources import REPO_ROOT as ROOT
from k4w.validate import proxy_mode_rules
from tests.helpers import invoke

DAEMONSETS = "manifests/windows-containerd/windows-node-daemonsets.yaml"
# kube-proxy runs on Windows as a HostProcess DaemonSet: its arguments are this ConfigMap key.
WINDOWS_ARGS = f"{DAEMONSETS} ConfigMap kube-proxy.args"


@pytest.fixture
def modern(tmp_path):
    cluster = Cluster.load(ROOT / "examples" / "cluster-modern.yml")
    out = tmp_path / "out"
    write_atomically(render_files(cluster, out), out)
    return cluster, out


def _windows_args(out):
    docs = [d for d in yaml.safe_load_all((out / DAEMONSETS).read_text()) if d]
    return docs, next(d for d in docs if d["kind"] == "ConfigMap")


def _proxy_doc(out):
    docs = list(yaml.safe_load_all((out / "kubeadm" / "kubeadm-config.yaml").read_text()))
    return docs, next(d for d in docs if d["kind"] == "KubeProxyConfiguration")


def test_the_modern_stack_sets_iptables_on_linux_and_kernelspace_on_windows(modern):
    cluster, out = modern
    _, proxy = _proxy_doc(out)
    assert proxy["mode"] == "iptables"
    assert "--proxy-mode=kernelspace" in _windows_args(out)[1]["data"]["kube-proxy.args"].splitlines()
    assert not (out / "nodes" / "worker-win" / "kube-proxy.args").exists()
    checked, problems = proxy_mode_rules.check(cluster, out)
    assert problems == []
    assert checked == ["kubeadm/kubeadm-config.yaml (kube-proxy mode)", f"{WINDOWS_ARGS} (kube-proxy mode)"]


@pytest.mark.parametrize("mode,problem", [
    (None, "kubeadm/kubeadm-config.yaml KubeProxyConfiguration: no mode; kube-proxy 1.37.2 would pick its own default"),
    ("ipvs", "kubeadm/kubeadm-config.yaml KubeProxyConfiguration.mode: 'ipvs' is not a mode kube-proxy 1.37.2 accepts on "
             "Linux without a feature gate (iptables, nftables)"),
    ("kernelspace", "KubeProxyConfiguration.mode: 'kernelspace' is not a mode kube-proxy 1.37.2 accepts on Linux"),
])
def test_a_linux_mode_left_out_or_not_accepted_is_refused(modern, mode, problem):
    cluster, out = modern
    docs, proxy = _proxy_doc(out)
    proxy.pop("mode")
    if mode:
        proxy["mode"] = mode
    (out / "kubeadm" / "kubeadm-config.yaml").write_text(yaml.safe_dump_all(docs))
    _, problems = proxy_mode_rules.check(cluster, out)
    assert len(problems) == 1 and problem in problems[0], problems


@pytest.mark.parametrize("edit,problem", [
    (lambda lines: [l for l in lines if not l.startswith("--proxy-mode")],
     f"{WINDOWS_ARGS}: --proxy-mode is given 0 times; kube-proxy's mode must be set exactly once"),
    (lambda lines: [("--proxy-mode=iptables" if l.startswith("--proxy-mode") else l) for l in lines],
     f"{WINDOWS_ARGS}: --proxy-mode=iptables is not a mode kube-proxy 1.37.2 accepts on Windows (kernelspace)"),
])
def test_a_windows_mode_left_out_or_not_accepted_is_refused(modern, edit, problem):
    cluster, out = modern
    docs, configmap = _windows_args(out)
    configmap["data"]["kube-proxy.args"] = "\n".join(edit(configmap["data"]["kube-proxy.args"].splitlines()))
    (out / DAEMONSETS).write_text(yaml.safe_dump_all(docs))
    _, problems = proxy_mode_rules.check(cluster, out)
    assert problems == [problem]


def test_windows_daemonsets_not_rendered_are_refused(modern):
    """A containerd-era Windows node whose kube-proxy arguments are nowhere cannot have its mode checked."""
    cluster, out = modern
    (out / DAEMONSETS).unlink()
    _, problems = proxy_mode_rules.check(cluster, out)
    assert len(problems) == 1 and problems[0].startswith("manifests/windows-containerd/ ConfigMap kube-proxy.args: "
                                                        "not rendered for worker-win"), problems


def test_a_profile_without_a_mode_stops_the_render_naming_the_key(tmp_path):
    boxes = tmp_path / "boxes"
    shutil.copytree(ROOT / "boxes", boxes)
    profile = boxes / "ubuntu-2604.yml"  # the master of examples/cluster-modern.yml
    profile.write_text(profile.read_text().replace("  kube_proxy_mode: iptables\n", "", 1))
    result = invoke("render", "--config", str(ROOT / "examples" / "cluster-modern.yml"), "--out", str(tmp_path / "out"),
                    env={sources.BOX_DIRS_ENV: str(boxes)})
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "Traceback" not in output
    assert "names no kubernetes.kube_proxy_mode" in " ".join(output.split())
