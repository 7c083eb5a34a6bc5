"""Which interface flanneld takes on a k4w Linux node: the cluster NIC, never the management NIC of the
default route. k4w's own cluster says so in its Flannel manifest (--iface); on a cluster k4w did not
make, k4w.cluster.flannel_address reads the owner's flanneld arguments (the real API tests in
test_existing_real_api.py show what it does with them)."""

from __future__ import annotations

import pytest
import yaml

from k4w import render
from k4w.cluster import flannel_address
from k4w.derive.cluster import Cluster
from k4w.model.config import parse
from tests.helpers import ROOT, config_dict


def test_flanneld_command_lines_are_read_as_gos_flag_package_reads_them():
    found = flannel_address.flags(["/opt/bin/flanneld", "--ip-masq", "-iface", "eth1", "--iface-regex=^ens",
                                   "--iface-can-reach=10.1.2.3", "--kube-annotation-prefix", "example.com/x"])
    assert [w for n, _, w in found if n in flannel_address.INTERFACE_FLAGS] == ["-iface eth1", "--iface-regex=^ens",
                                                                                "--iface-can-reach=10.1.2.3"]
    assert ("kube-annotation-prefix", "example.com/x", "--kube-annotation-prefix example.com/x") in found


@pytest.mark.parametrize("prefix, name", [
    ("flannel.alpha.coreos.com", "flannel.alpha.coreos.com/node-public-ip"),   # main.go's default
    ("example.com", "example.com/node-public-ip"),          # no "/": one is appended (annotations.go)
    ("example.com/x", "example.com/x-node-public-ip"),      # a "/" but not at the end: "-" is appended
    ("example.com/x-", "example.com/x-node-public-ip"),
])
def test_annotation_names_follow_flannels_prefix_rules(prefix, name):
    assert flannel_address.FlannelDaemonSet("kube-flannel", "ds", prefix=prefix).annotation("node-public-ip") == name


@pytest.mark.parametrize("config", ["cluster.yml", "examples/cluster-modern.yml", "examples/cluster-modern-2022.yml"])
def test_k4ws_own_linux_flanneld_is_told_the_cluster_nic_in_every_era(config):
    """k4w's own cluster needs no annotation: its flanneld gets --iface=$(HOST_IP), the Pod's
    status.hostIP, which is the node's InternalIP, which kubelet --node-ip sets to the cluster NIC."""
    cluster = Cluster.resolve(parse((ROOT / config).read_text() if config != "cluster.yml" else yaml.safe_dump(config_dict())))
    text = render.render_files(cluster, ROOT / "build-test-unused")["manifests/kube-flannel.yaml"]
    daemonsets = [d for d in yaml.safe_load_all(text) if isinstance(d, dict) and d.get("kind") == "DaemonSet"]
    assert daemonsets
    for ds in daemonsets:
        container = next(c for c in ds["spec"]["template"]["spec"]["containers"] if flannel_address.runs_flanneld(c))
        parsed = flannel_address.flags([*(container.get("command") or []), *(container.get("args") or [])])
        assert [(n, v) for n, v, _ in parsed if n in flannel_address.INTERFACE_FLAGS] == [("iface", "$(HOST_IP)")], ds["metadata"]["name"]
        env = {e["name"]: e for e in container.get("env") or []}
        assert env["HOST_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.hostIP"}}


def test_the_plan_says_what_k4w_does_with_the_owners_flannel_on_its_linux_workers(tmp_path, capsys):
    from k4w.cluster import existing

    data = yaml.safe_load((ROOT / "examples" / "cluster-existing.yml").read_text())
    data["nodes"].append({"name": "lnx-1", "role": "worker", "box": "ubuntu-2604", "ip": "192.168.252.11", "cpus": 2, "memory": 2048})
    cluster = Cluster.resolve(parse(yaml.safe_dump(data)))
    existing.show_plan(cluster, tmp_path, render.render_files(cluster, tmp_path))
    said = " ".join(capsys.readouterr().out.split())
    assert "Flannel's interface on k4w's Linux workers" in said
    assert "flannel.alpha.coreos.com/node-public-ip to each Linux worker's cluster address" in said
    assert "after each Linux join, its Flannel address" in said
    assert "deleted as soon as its node is Ready" in said


class ListsDaemonSets:
    """An API that lists one flanneld DaemonSet, as the owner's cluster would."""

    def __init__(self, image: str, args: list[str]):
        self.ds = {"metadata": {"name": "kube-flannel-ds", "namespace": "kube-flannel"},
                   "spec": {"selector": {"matchLabels": {"app": "flannel"}},
                            "template": {"spec": {"containers": [{"name": "kube-flannel", "image": image,
                                                                  "command": ["/opt/bin/flanneld"], "args": args}]}}}}

    def get(self, path):
        return {"items": [self.ds] if "/kube-flannel/" in path else []}


@pytest.mark.parametrize("image, args, refused", [
    # flannel-io/flannel: node-public-ip is read from v0.25.3 on (commit 8a6570f4); v0.25.2 read public-ip
    ("docker.io/flannel/flannel:v0.25.2", ["--ip-masq", "--kube-subnet-mgr"], True),
    ("quay.io/coreos/flannel:v0.11.0-amd64", ["--ip-masq", "--kube-subnet-mgr"], True),
    ("registry.example:5000/flannel/flannel:v0.24.0@sha256:" + "a" * 64, ["--kube-subnet-mgr"], True),
    ("docker.io/flannel/flannel:v0.25.3", ["--ip-masq", "--kube-subnet-mgr"], False),
    ("ghcr.io/flannel-io/flannel:v0.28.10", ["--kube-subnet-mgr"], False),
    ("docker.io/flannel/flannel:v0.25.2", ["--kube-subnet-mgr", "--iface-can-reach=192.168.252.10"], False),
    ("registry.example/flannel@sha256:" + "b" * 64, ["--kube-subnet-mgr"], False),   # no tag: cannot tell, steered
])
def test_a_flanneld_too_old_to_read_node_public_ip_and_with_no_interface_argument_is_refused(image, args, refused):
    found = flannel_address.find(ListsDaemonSets(image, args), lambda ds: False)
    why = found.unsteerable()
    assert (why is not None) == refused
    if refused:
        assert "--iface-can-reach" in why and "node-public-ip" in why and image in why
