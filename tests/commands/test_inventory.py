"""`invoke inventory`: the Linux nodes as a kubespray inventory, through the real CLI.

The groups are the ones kubespray's playbooks run on, at kubernetes-sigs/kubespray@v2.31.0
(1c9add48975060f45396b34d8e022c30d7f80dab): docs/ansible/inventory.md (kube_control_plane, kube_node,
etcd; k8s_cluster the union of kube_node and kube_control_plane), inventory/sample/inventory.ini
(ansible_host and ip per host, `[etcd:children] kube_control_plane`)."""

from __future__ import annotations

import yaml

from tests.helpers import ROOT, invoke
from k4w.model.config import parse

KUBESPRAY_GROUPS = {"kube_control_plane", "kube_node", "etcd", "k8s_cluster"}


def test_inventory_lists_the_linux_nodes_in_kubesprays_groups(tmp_path):
    out = tmp_path / "out"
    result = invoke("inventory", "--config", str(ROOT / "examples" / "cluster-modern.yml"), "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    doc = yaml.safe_load((out / "inventory" / "hosts.yaml").read_text())["all"]
    groups = doc["children"]
    assert set(groups) == KUBESPRAY_GROUPS
    assert list(groups["kube_control_plane"]["hosts"]) == ["master"]
    assert list(groups["kube_node"]["hosts"]) == ["worker-linux"]          # the Windows worker is not kubespray's
    assert groups["etcd"] == {"children": {"kube_control_plane": None}}
    assert groups["k8s_cluster"] == {"children": {"kube_control_plane": None, "kube_node": None}}
    cfg = parse((ROOT / "examples" / "cluster-modern.yml").read_text())
    for node in (n for n in cfg.nodes if n.box.startswith("ubuntu")):
        host = doc["hosts"][node.name]
        assert host["ansible_host"] == host["ip"] == str(node.ip)
        assert host["ansible_user"] == "vagrant"
        assert host["ansible_ssh_private_key_file"] == str(out.resolve() / "vagrant-state" / "machines" / node.name / "hyperv" / "private_key")
    assert "worker-win" not in doc["hosts"]


def test_inventory_dry_run_writes_nothing(tmp_path):
    out = tmp_path / "out"
    result = invoke("inventory", "--config", str(ROOT / "examples" / "cluster-modern.yml"), "--out", str(out), "--dry-run")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "kube_control_plane:" in result.stdout and not (out / "inventory").exists()


def test_a_node_named_like_an_ansible_or_kubespray_group_or_localhost_is_refused(tmp_path):
    """A host named etcd is taken for kubespray's etcd group, one named all or ungrouped for Ansible's
    default groups, and one named localhost replaces Ansible's implicit localhost (every
    `delegate_to: localhost` task would run on it): refused, naming the node, and nothing is written."""
    data = yaml.safe_load((ROOT / "examples" / "cluster-modern.yml").read_text())
    linux = next(i for i, n in enumerate(data["nodes"]) if n["box"].startswith("ubuntu") and n["role"] == "worker")
    for name in ("etcd", "all", "ungrouped", "localhost"):
        data["nodes"][linux]["name"] = name
        config = tmp_path / f"{name}.yml"
        config.write_text(yaml.safe_dump(data))
        out = tmp_path / f"out-{name}"
        result = invoke("inventory", "--config", str(config), "--out", str(out))
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stdout + result.stderr
        assert f"invoke inventory: node name(s) {name} are group or host names Ansible and kubespray use themselves" \
            in result.stderr, result.stderr
        assert not (out / "inventory").exists()


def test_on_libvirt_the_key_is_the_one_vagrant_libvirt_keeps(tmp_path):
    """Vagrant keeps a machine's inserted key under its provider's folder: libvirt/ there, not hyperv/."""
    from k4w.commands import inventory
    from k4w.derive.cluster import Cluster
    from tests.cluster.conftest import libvirt_config

    cluster = Cluster.resolve(parse(yaml.safe_dump(libvirt_config()), "t.yml"))
    doc = inventory.hosts(cluster, tmp_path)["all"]["hosts"]
    assert doc["master"]["ansible_ssh_private_key_file"] == str(tmp_path.resolve() / "vagrant-state" / "machines" / "master" / "libvirt" / "private_key")
