"""cluster.existing in cluster.yml (issue 24): workers only, the kubeconfig's path on one line; the
example renders, passes the real validate and plans a join without a master."""

from __future__ import annotations

import pytest
import yaml

from k4w.model.config import parse
from k4w.infra.errors import ConfigError
from tests.helpers import ROOT, invoke, write_config

EXISTING = ROOT / "examples" / "cluster-existing.yml"


def example(**cluster) -> dict:
    data = yaml.safe_load(EXISTING.read_text())
    data["cluster"].update(cluster)
    return data


def test_a_master_is_refused_beside_an_existing_cluster():
    data = example()
    data["nodes"].insert(0, {"name": "master", "role": "master", "box": "ubuntu-2404", "ip": "192.168.252.10"})
    with pytest.raises(ConfigError) as refused:
        parse(yaml.safe_dump(data))
    assert "nodes[0].role: master is not allowed with cluster.existing" in str(refused.value)


def test_without_existing_a_master_is_still_required():
    data = example(existing=None)
    with pytest.raises(ConfigError) as refused:
        parse(yaml.safe_dump(data))
    assert "exactly one node must have role 'master', found 0" in str(refused.value)


def test_the_path_must_be_one_line():
    with pytest.raises(ConfigError) as refused:
        parse(yaml.safe_dump(example(existing="a\nb")))
    assert "must be the path of a kubeconfig file on one line" in str(refused.value)


def test_the_example_renders_no_kubeadm_init_config_and_no_flannel_manifest(tmp_path):
    out = tmp_path / "out"
    result = invoke("render", "--config", str(EXISTING), "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (out / "kubeadm").exists() and not (out / "manifests" / "kube-flannel.yaml").exists()
    assert not (out / "manifests" / "patches").exists()   # k4w never patches the cluster's own DaemonSets
    # The example's Windows box is the containerd era: its HostProcess DaemonSets are what cluster-up
    # applies, and no seed-era token-Secret identities are rendered.
    assert (out / "manifests" / "windows-containerd" / "windows-node-daemonsets.yaml").is_file()
    assert not (out / "manifests" / "windows-node-rbac.yaml").exists()
    # The Windows CNI config names the DNS IP that cluster-up holds to the cluster's kube-dns Service.
    assert '"Nameservers": ["10.96.0.10"]' in (out / "nodes" / "winx-1" / "cni.conf").read_text()


@pytest.mark.tools
def test_the_existing_example_passes_the_real_validate(tmp_path):
    out = tmp_path / "out"
    result = invoke("validate", "--config", str(EXISTING), "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr


def test_plan_shows_the_join_only_plan(tmp_path):
    result = invoke("plan", "--config", str(EXISTING), "--out", str(tmp_path / "out"), "--dry-run")
    assert result.returncode == 0, result.stdout + result.stderr
    said = result.stdout
    assert "Cluster plan: join-only, to the existing cluster of ~/.kube/existing-admin.conf (no master VM, no kubeadm init)" in said
    assert "kubeadm init on" not in said
    for fact in ("Kubernetes version", "pod CIDR", "service CIDR", "cluster DNS IP", "CNI", "join RBAC"):
        assert fact in said
    assert "ClusterRoleBinding k4w:windows-flanneld" in said and "Secret kube-system/bootstrap-token-<id>" in said
    assert "Namespace k4w-windows-node" in said and "DaemonSet k4w-windows-node/k4w-kube-proxy-windows" in said
