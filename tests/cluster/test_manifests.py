"""Rendered manifests, kubeadm config and Windows node configs pass kubernetes-validate (oldest
schema) and agree with cluster.yml; every structural rule fires on a broken variant."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from k4w.infra import sources
from k4w.validate import manifest_rules as checks
from k4w.infra.errors import K4wError
from tests.cluster.conftest import LINUX_ONLY_VXLAN, render_to
from tests.helpers import config_dict, modern_config, use_sources


def test_default_host_gw_render_passes_every_check(default_render):
    cluster, out = default_render
    assert checks.check_manifests(out, cluster) == []
    # and without the config, artifacts are still compared with each other
    assert checks.check_manifests(out) == []


def test_linux_only_vxlan_render_passes_every_check(tmp_path):
    cluster = render_to(tmp_path, LINUX_ONLY_VXLAN)
    assert checks.check_manifests(tmp_path, cluster) == []
    netconf = _flannel_netconf(tmp_path)
    assert netconf == {"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan", "VNI": 4096, "Port": 4789}}


@pytest.fixture
def vxlan_windows_profile(tmp_path, monkeypatch):
    """A Server 2019-like Windows profile (vxlan capable) beside the real ones."""
    pdir = tmp_path / "profiles"
    shutil.copytree(sources.REPO.boxes, pdir)
    data = yaml.safe_load((pdir / "windows-1803.yml").read_text())
    data.update(name="windows-2019t", supports_vxlan=True)
    (pdir / "windows-2019t.yml").write_text(yaml.safe_dump(data))
    use_sources(monkeypatch, box_folders=(pdir,))
    return "windows-2019t"


def test_vxlan_windows_node_configs_use_overlay(tmp_path, vxlan_windows_profile):
    data = config_dict(**{"network.backend": "vxlan", "nodes.2.box": vxlan_windows_profile})
    out = tmp_path / "out"
    cluster = render_to(out, data)
    assert checks.check_manifests(out, cluster) == []
    node = out / "nodes" / "worker-win"
    cni = json.loads((node / "cni.conf").read_text())
    assert (cni["name"], cni["delegate"]["type"]) == ("vxlan0", "win-overlay")
    assert json.loads((node / "net-conf.json").read_text())["Backend"] == {"Type": "vxlan", "VNI": 4096, "Port": 4789, "name": "vxlan0"}


def test_empty_cgroup_driver_is_reported_naming_the_profile_key(tmp_path):
    # e.g. `cgroup_driver: null` in the master's profile
    cluster = render_to(tmp_path, config_dict(), cgroup_driver=None)
    problems = checks.check_manifests(tmp_path, cluster)
    assert len(problems) == 1 and "components.docker.cgroup_driver" in problems[0]


# ------------------------------------------------------------------ kubeadm API versions

def _era(api: str) -> dict:
    """A newer Kubernetes era than the profiles pin, for the kubeadm API under test."""
    return {"kubeadm_api": api, "version": "1.25.16", "cgroup_driver": "systemd"}


def test_v1beta3_kubeadm_config_has_init_cluster_and_component_configs(tmp_path):
    render_to(tmp_path, config_dict(), **_era("kubeadm.k8s.io/v1beta3"))
    docs = list(yaml.safe_load_all((tmp_path / "kubeadm" / "kubeadm-config.yaml").read_text()))
    kinds = [(d["apiVersion"], d["kind"]) for d in docs]
    assert kinds == [("kubeadm.k8s.io/v1beta3", "InitConfiguration"), ("kubeadm.k8s.io/v1beta3", "ClusterConfiguration"),
                     ("kubeproxy.config.k8s.io/v1alpha1", "KubeProxyConfiguration"),
                     ("kubelet.config.k8s.io/v1beta1", "KubeletConfiguration")]
    assert docs[0]["localAPIEndpoint"] == {"advertiseAddress": "192.168.250.10", "bindPort": 6443}
    assert docs[0]["nodeRegistration"] == {"name": "master", "kubeletExtraArgs": {"node-ip": "192.168.250.10"}}
    assert docs[1]["kubernetesVersion"] == "v1.25.16" and docs[1]["controlPlaneEndpoint"] == "192.168.250.10:6443"
    assert docs[3]["cgroupDriver"] == "systemd"
    assert checks.check_kubeadm(docs, checks.Expected("10.244.0.0/16", "10.96.0.0/12", "10.96.0.10", "host-gw", "cluster.local")) == []


def test_v1alpha2_kubeadm_config_is_one_master_configuration(default_render):
    _, out = default_render
    docs = list(yaml.safe_load_all((out / "kubeadm" / "kubeadm-config.yaml").read_text()))
    assert len(docs) == 1 and docs[0]["apiVersion"] == "kubeadm.k8s.io/v1alpha2" and docs[0]["kind"] == "MasterConfiguration"
    master = docs[0]
    assert master["api"] == {"advertiseAddress": "192.168.250.10", "bindPort": 6443}
    assert master["networking"] == {"podSubnet": "10.244.0.0/16", "serviceSubnet": "10.96.0.0/12", "dnsDomain": "cluster.local"}
    assert master["kubeProxy"]["config"]["clusterCIDR"] == "10.244.0.0/16"
    assert master["kubeletConfiguration"]["baseConfig"]["clusterDNS"] == ["10.96.0.10"]
    assert master["imageRepository"] == "registry.k8s.io" and master["kubernetesVersion"] == "v1.11.10"


def test_unsupported_kubeadm_api_fails_the_render_naming_it(tmp_path):
    # v1alpha1 (1.10) predates nodeRegistration; v1beta5 does not exist.
    for api in ("kubeadm.k8s.io/v1alpha1", "kubeadm.k8s.io/v1beta5"):
        with pytest.raises(K4wError, match=rf"kubeadm API '{api}' \(kubernetes.kubeadm_api in the master's profile\) is not supported"):
            render_to(tmp_path, config_dict(), **_era(api))


# ------------------------------------------------------------------ every rule fires

def _flannel_netconf(out: Path) -> dict:
    for doc in yaml.safe_load_all((out / "manifests" / "kube-flannel.yaml").read_text()):
        if doc and doc["kind"] == "ConfigMap":
            return json.loads(doc["data"]["net-conf.json"])
    raise AssertionError("no ConfigMap")


def _edit_yaml(path: Path, edit) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for doc in docs:
        edit(doc)
    path.write_text(yaml.safe_dump_all(docs))


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new))


def _set_netconf(doc, **backend):
    if doc["kind"] == "ConfigMap":
        conf = json.loads(doc["data"]["net-conf.json"])
        conf.update(backend.pop("top", {}))
        conf["Backend"].update(backend)
        doc["data"]["net-conf.json"] = json.dumps(conf)


def _flannel_ds(edit):
    def apply(doc):
        if doc["kind"] == "DaemonSet":
            edit(doc)
    return apply


# The group binding windows-node-rbac.yaml had before the Windows components got identities of their own.
NODES_GROUP_BINDING = """---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: k4w:windows-kube-proxy
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:node-proxier
subjects:
  - apiGroup: rbac.authorization.k8s.io
    kind: Group
    name: system:nodes
"""


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


BROKEN = {
    "system:nodes group binding": ("manifests/windows-node-rbac.yaml", lambda p: _append(p, NODES_GROUP_BINDING), "binds the built-in group 'system:nodes'"),
    "kube-proxy identity widened": ("manifests/windows-node-rbac.yaml", lambda p: _replace(p, "name: \"system:node-proxier\"", "name: \"cluster-admin\""), "its Linux twin has 'system:node-proxier'"),
    "no token secret": ("manifests/windows-node-rbac.yaml", lambda p: _replace(p, "type: kubernetes.io/service-account-token", "type: Opaque"), "no kubernetes.io/service-account-token Secret"),
    "kube-proxy on the kubelet's credential": ("nodes/worker-win/kube-proxy.args", lambda p: _replace(p, "kube-proxy.conf", "kubelet.conf"), "that is the kubelet's credential"),
    "flanneld on the kubelet's credential": ("nodes/worker-win/flanneld.args", lambda p: _replace(p, "flanneld.conf", "kubelet.conf"), "that is the kubelet's credential"),
    "old API group": ("manifests/windows-node-rbac.yaml", lambda p: _replace(p, "rbac.authorization.k8s.io/v1", "rbac.authorization.k8s.io/v1beta1"), "is not one of"),
    "extensions/v1beta1": ("manifests/kube-flannel.yaml", lambda p: _replace(p, "apiVersion: apps/v1", "apiVersion: extensions/v1beta1"), "is not one of"),
    "schema: unknown field": ("manifests/kube-flannel.yaml", lambda p: _edit_yaml(p, _flannel_ds(lambda d: d["spec"]["template"]["spec"].update(nodeSelecter={}))), "kubernetes-validate"),
    "schema: wrong type": ("manifests/demo-win-webserver.yaml", lambda p: _edit_yaml(p, lambda d: d["kind"] == "Deployment" and d["spec"].update(replicas="one")), "kubernetes-validate"),
    "flannel Network": ("manifests/kube-flannel.yaml", lambda p: _edit_yaml(p, lambda d: _set_netconf(d, top={"Network": "10.245.0.0/16"})), "Network is '10.245.0.0/16'"),
    "flannel backend": ("manifests/kube-flannel.yaml", lambda p: _edit_yaml(p, lambda d: _set_netconf(d, Type="vxlan")), "Backend.Type is 'vxlan'"),
    "vxlan keys on host-gw": ("manifests/kube-flannel.yaml", lambda p: _edit_yaml(p, lambda d: _set_netconf(d, VNI=4096)), "VNI/Port are vxlan settings"),
    "flannel on windows nodes": ("manifests/kube-flannel.yaml", lambda p: _edit_yaml(p, _flannel_ds(lambda d: d["spec"]["template"]["spec"].pop("nodeSelector"))), "needs nodeSelector"),
    "demo on linux": ("manifests/demo-win-webserver.yaml", lambda p: _replace(p, ": windows", ": linux"), "needs nodeSelector"),
    "nano server check on linux": ("manifests/demo-win-webserver.yaml", lambda p: _edit_yaml(p, lambda d: d["kind"] == "Pod" and d["spec"].update(nodeSelector={})),
                                   "Pod win-nanoserver-volumes needs nodeSelector"),
    "kube-proxy patch": ("manifests/patches/linux-node-selector.yaml", lambda p: _replace(p, ": linux", ": windows"), "nodeSelector must be"),
    "kubeadm podSubnet": ("kubeadm/kubeadm-config.yaml", lambda p: _replace(p, "podSubnet: \"10.244.0.0/16\"", "podSubnet: \"10.32.0.0/16\""), "networking.podSubnet"),
    "kubeadm serviceSubnet": ("kubeadm/kubeadm-config.yaml", lambda p: _replace(p, "serviceSubnet: \"10.96.0.0/12\"", "serviceSubnet: \"10.112.0.0/12\""), "networking.serviceSubnet"),
    "kube-proxy clusterCIDR": ("kubeadm/kubeadm-config.yaml", lambda p: _replace(p, "clusterCIDR: \"10.244.0.0/16\"", "clusterCIDR: \"10.0.0.0/16\""), "clusterCIDR"),
    "kubelet clusterDNS": ("kubeadm/kubeadm-config.yaml", lambda p: _replace(p, "- \"10.96.0.10\"", "- \"10.96.0.53\""), "clusterDNS"),
    "windows kubelet cluster-dns": ("nodes/worker-win/kubelet.args", lambda p: _replace(p, "--cluster-dns=10.96.0.10", "--cluster-dns=10.0.0.10"), "--cluster-dns"),
    "windows kubelet node-ip": ("nodes/worker-win/kubelet.args", lambda p: _replace(p, "--node-ip=192.168.250.21", "--node-ip=192.168.250.22"), "--node-ip"),
    "windows pause image": ("nodes/worker-win/kubelet.args", lambda p: _replace(p, "--pod-infra-container-image=kubeletwin/pause:1803\n", ""), "pause_image"),
    "windows arg with a space": ("nodes/worker-win/kubelet.args", lambda p: _replace(p, "--v=2", "--v=2 --x"), "not a single --flag"),
    "kube-proxy cluster-cidr": ("nodes/worker-win/kube-proxy.args", lambda p: _replace(p, "--cluster-cidr=10.244.0.0/16", "--cluster-cidr=10.200.0.0/16"), "--cluster-cidr"),
    "flannel iface": ("nodes/worker-win/flanneld.args", lambda p: _replace(p, "--iface=192.168.250.21", "--iface=10.0.2.15"), "--iface"),
    "flannel NODE_NAME": ("nodes/worker-win/flanneld.env", lambda p: _replace(p, "NODE_NAME=worker-win", "NODE_NAME=other"), "NODE_NAME"),
    "kube-proxy network": ("nodes/worker-win/kube-proxy.env", lambda p: _replace(p, "KUBE_NETWORK=cbr0", "KUBE_NETWORK=vxlan0"), "KUBE_NETWORK"),
    "windows net-conf Network": ("nodes/worker-win/net-conf.json", lambda p: _edit_json(p, lambda d: d.update(Network="10.1.0.0/16")), "Network is '10.1.0.0/16'"),
    "windows net-conf backend": ("nodes/worker-win/net-conf.json", lambda p: _edit_json(p, lambda d: d["Backend"].update(Type="vxlan")), "Backend.Type"),
    "windows net-conf name": ("nodes/worker-win/net-conf.json", lambda p: _edit_json(p, lambda d: d["Backend"].update(name="vxlan0")), "Backend.name"),
    "cni plugin": ("nodes/worker-win/cni.conf", lambda p: _edit_json(p, lambda d: d["delegate"].update(type="win-overlay")), "delegate.type"),
    "cni dns": ("nodes/worker-win/cni.conf", lambda p: _edit_json(p, lambda d: d["delegate"]["dns"].update(Nameservers=["8.8.8.8"])), "Nameservers"),
    "cni nat exceptions": ("nodes/worker-win/cni.conf", lambda p: _edit_json(p, lambda d: d["delegate"]["policies"][0]["value"]["ExceptionList"].remove("10.244.0.0/16")), "ExceptionList"),
    "cni service route": ("nodes/worker-win/cni.conf", lambda p: _edit_json(p, lambda d: d["delegate"]["policies"].pop(1)), "service CIDR"),
    "cni node route": ("nodes/worker-win/cni.conf", lambda p: _edit_json(p, lambda d: d["delegate"]["policies"].pop(2)), "/32"),
    "node.json": ("nodes/worker-win/node.json", lambda p: _edit_json(p, lambda d: d.update(network_name="nat")), "node.json"),
    "node.json dns_ip": ("nodes/worker-win/node.json", lambda p: _edit_json(p, lambda d: d.update(dns_ip="10.96.0.11")), "dns_ip is '10.96.0.11'"),
    "node.json pod_cidr": ("nodes/worker-win/node.json", lambda p: _edit_json(p, lambda d: d.update(pod_cidr="10.1.0.0/16")), "pod_cidr is '10.1.0.0/16'"),
    "missing node file": ("nodes/worker-win/flanneld.env", lambda p: p.unlink(), "missing flanneld.env"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_each_rule_fires_on_a_broken_variant(case, default_render):
    cluster, out = default_render
    rel, breaker, expected = BROKEN[case]
    breaker(out / rel)
    problems = checks.check_manifests(out, cluster)
    assert any(expected in p for p in problems), problems


def test_vxlan_needs_vni_4096_and_port_4789(tmp_path):
    cluster = render_to(tmp_path, LINUX_ONLY_VXLAN)
    _edit_yaml(tmp_path / "manifests" / "kube-flannel.yaml", lambda d: _set_netconf(d, VNI=1))
    problems = checks.check_manifests(tmp_path, cluster)
    assert any("vxlan needs VNI 4096 and Port 4789" in p for p in problems), problems


def test_kubernetes_validate_uses_its_oldest_schema(default_render):
    from kubernetes_validate import utils

    _, out = default_render
    oldest = utils.all_versions()[0]
    _edit_yaml(out / "manifests" / "windows-node-rbac.yaml", lambda d: d["kind"] == "ClusterRoleBinding" and d["subjects"][0].update(kind=7))
    problems = checks.check_manifests(out)
    assert any(f"kubernetes-validate {oldest} (strict)" in p for p in problems), problems


# The containerd era's Windows CNI config: HCN (apiVersion 2) with its policy shapes.
MODERN_BROKEN = {
    "hns v1 under containerd": (lambda d: d["delegate"].pop("apiVersion"), "delegate.apiVersion must be 2 under containerd"),
    "no dns capability": (lambda d: d.pop("capabilities"), "capabilities.dns is not set"),
    "hcn nat exceptions": (lambda d: d["delegate"]["policies"][0]["value"]["Settings"]["Exceptions"].remove("10.96.0.0/12"),
                           "OutBoundNAT Exceptions"),
    "hcn service route": (lambda d: d["delegate"]["policies"].pop(1), "no SDNRoute policy for the service CIDR"),
}


@pytest.fixture
def modern_render(tmp_path):
    out = tmp_path / "build"
    return render_to(out, modern_config()), out


def test_the_containerd_era_cni_config_passes(modern_render):
    cluster, out = modern_render
    assert checks.check_manifests(out, cluster) == []


@pytest.mark.parametrize("case", sorted(MODERN_BROKEN))
def test_each_containerd_era_cni_rule_fires(case, modern_render):
    cluster, out = modern_render
    breaker, expected = MODERN_BROKEN[case]
    _edit_json(out / "nodes" / "worker-win" / "cni.conf", breaker)
    problems = checks.check_manifests(out, cluster)
    assert any(expected in p for p in problems), problems
