"""The modern era's cluster artifacts (issue 14): kubeadm v1beta4 and Flannel v0.28, rendered by the
real `invoke render` from a master whose profile names them, and checked by the real `invoke
validate`; the seed era's files stay exactly as they were."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from k4w.validate import manifest_rules as checks
from tests.helpers import MODERN_BOXES, MODERN_ENV as ENV, invoke, modern_config, tree_digest, write_config

# Flannel v0.28.10's images (flannel-io/flannel Documentation/kube-flannel.yml at v0.28.10).
FLANNEL_IMAGE = "ghcr.io/flannel-io/flannel:v0.28.10"
CNI_PLUGIN_IMAGE = "ghcr.io/flannel-io/flannel-cni-plugin:v1.9.1-flannel1"


def render_modern(tmp_path: Path, data: dict | None = None) -> Path:
    cfg = write_config(tmp_path / "cluster.yml", data or modern_config())
    out = tmp_path / "out"
    result = invoke("render", "--config", str(cfg), "--out", str(out), env=ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_v1beta4_kubeadm_config_uses_arg_lists_and_timeouts(tmp_path):
    out = render_modern(tmp_path, modern_config(**{"cluster.ready_timeout": 1200}))
    docs = _docs(out / "kubeadm" / "kubeadm-config.yaml")
    assert [(d["apiVersion"], d["kind"]) for d in docs] == [
        ("kubeadm.k8s.io/v1beta4", "InitConfiguration"), ("kubeadm.k8s.io/v1beta4", "ClusterConfiguration"),
        ("kubeproxy.config.k8s.io/v1alpha1", "KubeProxyConfiguration"), ("kubelet.config.k8s.io/v1beta1", "KubeletConfiguration")]
    init, cluster, proxy, kubelet = docs
    assert init["nodeRegistration"]["kubeletExtraArgs"] == [{"name": "node-ip", "value": "192.168.250.10"}]
    assert init["nodeRegistration"]["criSocket"] == "unix:///var/run/containerd/containerd.sock"
    assert init["localAPIEndpoint"] == {"advertiseAddress": "192.168.250.10", "bindPort": 6443}
    # kubeadm waits for the control plane as long as cluster-up waits for a node; its API calls, the
    # first of which waits for the API server (1.37's admin binding), have their own named bound
    # (k4w.model.kubeadm_timeouts), not ready_timeout: kubeadm retries a permanent refusal that long
    assert init["timeouts"] == {"controlPlaneComponentHealthCheck": "1200s", "kubernetesAPICall": "600s"}
    assert "timeoutForControlPlane" not in json.dumps(docs)
    assert cluster["kubernetesVersion"] == "v1.37.2" and cluster["imageRepository"] == "registry.k8s.io"
    assert cluster["networking"] == {"podSubnet": "10.244.0.0/16", "serviceSubnet": "10.96.0.0/12", "dnsDomain": "cluster.local"}
    assert proxy["clusterCIDR"] == "10.244.0.0/16"
    assert kubelet["clusterDNS"] == ["10.96.0.10"] and kubelet["cgroupDriver"]
    # CIS: the kubelet holds the kernel to its tunables (bake step 02-kernel.sh sets them, checked in
    # tests/bake/ubuntu/test_ubuntu_guest_steps.py)
    assert kubelet["protectKernelDefaults"] is True


def test_flannel_v028_manifest_matches_the_windows_net_conf(tmp_path):
    out = render_modern(tmp_path)
    docs = _docs(out / "manifests" / "kube-flannel.yaml")
    assert [d["kind"] for d in docs] == ["Namespace", "ClusterRole", "ClusterRoleBinding", "ServiceAccount", "ConfigMap", "DaemonSet"]
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding")} == {"kube-flannel"}
    config = next(d for d in docs if d["kind"] == "ConfigMap")
    netconf = json.loads(config["data"]["net-conf.json"])
    assert netconf == {"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan", "VNI": 4096, "Port": 4789}}
    windows = json.loads((out / "nodes" / "worker-win" / "net-conf.json").read_text())
    assert {k: v for k, v in windows["Backend"].items() if k != "name"} == netconf["Backend"]
    assert windows["Network"] == netconf["Network"]
    pod = next(d for d in docs if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    images = [c["image"] for c in pod["initContainers"] + pod["containers"]]
    assert images == [CNI_PLUGIN_IMAGE, FLANNEL_IMAGE, FLANNEL_IMAGE]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert "--iface=$(HOST_IP)" in pod["containers"][0]["args"]
    # flanneld's health endpoint on the cluster address only (its default --healthz-ip is 0.0.0.0, and
    # the pod shares the host's network, management NIC included)
    flanneld = pod["containers"][0]
    assert "--healthz-port=8081" in flanneld["args"] and "--healthz-ip=$(HOST_IP)" in flanneld["args"]
    host_ip = next(e for e in flanneld["env"] if e["name"] == "HOST_IP")
    assert host_ip["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"


@pytest.mark.tools
def test_real_validate_accepts_the_modern_cluster_artifacts(tmp_path):
    """Everything issue 14 item 3 renders passes the real validators: kubernetes-validate and the
    agreement rules on the manifests, the v1beta4 field table on the kubeadm config."""
    cfg = write_config(tmp_path / "cluster.yml", modern_config())
    result = invoke("validate", "--config", str(cfg), "--out", str(tmp_path / "out"), env=ENV)
    output = result.stdout + result.stderr
    assert "✓ kubeadm config: 1 checked by fields of kubeadm's types at the pinned API" in output, output
    assert "✓ Kubernetes manifests and node configs:" in output, output


def test_the_seed_eras_kubeadm_config_and_flannel_manifest_are_unchanged(tmp_path):
    """Byte for byte what the seed templates rendered before the era split (sha256 of the render
    of cluster.yml at commit 53238ed, before issue 14), but for one deliberate change: since issue
    25 item 11 every string is double-quoted (k4w.render.escape.yaml); PyYAML parses both renders
    to equal documents."""
    out = tmp_path / "out"
    result = invoke("render", "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    digests = {rel: d[:64] for rel, d in tree_digest(out).items() if rel in SEED_DIGESTS}
    assert digests == SEED_DIGESTS


SEED_DIGESTS = {
    "kubeadm/kubeadm-config.yaml": "80e32e233d406259a7d7c28fc37260b91ff30583dd360f9f4f3b1764fe6b30b9",
    "manifests/kube-flannel.yaml": "f28613e34ea74f1afbfdaa7195bcab4f48247e7ac6df432ecebbda9848a6b0b9",
}


def test_a_profile_naming_no_flannel_template_fails_the_render_naming_the_key(tmp_path):
    boxes = tmp_path / "boxes"
    boxes.mkdir()
    data = yaml.safe_load((MODERN_BOXES / "ubuntu-2404.yml").read_text())
    data["kubernetes"]["flannel_manifest"] = "v9.99"
    (boxes / "ubuntu-2404.yml").write_text(yaml.safe_dump(data))
    (boxes / "windows-2022.yml").write_text((MODERN_BOXES / "windows-2022.yml").read_text())
    cfg = write_config(tmp_path / "cluster.yml", modern_config())
    out = tmp_path / "out"
    result = invoke("render", "--config", str(cfg), "--out", str(out), env={"K4W_BOX_DIRS": str(boxes)})
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "Traceback" not in output
    assert "kubernetes.flannel_manifest 'v9.99'" in output and "templates/manifests/flannel/v9.99.yaml.j2" in output, output
    # nothing rendered: only the lock and the per-build secrets, which the render makes first
    assert not [p.name for p in out.iterdir() if p.name not in (".lock", "secrets")]


def test_a_profile_without_flannel_manifest_fails_the_render_naming_the_key(tmp_path):
    boxes = tmp_path / "boxes"
    boxes.mkdir()
    data = yaml.safe_load((MODERN_BOXES / "ubuntu-2404.yml").read_text())
    del data["kubernetes"]["flannel_manifest"]
    (boxes / "ubuntu-2404.yml").write_text(yaml.safe_dump(data))
    (boxes / "windows-2022.yml").write_text((MODERN_BOXES / "windows-2022.yml").read_text())
    cfg = write_config(tmp_path / "cluster.yml", modern_config())
    result = invoke("render", "--config", str(cfg), "--out", str(tmp_path / "out"), env={"K4W_BOX_DIRS": str(boxes)})
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "Traceback" not in output
    assert "no kubernetes.flannel_manifest" in output, output


def test_the_runtime_component_decides_the_kubelet_cgroup_driver(tmp_path):
    """kube.cgroup_driver reads the master's runtime component: containerd when the profile has
    one (the modern era), else docker (the seed era), and the missing-key problem names it."""
    from k4w.derive.cluster import kube_era
    from k4w.model.profiles import Attr, Profile

    def profile(components: dict) -> Profile:
        data = yaml.safe_load((MODERN_BOXES / "ubuntu-2404.yml").read_text())
        data["components"] = components
        return Profile("ubuntu-2404", MODERN_BOXES / "ubuntu-2404.yml", Attr.wrap(data))

    modern = kube_era(profile({"containerd": {"version": "2.3.7", "cgroup_driver": "systemd"}}))
    assert (modern.runtime, modern.cgroup_driver) == ("containerd", "systemd")
    seed = kube_era(profile({"docker": {"version": "17.03.2", "cgroup_driver": "cgroupfs"}}))
    assert (seed.runtime, seed.cgroup_driver) == ("docker", "cgroupfs")
    unset = kube_era(profile({"containerd": {"version": "2.3.7"}}))
    expected = checks.Expected("10.244.0.0/16", "10.96.0.0/12", "10.96.0.10", "vxlan", "cluster.local", runtime=unset.runtime)
    docs = [{"kind": "ClusterConfiguration", "networking": {"podSubnet": "10.244.0.0/16", "serviceSubnet": "10.96.0.0/12",
                                                            "dnsDomain": "cluster.local"}},
            {"kind": "KubeProxyConfiguration", "clusterCIDR": "10.244.0.0/16"},
            {"kind": "KubeletConfiguration", "clusterDNS": ["10.96.0.10"]}]
    assert checks.check_kubeadm(docs, expected) == [
        "kubeadm-config.yaml: KubeletConfiguration.cgroupDriver is missing: set components.containerd.cgroup_driver in the "
        "master's box profile (boxes/<box>.yml) so the kubelet uses containerd's driver (kube.cgroup_driver)"]
